"""Tests for cbsim.studies.calibration.gemm: the GEMM roofline fit, its held-out-shape accuracy, its
transfer to another GPU, and that the cost model evaluates a fit exactly as the fit predicts."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest

from cbsim.catalog.hardware import get_gpu
from cbsim.common.errors import CbsimError
from cbsim.cost import CostModel
from cbsim.cost.roofline import gemm_flops_bytes
from cbsim.studies.calibration import gemm
from cbsim.studies.calibration.data import load_table
from cbsim.studies.calibration.errors import summarize
from cbsim.studies.calibration.profile import CalibrationProfile, read_profile, write_json

H100 = get_gpu("h100-sxm")
TARGET_MEDIAN, TARGET_P90 = 0.05, 0.15
TRANSFER_MEDIAN, TRANSFER_P90 = 0.10, 0.25

# weight shapes of serving models that the tables do not measure (Llama-3 8B/70B MLP and LM head)
UNMEASURED_SHAPES = [(14336, 4096), (4096, 14336), (28672, 8192), (8192, 28672), (128256, 4096)]


@pytest.fixture(scope="module")
def h100_table() -> pd.DataFrame:
    return load_table("gemm", "h100-sxm")


@pytest.fixture(scope="module")
def h100_fit(h100_table):
    return gemm.fit_gemm(h100_table, H100, "bf16")


def errors(frame: pd.DataFrame, column: str = "predicted_s") -> dict[str, float]:
    return summarize(frame[column].to_numpy(), frame["measured_s"].to_numpy())


SHIPPED = [
    ("a100-80gb", "bf16"),
    ("h100-sxm", "bf16"),
    ("h200", "bf16"),
    ("l40s", "bf16"),
    ("h100-sxm", "fp8"),
    ("h200", "fp8"),
    ("l40s", "fp8"),
]  # A100 has no fp8 tensor cores and its table no fp8 rows
L40S_BF16 = (
    "L40S bf16 misses the P90 target: about 19 % (median 4.7 %); see cbsim.studies.calibration.gemm"
)


@functools.cache
def held_out(
    gpu: str, dtype: str
) -> tuple[pd.DataFrame, dict[str, float], dict[str, dict[str, float]]]:
    """Held-out-shape predictions, their errors and those of both baselines on the same folds."""
    table = load_table("gemm", gpu)
    cv = gemm.holdout_shapes(table, get_gpu(gpu), dtype)
    measured = cv["measured_s"].to_numpy()
    refs = gemm.baselines(table, get_gpu(gpu), dtype)
    return cv, errors(cv), {name: summarize(p, measured) for name, p in refs.items()}


# --------------------------------------------------------------------------- same formula


def test_flops_bytes_equal_the_cost_models_definition():
    rng = np.random.default_rng(0)
    for dtype in ("bf16", "fp8", "fp4"):
        shapes = rng.integers(1, 70000, size=(50, 3))
        m, n, k = shapes.T.astype(np.float64)
        flops, moved = gemm.flops_bytes(m, n, k, dtype)
        for (rows, cols, inner), f, b in zip(shapes.tolist(), flops, moved, strict=True):
            assert (f, b) == gemm_flops_bytes(rows, cols, inner, dtype)


def test_cost_model_gemm_time_equals_predict_gemm(h100_table, h100_fit):
    calibration = CalibrationProfile(gpu="h100-sxm", name="test", gemm={"bf16": h100_fit})
    model = CostModel(model="llama-3-8b", gpu="h100-sxm", calibration=calibration)
    rows = gemm.gemm_rows(h100_table, "bf16").sample(300, random_state=1)
    extra = pd.DataFrame(
        [(m, n, k) for n, k in UNMEASURED_SHAPES for m in (1, 7, 300, 5000, 65536)]
        + [(3, 20, 100000), (100000, 20, 20)],  # outside the measured range on every axis
        columns=["m", "n", "k"],
    )
    shapes = pd.concat([rows[["m", "n", "k"]], extra], ignore_index=True)
    predicted = gemm.predict_gemm(h100_fit, shapes, H100, "bf16")
    for (m, n, k), p in zip(shapes.itertuples(index=False), predicted, strict=True):
        assert model.gemm_time(int(m), int(n), int(k)) == pytest.approx(p, rel=1e-12)


def test_profile_round_trip_predicts_the_same(tmp_path, h100_table, h100_fit):
    profile = CalibrationProfile(gpu="h100-sxm", name="test", gemm={"bf16": h100_fit})
    loaded = read_profile(write_json(profile, tmp_path / "test.json")).gemm["bf16"]
    rows = gemm.gemm_rows(h100_table, "bf16").iloc[::97]
    # profile files keep log corrections to 5 decimals: predictions agree to ~1e-5
    np.testing.assert_allclose(
        gemm.predict_gemm(loaded, rows, H100, "bf16"),
        gemm.predict_gemm(h100_fit, rows, H100, "bf16"),
        rtol=2e-5,
    )


def test_correction_layouts_and_rounding(h100_table, h100_fit):
    correction = h100_fit.correction
    assert correction is not None and correction.features == ["m", "n", "k"]
    sizes = [len(axis) for axis in correction.axes]
    assert sizes == [74, 22, 22]  # every measured m, n, k
    assert len(correction.values) == np.prod(sizes)
    assert all(round(v, 6) == v for v in correction.values)
    compact = gemm.fit_gemm(h100_table, H100, "bf16", layout="compact").correction
    assert compact is not None and len(compact.values) <= 6000


# --------------------------------------------------------------------------- the fit itself


def synthetic_table(floor_s: float, compute_eff: float, memory_eff: float) -> pd.DataFrame:
    """A table timed exactly by a roofline on an H100 (no shape effects)."""
    values = [32, 128, 512, 2048, 8192]
    shapes = [(m, n, k) for m in (1, 4, 16, 64, 256, 1024, 4096) for n in values for k in values]
    frame = pd.DataFrame(shapes, columns=["m", "n", "k"])
    m, n, k = (frame[c].to_numpy(np.float64) for c in "mnk")
    flops, moved = gemm.flops_bytes(m, n, k, "bf16")
    frame["latency_s"] = floor_s + np.maximum(
        flops / (H100.bf16_flops * compute_eff), moved / (H100.hbm_bandwidth * memory_eff)
    )
    frame["dtype"] = "bf16"
    return frame


def test_fit_recovers_a_pure_roofline():
    table = synthetic_table(4e-6, 0.8, 0.7)
    fit = gemm.fit_gemm(table, H100, "bf16")
    assert fit.floor_s == pytest.approx(4e-6, rel=0.02)
    assert fit.compute_eff == pytest.approx(0.8, rel=0.02)
    assert fit.memory_eff == pytest.approx(0.7, rel=0.02)
    assert fit.correction is not None
    assert max(abs(v) for v in fit.correction.values) < 0.01
    predicted = gemm.predict_gemm(fit, table, H100, "bf16")
    np.testing.assert_allclose(predicted, table["latency_s"], rtol=0.01)


def test_a_glitch_is_left_out_of_the_fit():
    table = synthetic_table(4e-6, 0.8, 0.7)
    glitch = (table["m"] == 64) & (table["n"] == 512) & (table["k"] == 2048)
    clean = table["latency_s"][glitch].iloc[0]
    table.loc[glitch, "latency_s"] *= 10.0
    assert gemm.spikes(table).tolist() == glitch.tolist()
    fit = gemm.fit_gemm(table, H100, "bf16")
    assert gemm.predict_gemm(fit, table[glitch], H100, "bf16")[0] == pytest.approx(clean, rel=0.02)


def doubling_ratios(fit, table: pd.DataFrame, gpu, dtype: str) -> np.ndarray:
    """t(2m) / t(m) for every measured and a few unmeasured weight shapes, m from 1 to 16k."""
    shapes = gemm.gemm_rows(table, dtype)[["n", "k"]].drop_duplicates()
    shapes = pd.concat([shapes, pd.DataFrame(UNMEASURED_SHAPES, columns=["n", "k"])])
    ms = np.unique(np.round(2.0 ** np.arange(0.0, 14.0, 1 / 16)))
    grid = pd.DataFrame(
        [(m, n, k) for n, k in shapes.itertuples(index=False) for m in ms], columns=["m", "n", "k"]
    )
    once = gemm.predict_gemm(fit, grid, gpu, dtype)
    twice = gemm.predict_gemm(fit, grid.assign(m=2 * grid["m"]), gpu, dtype)
    assert np.all(once > 0) and np.all(np.isfinite(once))
    return np.asarray(twice / once)


def test_transfer_keeps_every_dimensionless_part(h100_fit):
    moved = gemm.transfer(h100_fit)
    assert moved is not h100_fit
    assert moved.model_dump() == h100_fit.model_dump()


def test_bad_input_is_an_error(h100_table):
    with pytest.raises(CbsimError, match="dtype"):
        gemm.fit_gemm(h100_table, H100, "fp16")
    with pytest.raises(CbsimError, match="no fp8 rows"):
        gemm.fit_gemm(load_table("gemm", "a100-80gb"), get_gpu("a100-80gb"), "fp8")
    with pytest.raises(CbsimError, match="folds"):
        gemm.holdout_shapes(h100_table, H100, "bf16", folds=1)
    with pytest.raises(CbsimError, match="layout"):
        gemm.fit_gemm(h100_table, H100, "bf16", layout="dense")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- held-out accuracy


def test_folds_hold_out_whole_weight_shapes():
    h100_cv = held_out("h100-sxm", "bf16")[0]
    folds_per_shape = h100_cv.groupby(["n", "k"])["fold"].nunique()
    assert (folds_per_shape == 1).all()
    shapes_per_fold = h100_cv.drop_duplicates(["n", "k"])["fold"].value_counts()
    assert sorted(shapes_per_fold.index) == [0, 1, 2, 3, 4]
    assert shapes_per_fold.max() - shapes_per_fold.min() <= 1
    assert len(h100_cv) == len(gemm.gemm_rows(load_table("gemm", "h100-sxm"), "bf16"))


def test_h200_from_h100_fit_and_spec_sheet():
    frame = gemm.leave_one_gpu_out("h100-sxm", "h200", "bf16")
    ours = errors(frame)
    assert ours["median_ape"] <= TRANSFER_MEDIAN
    assert ours["p90_ape"] <= TRANSFER_P90
    for column in ("uncalibrated_s", "constant_s"):
        theirs = errors(frame, column)
        assert ours["median_ape"] < theirs["median_ape"], column
        assert ours["p90_ape"] < theirs["p90_ape"], column


# --------------------------------------------------------------------------- every GPU and dtype


@pytest.mark.parametrize(("gpu", "dtype"), SHIPPED)
def test_shape_aware_fit_beats_both_baselines_everywhere(gpu, dtype):
    _, ours, refs = held_out(gpu, dtype)
    for name, theirs in refs.items():
        assert ours["median_ape"] < theirs["median_ape"], name
        assert ours["p90_ape"] < theirs["p90_ape"], name


@pytest.mark.parametrize(
    ("gpu", "dtype"),
    [
        pytest.param(gpu, dtype, marks=pytest.mark.xfail(strict=True, reason=L40S_BF16))
        if (gpu, dtype) == ("l40s", "bf16")
        else (gpu, dtype)
        for gpu, dtype in SHIPPED
    ],
)
def test_held_out_shapes_reach_the_targets(gpu, dtype):
    _, ours, _ = held_out(gpu, dtype)
    assert ours["median_ape"] <= TARGET_MEDIAN
    assert ours["p90_ape"] <= TARGET_P90


def test_l40s_bf16_stays_where_it_is():
    """The one shipped table short of the P90 target: guard the level it reaches."""
    _, ours, _ = held_out("l40s", "bf16")
    assert ours["median_ape"] <= TARGET_MEDIAN
    assert ours["p90_ape"] <= 0.21


@pytest.mark.parametrize(("gpu", "dtype"), SHIPPED)
def test_predictions_positive_and_monotone_in_m(gpu, dtype):
    """Never more than 10 % faster when m doubles, for every measured shape and a few unmeasured
    ones, m from 1 to 16k."""
    table = load_table("gemm", gpu)
    fit = gemm.fit_gemm(table, get_gpu(gpu), dtype)
    assert doubling_ratios(fit, table, get_gpu(gpu), dtype).min() >= 0.9


def test_h200_fp8_from_h100_fit_and_spec_sheet():
    ours = errors(gemm.leave_one_gpu_out("h100-sxm", "h200", "fp8"))
    assert ours["median_ape"] <= TRANSFER_MEDIAN
    assert ours["p90_ape"] <= TRANSFER_P90
