"""GPUs: the accelerators a replica runs on, as the roofline cost model sees them.

A serving iteration is bounded either by arithmetic (tensor-core FLOP/s, for big prefill chunks and
large verify batches) or by memory traffic (HBM bytes/s, for reading weights and KV cache during
decode). Tensor parallelism adds GPU-to-GPU all-reduces bounded by the interconnect. So a GPU is,
for cbsim, a handful of spec-sheet numbers: HBM capacity (what fits: weights + KV cache), HBM
bandwidth, dense peak FLOP/s per datatype (bf16, fp8 and, on Blackwell, fp4), per-GPU interconnect
bandwidth, GPUs per node (the largest tensor-parallel group without going across nodes) and a price
per GPU-hour (for cost per token and capacity planning).

All numbers are *peak* spec-sheet figures, dense (no 2:4 sparsity), in SI units: bytes, bytes/s,
FLOP/s. Achievable fractions of these peaks are not guessed here: the cost model fits them from
measured kernel timings (aiconfigurator-style "speed of light" efficiencies).

Sources, per number, are noted next to each catalog entry. "aiconfigurator" means NVIDIA's
aiconfigurator ``systems/*.yaml`` files (Apache-2.0, copy under
``shared/data/calibration/aiconfigurator/systems``), which themselves quote the datasheets; where
they agree with the vendor datasheet the same value is used so that calibration data and the
roofline share one set of peaks.

Prices are defaults for comparisons, not quotes: round on-demand list prices per GPU-hour at
specialty GPU clouds (the middle of their published ranges, 2025–2026; hyperscalers charge more,
reservations less). Override them with :func:`dataclasses.replace` (``replace(gpu,
price_per_hour=2.1)``) or a scenario setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from cbsim.errors import CbsimError, canonical_name, unknown_name

GiB = 2**30
GB = 10**9
TB = 10**12
TFLOPS = 10**12

_DTYPE_ALIASES: dict[str, str] = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp8": "fp8",
    "fp4": "fp4",
    "nvfp4": "fp4",
    "mxfp4": "bf16",  # 4-bit weights only: the math runs in 16 bits on every GPU
}
FP4_GPUS_HINT = "b200"
"""Catalog GPUs with FP4 tensor cores, for error messages."""


@dataclass(frozen=True, slots=True)
class GPU:
    """One accelerator model, described by its peak spec-sheet numbers.

    Attributes:
        name: catalog name, e.g. ``"h100-sxm"``.
        memory_bytes: device memory (HBM, or GDDR for the L40S) capacity in bytes.
        hbm_bandwidth: peak device-memory bandwidth in bytes/s.
        bf16_flops: dense bf16 tensor-core peak in FLOP/s (fp16 is the same on every GPU here).
        fp8_flops: dense fp8 tensor-core peak in FLOP/s. GPUs without fp8 tensor cores (A100)
            carry their bf16 peak here: fp8 weights are then up-converted and multiplied in bf16,
            so fp8 saves memory and bandwidth but no compute time.
        nvlink_bandwidth: GPU-to-GPU interconnect bandwidth per GPU, one direction, in bytes/s
            (NVLink, Infinity Fabric, or PCIe where the GPU has no peer link).
        gpus_per_node: GPUs in one server; the largest tensor-parallel group inside a node.
        price_per_hour: default on-demand price in USD per GPU-hour.
        network_bandwidth: bandwidth between nodes per GPU, one direction, in bytes/s (its RDMA
            NIC's share; AI Configurator's ``inter_node_bw``).
        fp4_flops: dense fp4 tensor-core peak in FLOP/s (NVFP4, Blackwell); 0 on a GPU without FP4
            tensor cores, where fp4 weights are an error rather than silently priced at another
            precision's rate (no serving engine runs NVFP4 GEMMs there).
        usable_memory_bytes: the device's total memory as CUDA (or ROCm) reports it to a process
            (``torch.cuda.mem_get_info()[1]``, the ``total_gpu_memory`` vLLM prints: 79.15 GiB
            on an 80 GB A100), which is what vLLM and TensorRT-LLM take fractions of; 0: taken
            as ``memory_bytes``.
        smi_memory_mib: the capacity ``nvidia-smi`` (``rocm-smi``) prints, in MiB, which
            SGLang's default memory fraction reads; 0: ``memory_bytes`` in MiB.
    """

    name: str
    memory_bytes: float
    hbm_bandwidth: float
    bf16_flops: float
    fp8_flops: float
    nvlink_bandwidth: float
    gpus_per_node: int
    price_per_hour: float
    fp4_flops: float = 0.0
    network_bandwidth: float = 50 * GB
    usable_memory_bytes: float = 0.0
    smi_memory_mib: float = 0.0

    def __post_init__(self) -> None:
        for field in (
            "memory_bytes",
            "hbm_bandwidth",
            "bf16_flops",
            "fp8_flops",
            "nvlink_bandwidth",
            "network_bandwidth",
        ):
            if not getattr(self, field) > 0:
                raise CbsimError(f"must be > 0, got {getattr(self, field)!r}", field=field)
        if self.gpus_per_node < 1:
            raise CbsimError(f"must be >= 1, got {self.gpus_per_node!r}", field="gpus_per_node")
        if self.price_per_hour < 0:
            raise CbsimError(f"must be >= 0, got {self.price_per_hour!r}", field="price_per_hour")
        for field in ("fp4_flops", "usable_memory_bytes", "smi_memory_mib"):
            if not getattr(self, field) >= 0:
                raise CbsimError(f"must be >= 0, got {getattr(self, field)!r}", field=field)

    @property
    def cuda_total_bytes(self) -> float:
        """Total device memory as a process sees it (:attr:`usable_memory_bytes`)."""
        return self.usable_memory_bytes or self.memory_bytes

    @property
    def smi_mib(self) -> float:
        """Capacity as ``nvidia-smi`` prints it, MiB (:attr:`smi_memory_mib`)."""
        return self.smi_memory_mib or self.memory_bytes / 2**20

    @property
    def has_fp4(self) -> bool:
        """Whether the GPU has FP4 tensor cores (runs NVFP4 weights)."""
        return self.fp4_flops > 0

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor-core peak in FLOP/s for ``dtype`` (``bf16``, ``fp16``, ``fp8`` or ``fp4``);
        ``fp4`` on a GPU without FP4 tensor cores is an error."""
        kind = _DTYPE_ALIASES.get(dtype.lower())
        if kind is None:
            raise CbsimError(f"unknown dtype {dtype!r}; known: bf16, fp16, fp8, fp4", field="dtype")
        if kind == "fp4":
            if not self.has_fp4:
                raise CbsimError(
                    f"{self.name} has no FP4 tensor cores; fp4 (NVFP4) weights need a Blackwell "
                    f"GPU ({FP4_GPUS_HINT})",
                    field="dtype",
                )
            return self.fp4_flops
        return self.fp8_flops if kind == "fp8" else self.bf16_flops

    @property
    def memory_gib(self) -> float:
        """Device memory in GiB, for display."""
        return self.memory_bytes / GiB


_CATALOG: dict[str, GPU] = {
    gpu.name: gpu
    for gpu in (
        # NVIDIA A100 80GB SXM4. Datasheet and aiconfigurator a100_sxm.yaml: 80 GiB HBM2e,
        # 2.039 TB/s, 312 TFLOP/s dense bf16, NVLink3 600 GB/s total = 300 GB/s per direction.
        # No fp8 tensor cores: fp8 == bf16 peak (see GPU.fp8_flops).
        GPU(
            name="a100-80gb",
            memory_bytes=80 * GiB,
            hbm_bandwidth=2.039 * TB,
            bf16_flops=312 * TFLOPS,
            fp8_flops=312 * TFLOPS,
            nvlink_bandwidth=300 * GB,
            network_bandwidth=25 * GB,  # aiconfigurator inter_node_bw: one 200 Gb/s CX6 per GPU
            gpus_per_node=8,
            price_per_hour=1.50,
            usable_memory_bytes=79.15
            * GiB,  # vLLM logs on A100-SXM4-80GB print total_gpu_memory (79.15GiB)
            smi_memory_mib=81920,
        ),
        # NVIDIA H100 SXM5 80GB. Datasheet and aiconfigurator h100_sxm.yaml: 80 GiB HBM3,
        # 3.35 TB/s, 989 TFLOP/s dense bf16 (1979 sparse), 1978 TFLOP/s dense fp8 (3958 sparse),
        # NVLink4 900 GB/s total = 450 GB/s per direction.
        GPU(
            name="h100-sxm",
            memory_bytes=80 * GiB,
            hbm_bandwidth=3.35 * TB,
            bf16_flops=989 * TFLOPS,
            fp8_flops=1978 * TFLOPS,
            nvlink_bandwidth=450 * GB,
            network_bandwidth=50 * GB,  # aiconfigurator inter_node_bw: one 400 Gb/s CX7 per GPU
            gpus_per_node=8,
            price_per_hour=3.00,
            usable_memory_bytes=79.19 * GiB,  # vLLM logs on H100 80GB HBM3 print 79.19-79.22 GiB
            smi_memory_mib=81559,
        ),
        # NVIDIA H200 SXM 141GB. Datasheet and aiconfigurator h200_sxm.yaml: 141 GiB HBM3e
        # (aiconfigurator's value; nvidia-smi shows ~140.4 GiB), 4.8 TB/s, same Hopper tensor
        # cores as H100 (989 / 1978 TFLOP/s dense), NVLink4 450 GB/s per direction.
        GPU(
            name="h200",
            memory_bytes=141 * GiB,
            hbm_bandwidth=4.8 * TB,
            bf16_flops=989 * TFLOPS,
            fp8_flops=1978 * TFLOPS,
            nvlink_bandwidth=450 * GB,
            network_bandwidth=50 * GB,  # aiconfigurator inter_node_bw: one 400 Gb/s CX7 per GPU
            gpus_per_node=8,
            price_per_hour=3.75,
            usable_memory_bytes=139.81
            * GiB,  # TensorRT-LLM logs on H200 print device total memory 139.81 GiB
            smi_memory_mib=143771,
        ),
        # NVIDIA L40S 48GB GDDR6 (PCIe card). aiconfigurator l40s.yaml: 46068 MiB visible with
        # ECC on (datasheet: 48 GB), 864 GB/s, 362.05 TFLOP/s dense bf16, 733 TFLOP/s dense fp8
        # (datasheet 1466 with sparsity). No NVLink: peers talk over PCIe Gen4 x16, 32 GB/s per
        # direction (aiconfigurator intra_node_bw).
        GPU(
            name="l40s",
            memory_bytes=46068 * 2**20,
            hbm_bandwidth=864 * GB,
            bf16_flops=362.05 * TFLOPS,
            fp8_flops=733 * TFLOPS,
            nvlink_bandwidth=32 * GB,
            network_bandwidth=50 * GB,  # aiconfigurator inter_node_bw: one 400 Gb/s CX7 per GPU
            gpus_per_node=8,
            price_per_hour=1.00,
            usable_memory_bytes=44.31 * GiB,  # vLLM logs on L40S print 44.31-44.39 GiB
            smi_memory_mib=46068,
        ),
        # NVIDIA B200 (HGX/DGX B200). Datasheet: 8 TB/s HBM3e; DGX B200 lists 1,440 GB for 8
        # GPUs = 180 GB each, which like other HBM "GB" figures is GiB-sized (nvidia-smi shows
        # ~179 GiB; the 192 GB announced is the raw stack capacity). HGX B200 per-GPU peaks
        # quoted with sparsity (4.5 PFLOP/s bf16, 9 fp8) halved for dense: 2.25 / 4.5 PFLOP/s;
        # dense fp4 (NVFP4) 9 PFLOP/s, aiconfigurator b200_sxm.yaml fp4_tc_flops (datasheet: 18
        # with sparsity). NVLink5 1.8 TB/s total = 900 GB/s per direction.
        GPU(
            name="b200",
            memory_bytes=180 * GiB,
            hbm_bandwidth=8 * TB,
            bf16_flops=2250 * TFLOPS,
            fp8_flops=4500 * TFLOPS,
            nvlink_bandwidth=900 * GB,
            network_bandwidth=100 * GB,  # aiconfigurator inter_node_bw: one 800 Gb/s CX8 per GPU
            gpus_per_node=8,
            price_per_hour=5.50,
            fp4_flops=9000 * TFLOPS,
            usable_memory_bytes=178.36 * GiB,  # cudaMemGetInfo total on B200; nvidia-smi 183359 MiB
            smi_memory_mib=183359,
        ),
        # AMD Instinct MI300X OAM. AMD datasheet: 192 GB HBM3 (rocm-smi shows ~192 GiB),
        # 5.3 TB/s, 1307.4 TFLOP/s dense bf16, 2614.9 TFLOP/s dense fp8. Infinity Fabric: 7
        # links x 64 GB/s per direction to the 7 peers of an 8-GPU platform = 448 GB/s per
        # direction per GPU (AMD quotes 896 GB/s bidirectional aggregate); an all-reduce over
        # the full mesh can use all links, so this is the comparable figure to NVLink's.
        GPU(
            name="mi300x",
            memory_bytes=192 * GiB,
            hbm_bandwidth=5.3 * TB,
            bf16_flops=1307.4 * TFLOPS,
            fp8_flops=2614.9 * TFLOPS,
            nvlink_bandwidth=448 * GB,
            network_bandwidth=50 * GB,  # one 400 Gb/s NIC per GPU, as MI300X platforms pair them
            gpus_per_node=8,
            price_per_hour=2.50,
            usable_memory_bytes=191.98 * GiB,  # ROCm reports 196592 MiB total
            smi_memory_mib=196592,
        ),
    )
}

GPU_NAMES: tuple[str, ...] = tuple(_CATALOG)


def get_gpu(name: str) -> GPU:
    """The catalog GPU called ``name`` (compared without case: ``H100-SXM`` is ``h100-sxm``);
    :class:`CbsimError` listing the known names, and the close ones, otherwise."""
    gpu = _CATALOG.get(name)
    if gpu is not None:
        return gpu
    canonical = canonical_name(name, GPU_NAMES)
    if canonical is None:
        raise unknown_name("gpu", name, GPU_NAMES)
    return _CATALOG[canonical]
