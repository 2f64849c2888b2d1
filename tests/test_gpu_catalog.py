"""Every catalog GPU runs a scenario; GPUs without kernel tables say so, with their transfer's error.

A GPU without measured kernel tables is priced by another GPU's fitted efficiencies on its own spec
sheet (cbsim.studies.calibration.transfer); its run must carry a warning naming that and the held-out
error such a transfer showed on GPUs that do have tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import cbsim
from cbsim.catalog.hardware import GPU_NAMES
from cbsim.cli.commands import cli
from cbsim.cost.profile import keeps_collectives, load_profile, transfer_errors, transfer_note
from cbsim.studies.calibration.transfer import (
    FAMILIES,
    SAME_DIE_PAIRS,
    TRANSFERS,
    describe_pairs,
    held_out_pairs,
    pooled_errors,
)
from tests.conftest import small_scenario

MEASURED = tuple(name for name in GPU_NAMES if name not in TRANSFERS)
NOTE = "has no measured kernel tables"


def _run(gpu: str, **overrides: Any) -> cbsim.Results:
    return cbsim.simulate(small_scenario(cluster__gpu=gpu, workload__num_requests=4, **overrides))


@pytest.mark.parametrize("gpu", GPU_NAMES)
def test_every_gpu_runs_a_scenario(gpu: str) -> None:
    summary = _run(gpu).summary
    assert summary["completed"] == 4
    assert summary["tpot_p50_s"] > 0 and summary["ttft_p50_s"] > 0
    warned = f"{gpu} {NOTE}" in summary["warnings"]
    assert warned == (gpu in TRANSFERS)


def test_measured_and_transferred_gpus_cover_the_catalog() -> None:
    assert set(MEASURED) == {"a100-80gb", "h100-sxm", "h200", "l40s", "b200"}
    for target, transfer in TRANSFERS.items():
        assert target in GPU_NAMES and transfer.source in MEASURED


@pytest.mark.parametrize("gpu", sorted(TRANSFERS))
def test_transferred_profile_records_its_error(gpu: str) -> None:
    profile = load_profile(gpu)
    assert profile is not None and profile.gpu == gpu
    assert profile.based_on == f"{TRANSFERS[gpu].source}/aiconfigurator-vllm"
    errors = transfer_errors(profile)
    assert tuple(errors) == FAMILIES
    kind = "same die" if TRANSFERS[gpu].same_die else "another die"
    for measured in errors.values():
        assert measured.source.startswith(kind)
        assert measured.rows > 1000
        assert 0 < (measured.holdout_median_ape or 0) <= (measured.holdout_p90_ape or 0) < 3
    assert profile.gemm  # the source's fits, on this GPU's spec sheet


def test_transfer_note_names_source_and_error() -> None:
    note = transfer_note(load_profile("h100-pcie"))
    assert note is not None
    assert note.startswith("h100-pcie has no measured kernel tables")
    assert "h100-sxm/aiconfigurator-vllm" in note
    assert "same die: h200 from h100-sxm, h100-sxm from h200" in note
    assert "gemm bf16" in note and "% median" in note and "% P90" in note
    assert transfer_note(load_profile("h100-sxm")) is None
    assert transfer_note(None) is None


def test_collective_curves_carry_only_between_equal_links() -> None:
    assert keeps_collectives("h100-sxm", "h20")  # NVLink 4 both
    assert keeps_collectives("h100-sxm", "mi300x")  # 448 against 450 GB/s
    assert not keeps_collectives("h100-sxm", "h100-pcie")  # NVSwitch curves, PCIe card
    sxm, pcie, h20 = (load_profile(name) for name in ("h100-sxm", "h100-pcie", "h20"))
    assert sxm is not None and pcie is not None and h20 is not None
    assert sxm.allreduce and h20.allreduce == sxm.allreduce
    assert not pcie.allreduce and not pcie.alltoall


def test_held_out_pairs() -> None:
    assert held_out_pairs("l40s", True) == SAME_DIE_PAIRS
    assert held_out_pairs("h100-sxm", False) == (
        ("h100-sxm", "a100-80gb"),
        ("h100-sxm", "l40s"),
        ("h100-sxm", "b200"),
    )
    assert describe_pairs(SAME_DIE_PAIRS, True) == (
        "same die: h200 from h100-sxm, h100-sxm from h200"
    )


def test_warning_once_per_gpu_in_disaggregated_pools() -> None:
    data = small_scenario(cluster__gpu="h20", workload__num_requests=4)
    del data["cluster"]["replicas"]
    data["cluster"]["disaggregation"] = {"prefill": {"replicas": 1}, "decode": {"replicas": 1}}
    summary = cbsim.simulate(data).summary
    assert summary["completed"] == 4
    assert summary["warnings"].count(f"h20 {NOTE}") == 1


@pytest.mark.parametrize(("gpu", "dtype"), [("rtx-5090", "fp4"), ("gb200", "fp4"), ("a10g", "fp8")])
def test_transferred_gpus_run_their_precisions(gpu: str, dtype: str) -> None:
    assert _run(gpu, cluster__dtype=dtype).summary["completed"] == 4


@pytest.mark.parametrize("engine", ["sglang", "tensorrt-llm"])
def test_transferred_gpu_under_other_engines(engine: str) -> None:
    summary = _run("h100-nvl", cluster__engine=engine).summary
    assert summary["completed"] == 4 and f"h100-nvl {NOTE}" in summary["warnings"]


def test_catalog_lists_sources_and_kernel_pricing() -> None:
    result = CliRunner().invoke(cli, ["catalog", "gpus"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    for name in GPU_NAMES:
        assert any(line.split()[:1] == [name] for line in text.splitlines()), name
    assert "kernels: measured (aiconfigurator-vllm)" in text
    assert "kernels: h100-sxm/aiconfigurator-vllm fits on this spec sheet (held-out error" in text
    assert text.count("source: ") == len(GPU_NAMES)
    assert "79.19 GiB usable" in text


def test_validate_says_the_gpu_is_transferred(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario(cluster__gpu="l4")))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert f"l4 {NOTE}" in result.output


@pytest.mark.slow
def test_recorded_same_die_error_is_reproduced() -> None:
    """The figures in the shipped profiles are what the held-out check computes (minutes on a
    cold cache: two GPUs' tables are fitted)."""
    stats = pooled_errors(SAME_DIE_PAIRS)
    recorded = transfer_errors(load_profile("h100-pcie"))  # type: ignore[arg-type]
    for family in FAMILIES:
        assert recorded[family].holdout_median_ape == pytest.approx(
            stats[family]["median_ape"], abs=1e-4
        )
        assert recorded[family].rows == int(stats[family]["points"])
