from __future__ import annotations

import dataclasses

import pytest

from cbsim.catalog.hardware import CUDA_RESERVED_TYPICAL, GPU_NAMES, GiB, get_gpu
from cbsim.common.errors import CbsimError

CATALOG = (
    "a100-80gb", "a100-40gb", "a100-40gb-pcie", "a100-80gb-pcie", "a10g", "rtx-3090",
    "h100-sxm", "h100-pcie", "h100-nvl", "h20", "h200", "h200-nvl",
    "l40s", "l40", "l4", "rtx-4090", "rtx-6000-ada",
    "b200", "gb200", "b300", "rtx-5090",
    "mi250x", "mi300x", "mi325x",
)  # fmt: skip
FP4_GPUS = ("b200", "gb200", "b300", "rtx-5090")


def test_catalog_names_are_the_contract() -> None:
    assert set(GPU_NAMES) == set(CATALOG)


@pytest.mark.parametrize("name", CATALOG)
def test_every_gpu_loads_with_sane_numbers(name: str) -> None:
    gpu = get_gpu(name)
    assert gpu.name == name
    assert 20 * GiB < gpu.memory_bytes < 300 * GiB
    assert 0.25e12 < gpu.hbm_bandwidth < 10e12
    assert 5e13 < gpu.bf16_flops <= gpu.fp8_flops <= 2.05 * gpu.bf16_flops
    assert gpu.fp4_flops == 0 or gpu.fp4_flops >= gpu.fp8_flops
    assert gpu.nvlink_bandwidth > 0 and gpu.network_bandwidth > 0
    assert gpu.gpus_per_node in (2, 4, 8, 72)
    assert gpu.price_per_hour > 0
    assert gpu.source


@pytest.mark.parametrize("name", CATALOG)
def test_memory_figures_are_ordered(name: str) -> None:
    """What CUDA (ROCm) reports is below the capacity and below what nvidia-smi shows, and
    close to it: 0-0.9 GiB (the driver's reservation and the context)."""
    gpu = get_gpu(name)
    assert 0 < gpu.usable_memory_bytes < gpu.memory_bytes
    assert gpu.smi_memory_mib * 2**20 <= gpu.memory_bytes
    gap = gpu.smi_memory_mib * 2**20 - gpu.usable_memory_bytes
    assert 0 <= gap < 0.9 * GiB


def test_derived_usable_memory_takes_the_typical_gap() -> None:
    h20 = get_gpu("h20")
    assert h20.usable_memory_bytes == 97871 * 2**20 - CUDA_RESERVED_TYPICAL
    assert 0.4 * GiB < CUDA_RESERVED_TYPICAL < 0.6 * GiB


def test_nvlink_domains() -> None:
    assert get_gpu("gb200").gpus_per_node == 72  # one NVL72 rack is one NVLink domain
    assert get_gpu("h100-nvl").gpus_per_node == 2  # NVLink-bridged pairs
    assert get_gpu("h100-pcie").nvlink_bandwidth == pytest.approx(64e9)  # PCIe Gen5 x16


def test_unknown_gpu_lists_known_names() -> None:
    with pytest.raises(CbsimError) as info:
        get_gpu("h100")
    message = str(info.value)
    assert "'h100'" in message
    for name in CATALOG:
        assert name in message


def test_peak_flops_by_dtype() -> None:
    h100 = get_gpu("h100-sxm")
    assert h100.peak_flops("bf16") == 989e12
    assert h100.peak_flops("fp16") == h100.peak_flops("bf16")
    assert h100.peak_flops("fp8") == 1978e12
    # A100 has no fp8 tensor cores: fp8 runs at the bf16 rate.
    a100 = get_gpu("a100-80gb")
    assert a100.peak_flops("fp8") == a100.peak_flops("bf16") == 312e12
    with pytest.raises(CbsimError, match="dtype"):
        h100.peak_flops("int2")


def test_fp4_peak_only_on_blackwell() -> None:
    b200 = get_gpu("b200")
    # aiconfigurator b200_sxm.yaml fp4_tc_flops: 9000 TFLOP/s dense, twice the fp8 peak
    assert b200.fp4_flops == 9000e12
    assert b200.peak_flops("fp4") == b200.peak_flops("nvfp4") == 2 * b200.peak_flops("fp8")
    assert all(get_gpu(name).has_fp4 for name in FP4_GPUS)
    for name in CATALOG:
        gpu = get_gpu(name)
        if name in FP4_GPUS:
            continue
        assert gpu.fp4_flops == 0 and not gpu.has_fp4
        with pytest.raises(CbsimError) as info:
            gpu.peak_flops("fp4")
        message = str(info.value)
        assert f"{name} has no FP4 tensor cores" in message and "b200" in message
        assert info.value.field == "dtype"


def test_spec_numbers_match_aiconfigurator_systems() -> None:
    h100 = get_gpu("h100-sxm")
    assert h100.hbm_bandwidth == pytest.approx(3350e9)
    assert h100.memory_bytes == 85899345920
    assert h100.nvlink_bandwidth == pytest.approx(450e9)
    assert get_gpu("h200").memory_bytes == 151397597184
    l40s = get_gpu("l40s")
    assert l40s.memory_bytes == 48305799168
    assert l40s.bf16_flops == pytest.approx(362.05e12)
    assert l40s.nvlink_bandwidth == pytest.approx(32e9)


def test_gpu_is_frozen_and_price_overridable() -> None:
    gpu = get_gpu("h100-sxm")
    with pytest.raises(dataclasses.FrozenInstanceError):
        gpu.price_per_hour = 1.0  # type: ignore[misc]
    cheaper = dataclasses.replace(gpu, price_per_hour=2.0)
    assert cheaper.price_per_hour == 2.0
    assert get_gpu("h100-sxm").price_per_hour == gpu.price_per_hour


def test_invalid_gpu_numbers_rejected() -> None:
    with pytest.raises(CbsimError, match="hbm_bandwidth"):
        dataclasses.replace(get_gpu("h100-sxm"), hbm_bandwidth=0.0)
    with pytest.raises(CbsimError, match="fp4_flops"):
        dataclasses.replace(get_gpu("b200"), fp4_flops=-1.0)
