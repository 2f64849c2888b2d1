"""GPUs: the accelerators a replica runs on, as the roofline cost model sees them.

A serving iteration is bounded either by arithmetic (tensor-core FLOP/s, for big prefill chunks and
large verify batches) or by memory traffic (HBM bytes/s, for reading weights and KV cache during
decode). Tensor parallelism adds GPU-to-GPU all-reduces bounded by the interconnect. So a GPU is,
for cbsim, a handful of spec-sheet numbers: HBM capacity (what fits: weights + KV cache), HBM
bandwidth, dense peak FLOP/s per datatype (bf16, fp8, int8, fp32 and, on Blackwell, fp4), per-GPU interconnect
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

Memory comes in three figures: the capacity (``memory_bytes``), what ``nvidia-smi`` / ``rocm-smi``
prints (``smi_memory_mib``) and the total CUDA (ROCm) reports to a process
(``usable_memory_bytes``, ``torch.cuda.mem_get_info()[1]``), which is what vLLM and TensorRT-LLM
take their memory fraction of. Each usable figure is quoted from a published engine log where one
was found (cited next to the entry); otherwise it is derived and says so: a sibling card with the
same memory and the same ``nvidia-smi`` capacity gives its measured value, else the ``nvidia-smi``
capacity less :data:`CUDA_RESERVED_TYPICAL`, the median gap on the NVIDIA cards that have both
figures published. ROCm reports the whole ``rocm-smi`` capacity (MI300X: 191.98 GiB of 196592
MiB).

Prices are defaults for comparisons, not quotes: round on-demand list prices per GPU-hour at
specialty GPU clouds (the middle of their published ranges, 2025–2026; hyperscalers charge more,
reservations less). Override them with :func:`dataclasses.replace` (``replace(gpu,
price_per_hour=2.1)``) or a scenario setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from cbsim.common.errors import CbsimError, canonical_name, did_you_mean

GiB = 2**30
MiB = 2**20
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
    "int4": "int4",  # AWQ/GPTQ/w4a16 weights: the math runs in 16 bits (Marlin)
    "int8": "int8",
    "fp32": "fp32",
    "float32": "fp32",
}
CUDA_RESERVED_TYPICAL = 0.48 * GiB
"""``nvidia-smi`` capacity minus the total CUDA reports, median over the cards with both published
(GiB): RTX 3090 0.32, A10G 0.42, L4 0.43, RTX 4090 0.44, H100 SXM 0.46, H100 NVL 0.48, A100 40GB
0.51, H200 0.59, L40S 0.68, B200 0.70, A100 80GB 0.85 (the driver's reservation and the CUDA
context's own pages)."""


def cuda_total_from_smi(smi_mib: float) -> float:
    """A usable-memory figure derived from the ``nvidia-smi`` capacity (MiB), in bytes, where no
    engine log of the card was found: the capacity less :data:`CUDA_RESERVED_TYPICAL`."""
    return smi_mib * MiB - CUDA_RESERVED_TYPICAL


@dataclass(frozen=True, slots=True)
class GPU:
    """One accelerator model, described by its peak spec-sheet numbers.

    Attributes:
        name: catalog name, e.g. ``"h100-sxm"``.
        memory_bytes: device memory (HBM, or GDDR on PCIe cards: there the capacity
            ``nvidia-smi`` shows, ECC on where the card runs it so) in bytes.
        hbm_bandwidth: peak device-memory bandwidth in bytes/s.
        bf16_flops: dense bf16 tensor-core peak in FLOP/s (fp16 is the same on every GPU here).
        fp8_flops: dense fp8 tensor-core peak in FLOP/s. GPUs without fp8 tensor cores (A100)
            carry their bf16 peak here: fp8 weights are then up-converted and multiplied in bf16,
            so fp8 saves memory and bandwidth but no compute time.
        nvlink_bandwidth: GPU-to-GPU interconnect bandwidth per GPU, one direction, in bytes/s
            (NVLink, Infinity Fabric, or PCIe where the GPU has no peer link).
        gpus_per_node: GPUs in one server (one NVLink domain: 72 on a GB200 NVL72 rack, 2 for
            NVLink-bridged H100 NVL pairs); the largest tensor-parallel group inside a node.
        price_per_hour: default on-demand price in USD per GPU-hour.
        network_bandwidth: bandwidth between nodes per GPU, one direction, in bytes/s (its RDMA
            NIC's share; AI Configurator's ``inter_node_bw``).
        int8_flops: dense int8 tensor-core peak in OP/s, what W8A8 (``int8``) GEMMs run at: the fp8
            peak on Hopper, Ada and Blackwell, twice bf16 on Ampere, a small fraction on
            Blackwell Ultra (B300), which cut int8 math; 0: the fp8 peak.
        fp32_flops: dense fp32 peak in FLOP/s without TF32, what fp32 (``--dtype float32``)
            GEMMs run at: PyTorch leaves ``torch.backends.cuda.matmul.allow_tf32`` False (its
            default since 1.12) and vLLM does not turn it on, so cuBLAS multiplies fp32 on the
            CUDA cores (the datasheets' "FP32" line, not "TF32 Tensor Core"); on AMD's CDNA
            GPUs rocBLAS runs fp32 GEMMs on the matrix cores, whose "FP32 matrix" rate this is.
            0: fp32 weights are an error on this GPU.
        vendor: ``nvidia`` or ``amd``; vLLM's integer-quantized kernels (Marlin for ``int4``,
            CUTLASS for ``int8``) run on NVIDIA GPUs only.
        fp4_flops: dense fp4 tensor-core peak in FLOP/s (NVFP4, Blackwell); 0 on a GPU without FP4
            tensor cores, where fp4 weights are an error rather than silently priced at another
            precision's rate (no serving engine runs NVFP4 GEMMs there).
        usable_memory_bytes: the device's total memory as CUDA (or ROCm) reports it to a process
            (``torch.cuda.mem_get_info()[1]``, the ``total_gpu_memory`` vLLM prints: 79.15 GiB
            on an 80 GB A100), which is what vLLM and TensorRT-LLM take fractions of; 0: taken
            as ``memory_bytes``.
        smi_memory_mib: the capacity ``nvidia-smi`` (``rocm-smi``) prints, in MiB, which
            SGLang's default memory fraction reads; 0: ``memory_bytes`` in MiB.
        source: where the figures come from, in a line (``cbsim catalog`` prints it).
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
    int8_flops: float = 0.0
    fp32_flops: float = 0.0
    vendor: str = "nvidia"
    network_bandwidth: float = 50 * GB
    usable_memory_bytes: float = 0.0
    smi_memory_mib: float = 0.0
    source: str = ""

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
        for field in ("fp4_flops", "fp32_flops", "usable_memory_bytes", "smi_memory_mib"):
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
        """Dense tensor-core peak in FLOP/s for ``dtype`` (``bf16``, ``fp16``, ``fp8``, ``fp4``,
        ``int8``, or ``int4``, whose 4-bit weights are multiplied on the 16-bit tensor cores;
        ``fp32``: :attr:`fp32_flops`, no TF32); ``fp4`` on a GPU without FP4 tensor cores,
        ``int4`` or ``int8`` on an AMD GPU, and ``fp32`` on a GPU without an fp32 peak are
        errors."""
        kind = _DTYPE_ALIASES.get(dtype.lower())
        if kind is None:
            raise CbsimError(
                f"unknown dtype {dtype!r}; known: bf16, fp16, fp8, fp4, int8, int4, fp32",
                field="dtype",
            )
        if kind == "fp32":
            if not self.fp32_flops > 0:
                raise CbsimError(f"{self.name} has no fp32 peak (fp32_flops)", field="dtype")
            return self.fp32_flops
        if kind in ("int4", "int8") and self.vendor != "nvidia":
            raise CbsimError(
                f"{self.name} runs no {kind} weights: vLLM's AWQ, GPTQ, Marlin and int8 W8A8 "
                "kernels are NVIDIA-only (vLLM's quantization 'Supported Hardware' table); use "
                "bf16 or fp8",
                field="dtype",
            )
        if kind == "int8":
            return self.int8_flops or self.fp8_flops
        if kind == "int4":
            return self.bf16_flops
        if kind == "fp4":
            if not self.has_fp4:
                raise CbsimError(
                    f"{self.name} has no FP4 tensor cores; fp4 (NVFP4) weights need a Blackwell "
                    f"GPU ({fp4_gpus_hint()})",
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
        # ---------------------------------------------------------------- NVIDIA Ampere (GA100)
        # NVIDIA A100 80GB SXM4. Datasheet and aiconfigurator a100_sxm.yaml: 80 GiB HBM2e,
        # 2.039 TB/s, 312 TFLOP/s dense bf16, NVLink3 600 GB/s total = 300 GB/s per direction.
        # No fp8 tensor cores: fp8 == bf16 peak (see GPU.fp8_flops).
        GPU(
            name="a100-80gb",
            memory_bytes=80 * GiB,
            hbm_bandwidth=2.039 * TB,
            bf16_flops=312 * TFLOPS,
            fp8_flops=312 * TFLOPS,
            int8_flops=624 * TFLOPS,  # A100 datasheet: 624 TOPS dense int8
            fp32_flops=19.5 * TFLOPS,  # A100 datasheet: FP32 19.5 TFLOP/s (no TF32: see fp32_flops)
            nvlink_bandwidth=300 * GB,
            network_bandwidth=25 * GB,  # aiconfigurator inter_node_bw: one 200 Gb/s CX6 per GPU
            gpus_per_node=8,
            price_per_hour=1.50,
            # vLLM 0.8.2 log on A100-SXM4-80GB: total_gpu_memory (79.15GiB) (datawhalechina/
            # self-llm models/phi4/06-Phi-4-GRPO...md); nvidia-smi 81920MiB (modal-labs/
            # modal-client#2797)
            usable_memory_bytes=79.15 * GiB,
            smi_memory_mib=81920,
            source="NVIDIA A100 datasheet, aiconfigurator a100_sxm.yaml; usable: vLLM log",
        ),
        # NVIDIA A100 40GB SXM4. Datasheet: 40 GiB HBM2 at 1.555 TB/s; same GA100 tensor cores
        # and NVLink3 as the 80GB (312 TFLOP/s dense bf16, no fp8; 300 GB/s per direction);
        # HGX A100 40GB: 8 GPUs, one 200 Gb/s HDR NIC each.
        GPU(
            name="a100-40gb",
            memory_bytes=40 * GiB,
            hbm_bandwidth=1.555 * TB,
            bf16_flops=312 * TFLOPS,
            fp8_flops=312 * TFLOPS,
            int8_flops=624 * TFLOPS,
            fp32_flops=19.5 * TFLOPS,
            nvlink_bandwidth=300 * GB,
            network_bandwidth=25 * GB,
            gpus_per_node=8,
            price_per_hour=1.20,
            # vLLM on A100-SXM4-40GB: "Free memory on device (39.0/39.49 GiB)"
            # (vllm-project/vllm#25970) and total_gpu_memory (39.49GiB) (a DeepSeek-V2.5 TP8
            # log, vLLM 0.8.3); TensorRT-LLM prints total: 39.50 GiB
            # (triton-inference-server/server#7664); nvidia-smi 40960MiB (modal-client#2797)
            usable_memory_bytes=39.49 * GiB,
            smi_memory_mib=40960,
            source="NVIDIA A100 datasheet; usable: vLLM #25970",
        ),
        # NVIDIA A100 40GB PCIe. Datasheet: 40 GiB HBM2 at 1.555 TB/s, 312 TFLOP/s dense bf16
        # (250 W). Rented without NVLink bridges: peers talk over PCIe Gen4 x16, 32 GB/s per
        # direction (as the L40S entry). Network: one 200 Gb/s NIC per GPU assumed.
        GPU(
            name="a100-40gb-pcie",
            memory_bytes=40 * GiB,
            hbm_bandwidth=1.555 * TB,
            bf16_flops=312 * TFLOPS,
            fp8_flops=312 * TFLOPS,
            int8_flops=624 * TFLOPS,
            fp32_flops=19.5 * TFLOPS,
            nvlink_bandwidth=32 * GB,
            network_bandwidth=25 * GB,
            gpus_per_node=8,
            price_per_hour=1.10,
            # derived: the SXM4 40GB's measured 39.49 GiB (same 40 GB HBM2, same nvidia-smi
            # 40960MiB: NVIDIA A100-PCIE-40GB tables in public nvidia-smi logs)
            usable_memory_bytes=39.49 * GiB,
            smi_memory_mib=40960,
            source="NVIDIA A100 PCIe datasheet; usable derived from a100-40gb",
        ),
        # NVIDIA A100 80GB PCIe. Datasheet: 80 GiB HBM2e at 1.935 TB/s, 312 TFLOP/s dense bf16
        # (300 W); PCIe Gen4 x16, 32 GB/s per direction, no bridge assumed.
        GPU(
            name="a100-80gb-pcie",
            memory_bytes=80 * GiB,
            hbm_bandwidth=1.935 * TB,
            bf16_flops=312 * TFLOPS,
            fp8_flops=312 * TFLOPS,
            int8_flops=624 * TFLOPS,
            fp32_flops=19.5 * TFLOPS,
            nvlink_bandwidth=32 * GB,
            network_bandwidth=25 * GB,
            gpus_per_node=8,
            price_per_hour=1.30,
            # derived: the SXM4 80GB's measured 79.15 GiB (same memory; nvidia-smi shows
            # 81920MiB on "NVIDIA A100 80GB PCIe" too)
            usable_memory_bytes=79.15 * GiB,
            smi_memory_mib=81920,
            source="NVIDIA A100 PCIe datasheet; usable derived from a100-80gb",
        ),
        # --------------------------------------------------------------- NVIDIA Ampere (GA102)
        # NVIDIA A10G (AWS G5 only). 24 GB GDDR6 at 600 GB/s, like the A10; its tensor rate is
        # lower than the A10's 125 TFLOP/s: 70 TFLOP/s bf16 (Baseten, "NVIDIA A10 vs A10G for
        # ML model inference"). No fp8. PCIe Gen4, 32 GB/s per direction; g5.48xlarge: 8 GPUs.
        # Price: AWS g5.xlarge on demand (no specialty cloud rents it).
        GPU(
            name="a10g",
            memory_bytes=23028 * MiB,
            hbm_bandwidth=600 * GB,
            bf16_flops=70 * TFLOPS,
            fp8_flops=70 * TFLOPS,
            int8_flops=140 * TFLOPS,  # 2x bf16 as on the A10 (125/250 TFLOP/s bf16/int8)
            fp32_flops=35 * TFLOPS,  # Baseten, A10 vs A10G: 35 TFLOP/s FP32 (A10: 31.2)
            nvlink_bandwidth=32 * GB,
            network_bandwidth=100 / 8 * GB / 8,  # g5.48xlarge: 100 Gb/s for its 8 GPUs
            gpus_per_node=8,
            price_per_hour=1.00,
            # vLLM logs on A10G print total_gpu_memory (22.07GiB); nvidia-smi 23028MiB (public
            # "NVIDIA A10G" nvidia-smi tables; the A10's 23028MiB in modal-client#2797)
            usable_memory_bytes=22.07 * GiB,
            smi_memory_mib=23028,
            source="A10 datasheet, Baseten A10 vs A10G; usable: vLLM logs",
        ),
        # NVIDIA GeForce RTX 3090. Ampere GA102 whitepaper: 24 GB GDDR6X at 936 GB/s, 71
        # TFLOP/s dense bf16 with fp32 accumulate (142 sparse; the GeForce rate, half the fp16-
        # accumulate one), no fp8. PCIe Gen4 x16, 32 GB/s per direction (no P2P on GeForce:
        # NCCL stages through host memory, so this is an upper bound).
        GPU(
            name="rtx-3090",
            memory_bytes=24576 * MiB,
            hbm_bandwidth=936 * GB,
            bf16_flops=71 * TFLOPS,
            fp8_flops=71 * TFLOPS,
            int8_flops=284 * TFLOPS,  # GA102 whitepaper: 284 TOPS dense int8
            fp32_flops=35.6 * TFLOPS,  # GA102 whitepaper: 35.6 TFLOP/s FP32
            nvlink_bandwidth=32 * GB,
            network_bandwidth=12.5 * GB,  # a 100 Gb/s NIC per GPU at most, assumed
            gpus_per_node=8,
            price_per_hour=0.25,
            # vLLM 0.10.0 log on GeForce RTX 3090: total_gpu_memory (23.68GiB)
            # (johnson7788/RLDecisionAgent notes); nvidia-smi 24576MiB (noonghunna/club-3090#1127)
            usable_memory_bytes=23.68 * GiB,
            smi_memory_mib=24576,
            source="NVIDIA Ampere GA102 whitepaper; usable: vLLM log",
        ),
        # ---------------------------------------------------------------- NVIDIA Hopper (GH100)
        # NVIDIA H100 SXM5 80GB. Datasheet and aiconfigurator h100_sxm.yaml: 80 GiB HBM3,
        # 3.35 TB/s, 989 TFLOP/s dense bf16 (1979 sparse), 1978 TFLOP/s dense fp8 (3958 sparse),
        # NVLink4 900 GB/s total = 450 GB/s per direction.
        GPU(
            name="h100-sxm",
            memory_bytes=80 * GiB,
            hbm_bandwidth=3.35 * TB,
            bf16_flops=989 * TFLOPS,
            fp8_flops=1978 * TFLOPS,
            int8_flops=1978 * TFLOPS,  # H100 datasheet: int8 = fp8 (1979; 1978 as fp8 here)
            fp32_flops=67 * TFLOPS,  # H100 datasheet: FP32 67 TFLOP/s
            nvlink_bandwidth=450 * GB,
            network_bandwidth=50 * GB,  # aiconfigurator inter_node_bw: one 400 Gb/s CX7 per GPU
            gpus_per_node=8,
            price_per_hour=3.00,
            # vLLM logs on H100 80GB HBM3: total_memory=79.19GiB (llm-d-incubation/llm-d-planner
            # accuracy/results/v0.19.0/logs), 79.19-79.22 GiB (vllm-project/vllm#19996, #12126);
            # nvidia-smi 81559MiB (vllm-project/vllm#27508)
            usable_memory_bytes=79.19 * GiB,
            smi_memory_mib=81559,
            source="NVIDIA H100 datasheet, aiconfigurator h100_sxm.yaml; usable: vLLM logs",
        ),
        # NVIDIA H100 PCIe 80GB. Datasheet: 80 GB HBM2e at 2.0 TB/s, 1513 / 3026 TFLOP/s bf16 /
        # fp8 with sparsity = 756 / 1513 dense (350 W). PCIe Gen5 x16: 128 GB/s both ways = 64
        # per direction (NVLink bridges are optional and rare in rented servers).
        GPU(
            name="h100-pcie",
            memory_bytes=80 * GiB,
            hbm_bandwidth=2.0 * TB,
            bf16_flops=756 * TFLOPS,
            fp8_flops=1513 * TFLOPS,
            int8_flops=1513 * TFLOPS,
            fp32_flops=51 * TFLOPS,  # H100 PCIe datasheet: FP32 51 TFLOP/s
            nvlink_bandwidth=64 * GB,
            network_bandwidth=25 * GB,
            gpus_per_node=8,
            price_per_hour=2.30,
            # derived: the SXM5's measured 79.19 GiB (nvidia-smi shows the same 81559MiB on
            # "NVIDIA H100 PCIe" in public logs)
            usable_memory_bytes=79.19 * GiB,
            smi_memory_mib=81559,
            source="NVIDIA H100 PCIe datasheet; usable derived from h100-sxm",
        ),
        # NVIDIA H100 NVL 94GB (PCIe card, NVLink-bridged in pairs). Datasheet: 94 GB HBM3 at
        # 3.9 TB/s, 1671 / 3341 TFLOP/s bf16 / fp8 with sparsity = 835.5 / 1670.5 dense; the
        # NVLink bridge gives 600 GB/s both ways = 300 per direction, between the two GPUs of a
        # pair only: gpus_per_node is that NVLink domain (2; Azure NC H100 v5 rents the pair),
        # larger groups cross PCIe Gen5 / the NICs (network_bandwidth, 200 Gb/s assumed).
        GPU(
            name="h100-nvl",
            memory_bytes=94 * GiB,
            hbm_bandwidth=3.9 * TB,
            bf16_flops=835.5 * TFLOPS,
            fp8_flops=1670.5 * TFLOPS,
            int8_flops=1670.5 * TFLOPS,
            fp32_flops=60 * TFLOPS,  # H100 NVL datasheet: FP32 60 TFLOP/s
            nvlink_bandwidth=300 * GB,
            network_bandwidth=25 * GB,
            gpus_per_node=2,
            price_per_hour=2.70,
            # TensorRT-LLM on H100 NVL: "total: 93.10 GiB" (NVIDIA/TensorRT-LLM triton_backend
            # multimodal docs); fastfetch reads 99961274368 B = 93.10 GiB
            # (fastfetch-cli/fastfetch#1658); nvidia-smi 95830MiB (NVIDIA/gpu-admin-tools#4)
            usable_memory_bytes=93.10 * GiB,
            smi_memory_mib=95830,
            source="NVIDIA H100 NVL datasheet; usable: TensorRT-LLM log",
        ),
        # NVIDIA H20 (HGX H20, China export part). 96 GB HBM3 at 4.0 TB/s, 148 TFLOP/s bf16 and
        # 296 fp8 (NVIDIA's H20 figures, without sparsity: a GH100 with most tensor throughput
        # cut), NVLink4 900 GB/s total = 450 per direction, 8 per HGX board.
        GPU(
            name="h20",
            memory_bytes=96 * GiB,
            hbm_bandwidth=4.0 * TB,
            bf16_flops=148 * TFLOPS,
            fp8_flops=296 * TFLOPS,
            int8_flops=296 * TFLOPS,
            fp32_flops=44 * TFLOPS,  # NVIDIA H20 figures: FP32 44 TFLOP/s
            nvlink_bandwidth=450 * GB,
            network_bandwidth=50 * GB,
            gpus_per_node=8,
            price_per_hour=1.50,  # a thin market outside China: an estimate
            # derived: nvidia-smi 97871MiB (public "NVIDIA H20" nvidia-smi tables) less
            # CUDA_RESERVED_TYPICAL; no engine log of its total found
            usable_memory_bytes=cuda_total_from_smi(97871),
            smi_memory_mib=97871,
            source="NVIDIA H20 product brief; usable derived from nvidia-smi",
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
            int8_flops=1978 * TFLOPS,
            fp32_flops=67 * TFLOPS,  # H200 datasheet: FP32 67 TFLOP/s
            nvlink_bandwidth=450 * GB,
            network_bandwidth=50 * GB,  # aiconfigurator inter_node_bw: one 400 Gb/s CX7 per GPU
            gpus_per_node=8,
            price_per_hour=3.75,
            # TensorRT-LLM on H200: device total memory 139.81 GiB; vLLM 0.6.4 prints
            # total_gpu_memory=139.80GiB (suesie/grpocredit experiment_report_0427.md) and
            # "Free memory on device (139.21/139.81 GiB)"; nvidia-smi 143771MiB
            usable_memory_bytes=139.81 * GiB,
            smi_memory_mib=143771,
            source="NVIDIA H200 datasheet, aiconfigurator h200_sxm.yaml; usable: engine logs",
        ),
        # NVIDIA H200 NVL 141GB (PCIe card). Datasheet: 141 GB HBM3e at 4.8 TB/s, 1671 / 3341
        # TFLOP/s bf16 / fp8 with sparsity = 835.5 / 1670.5 dense (600 W); 2- or 4-way NVLink
        # bridges at 900 GB/s both ways = 450 per direction: gpus_per_node is the 4-way domain.
        GPU(
            name="h200-nvl",
            memory_bytes=141 * GiB,
            hbm_bandwidth=4.8 * TB,
            bf16_flops=835.5 * TFLOPS,
            fp8_flops=1670.5 * TFLOPS,
            int8_flops=1670.5 * TFLOPS,
            fp32_flops=60 * TFLOPS,  # H200 NVL datasheet: FP32 60 TFLOP/s
            nvlink_bandwidth=450 * GB,
            network_bandwidth=25 * GB,
            gpus_per_node=4,
            price_per_hour=3.20,
            # derived: the H200 SXM's measured 139.81 GiB (same memory, same nvidia-smi
            # 143771MiB on "NVIDIA H200 NVL"; a public CUDA device table lists 139.80 GiB)
            usable_memory_bytes=139.81 * GiB,
            smi_memory_mib=143771,
            source="NVIDIA H200 NVL datasheet; usable derived from h200",
        ),
        # ------------------------------------------------------------------- NVIDIA Ada (AD10x)
        # NVIDIA L40S 48GB GDDR6 (PCIe card). aiconfigurator l40s.yaml: 46068 MiB visible with
        # ECC on (datasheet: 48 GB), 864 GB/s, 362.05 TFLOP/s dense bf16, 733 TFLOP/s dense fp8
        # (datasheet 1466 with sparsity). No NVLink: peers talk over PCIe Gen4 x16, 32 GB/s per
        # direction (aiconfigurator intra_node_bw).
        GPU(
            name="l40s",
            memory_bytes=46068 * MiB,
            hbm_bandwidth=864 * GB,
            bf16_flops=362.05 * TFLOPS,
            fp8_flops=733 * TFLOPS,
            int8_flops=733 * TFLOPS,  # L40S datasheet: 733 TOPS dense int8
            fp32_flops=91.6 * TFLOPS,  # L40S datasheet: FP32 91.6 TFLOP/s
            nvlink_bandwidth=32 * GB,
            network_bandwidth=50 * GB,  # aiconfigurator inter_node_bw: one 400 Gb/s CX7 per GPU
            gpus_per_node=8,
            price_per_hour=1.00,
            # vLLM on L40S: total_gpu_memory (44.31GiB) (vllm-project/vllm#15196), 44.39 GiB in
            # other logs; nvidia-smi 46068MiB (modal-client#2797)
            usable_memory_bytes=44.31 * GiB,
            smi_memory_mib=46068,
            source="aiconfigurator l40s.yaml, NVIDIA L40S datasheet; usable: vLLM #15196",
        ),
        # NVIDIA L40 48GB GDDR6 (PCIe card): the L40S's AD102 at a lower tensor rate.
        # Datasheet: 48 GB at 864 GB/s, 181.05 / 362.1 TFLOP/s bf16 dense / sparse, fp8 362 /
        # 724; PCIe Gen4 x16, 32 GB/s per direction.
        GPU(
            name="l40",
            memory_bytes=46068 * MiB,
            hbm_bandwidth=864 * GB,
            bf16_flops=181.05 * TFLOPS,
            fp8_flops=362 * TFLOPS,
            int8_flops=362 * TFLOPS,
            fp32_flops=90.5 * TFLOPS,  # L40 datasheet: FP32 90.5 TFLOP/s
            nvlink_bandwidth=32 * GB,
            network_bandwidth=25 * GB,
            gpus_per_node=8,
            price_per_hour=0.90,
            # derived: the L40S's measured 44.31 GiB (same 48 GB board memory; nvidia-smi shows
            # the same 46068MiB on "NVIDIA L40")
            usable_memory_bytes=44.31 * GiB,
            smi_memory_mib=46068,
            source="NVIDIA L40 datasheet; usable derived from l40s",
        ),
        # NVIDIA L4 24GB GDDR6 (low-profile PCIe card, AD104). Datasheet: 300 GB/s, 242 / 485
        # TFLOP/s bf16 / fp8 with sparsity = 121 / 242.5 dense; PCIe Gen4 x16, 32 GB/s per
        # direction; g6.48xlarge: 8 GPUs.
        GPU(
            name="l4",
            memory_bytes=23034 * MiB,
            hbm_bandwidth=300 * GB,
            bf16_flops=121 * TFLOPS,
            fp8_flops=242.5 * TFLOPS,
            int8_flops=242.5 * TFLOPS,
            fp32_flops=30.3 * TFLOPS,  # L4 datasheet: FP32 30.3 TFLOP/s
            nvlink_bandwidth=32 * GB,
            network_bandwidth=100 / 8 * GB / 8,  # g6.48xlarge: 100 Gb/s for its 8 GPUs
            gpus_per_node=8,
            price_per_hour=0.50,
            # vLLM logs on L4 print total_gpu_memory (22.06GiB); nvidia-smi 23034MiB
            # (vllm-project/vllm#10156, modal-client#2797)
            usable_memory_bytes=22.06 * GiB,
            smi_memory_mib=23034,
            source="NVIDIA L4 datasheet; usable: vLLM logs",
        ),
        # NVIDIA GeForce RTX 4090 (AD102). Ada whitepaper: 24 GB GDDR6X at 1008 GB/s, 165.2
        # TFLOP/s dense bf16 with fp32 accumulate (the GeForce rate), fp8 with fp32 accumulate
        # 330.3 dense; PCIe Gen4 x16, 32 GB/s per direction (no P2P on GeForce: an upper bound).
        GPU(
            name="rtx-4090",
            memory_bytes=24564 * MiB,
            hbm_bandwidth=1008 * GB,
            bf16_flops=165.2 * TFLOPS,
            fp8_flops=330.3 * TFLOPS,
            int8_flops=660.6 * TFLOPS,  # Ada whitepaper: 660.6 TOPS dense int8
            fp32_flops=82.6 * TFLOPS,  # Ada whitepaper: 82.6 TFLOP/s FP32
            nvlink_bandwidth=32 * GB,
            network_bandwidth=12.5 * GB,
            gpus_per_node=8,
            price_per_hour=0.40,
            # vLLM 0.8.5 logs on RTX 4090 D: total_gpu_memory (23.55GiB) (johnson7788/
            # RLDecisionAgent notes; other 24 GB Ada logs 23.55-23.58); nvidia-smi 24564MiB
            # (vllm-project/vllm#7553)
            usable_memory_bytes=23.55 * GiB,
            smi_memory_mib=24564,
            source="NVIDIA Ada GPU architecture whitepaper; usable: vLLM logs",
        ),
        # NVIDIA RTX 6000 Ada Generation 48GB GDDR6 ECC (AD102 workstation card). Datasheet:
        # 960 GB/s, 1457 TFLOP/s fp8 with sparsity = 728.5 dense, bf16 half that (364.25; the
        # workstation card keeps the full fp32-accumulate rate); PCIe Gen4 x16, 32 GB/s.
        GPU(
            name="rtx-6000-ada",
            memory_bytes=49140 * MiB,
            hbm_bandwidth=960 * GB,
            bf16_flops=364.25 * TFLOPS,
            fp8_flops=728.5 * TFLOPS,
            int8_flops=728.5 * TFLOPS,
            fp32_flops=91.1 * TFLOPS,  # RTX 6000 Ada datasheet: FP32 91.1 TFLOP/s
            nvlink_bandwidth=32 * GB,
            network_bandwidth=25 * GB,
            gpus_per_node=8,
            price_per_hour=0.80,
            # derived: nvidia-smi 49140MiB (public RTX 6000 Ada nvidia-smi rows) less
            # CUDA_RESERVED_TYPICAL; no engine log naming the card found
            usable_memory_bytes=cuda_total_from_smi(49140),
            smi_memory_mib=49140,
            source="NVIDIA RTX 6000 Ada datasheet; usable derived from nvidia-smi",
        ),
        # ------------------------------------------------------------ NVIDIA Blackwell (GB100)
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
            int8_flops=4500 * TFLOPS,  # B200: 4.5 POPS dense int8
            fp32_flops=75 * TFLOPS,  # HGX B200 datasheet: FP32 75 TFLOP/s per GPU
            nvlink_bandwidth=900 * GB,
            network_bandwidth=100 * GB,  # aiconfigurator inter_node_bw: one 800 Gb/s CX8 per GPU
            gpus_per_node=8,
            price_per_hour=5.50,
            fp4_flops=9000 * TFLOPS,
            # kept from the earlier entry: no published engine log of B200's CUDA total was
            # found to confirm it (it is nvidia-smi's 183359MiB less 0.70 GiB)
            usable_memory_bytes=178.36 * GiB,
            smi_memory_mib=183359,
            source="NVIDIA DGX/HGX B200 datasheet, aiconfigurator b200_sxm.yaml",
        ),
        # NVIDIA GB200 (Grace Blackwell superchip, NVL72 rack). Per GPU from the GB200 NVL72
        # datasheet (72 GPUs, figures with sparsity halved): 186 GB HBM3e (13.4 TB / 72; nvidia-
        # smi 189471MiB), 8 TB/s, 2.5 / 5 / 10 PFLOP/s dense bf16 / fp8 / fp4; NVLink5 1.8 TB/s
        # = 900 per direction across the whole rack: gpus_per_node is the NVLink domain, 72.
        GPU(
            name="gb200",
            memory_bytes=189471 * MiB,
            hbm_bandwidth=8 * TB,
            bf16_flops=2500 * TFLOPS,
            fp8_flops=5000 * TFLOPS,
            int8_flops=5000 * TFLOPS,
            fp32_flops=80 * TFLOPS,  # GB200 NVL72 datasheet: FP32 80 TFLOP/s per GPU
            nvlink_bandwidth=900 * GB,
            network_bandwidth=50 * GB,  # one 400 Gb/s ConnectX-7 per GPU in a compute tray
            gpus_per_node=72,
            price_per_hour=7.00,
            fp4_flops=10000 * TFLOPS,
            # derived: nvidia-smi 189471MiB (public "NVIDIA GB200" nvidia-smi tables) less
            # CUDA_RESERVED_TYPICAL
            usable_memory_bytes=cuda_total_from_smi(189471),
            smi_memory_mib=189471,
            source="NVIDIA GB200 NVL72 datasheet; usable derived from nvidia-smi",
        ),
        # NVIDIA B300 (HGX B300, Blackwell Ultra). DGX B300 datasheet per GPU (8): 288 GB HBM3e
        # (nvidia-smi 275040MiB), 8 TB/s, bf16 / fp8 as B200 (2.25 / 4.5 PFLOP/s dense), fp4
        # 108 PFLOP/s dense for 8 = 13.5 per GPU; NVLink5 900 GB/s per direction.
        GPU(
            name="b300",
            memory_bytes=275040 * MiB,
            hbm_bandwidth=8 * TB,
            bf16_flops=2250 * TFLOPS,
            fp8_flops=4500 * TFLOPS,
            # Blackwell Ultra cut int8 math: 0.15 POPS dense (Verda, "NVIDIA GB300 NVL72: GPU
            # Architecture & Performance", per-GPU table)
            int8_flops=150 * TFLOPS,
            fp32_flops=75 * TFLOPS,  # HGX B300 datasheet: FP32 75 TFLOP/s per GPU
            nvlink_bandwidth=900 * GB,
            network_bandwidth=100 * GB,  # one 800 Gb/s ConnectX-8 per GPU
            gpus_per_node=8,
            price_per_hour=6.50,
            fp4_flops=13500 * TFLOPS,
            # derived: nvidia-smi 275040MiB ("NVIDIA B300 SXM6 AC" in public nvidia-smi
            # tables) less CUDA_RESERVED_TYPICAL
            usable_memory_bytes=cuda_total_from_smi(275040),
            smi_memory_mib=275040,
            source="NVIDIA DGX B300 datasheet; usable derived from nvidia-smi",
        ),
        # NVIDIA GeForce RTX 5090 (GB202). Blackwell GeForce whitepaper: 32 GB GDDR7 at 1792
        # GB/s; with fp32 accumulate (the GeForce rate, half the fp16-accumulate 419 / 838)
        # 209.5 TFLOP/s dense bf16, 419 fp8; fp4 1676 dense (3352 "AI TOPS" with sparsity);
        # PCIe Gen5 x16, 64 GB/s per direction (no P2P on GeForce: an upper bound).
        GPU(
            name="rtx-5090",
            memory_bytes=32607 * MiB,
            hbm_bandwidth=1792 * GB,
            bf16_flops=209.5 * TFLOPS,
            fp8_flops=419 * TFLOPS,
            int8_flops=838 * TFLOPS,  # Blackwell GeForce whitepaper: 838 TOPS dense int8
            fp32_flops=104.8 * TFLOPS,  # Blackwell GeForce whitepaper: 104.8 TFLOP/s FP32
            nvlink_bandwidth=64 * GB,
            network_bandwidth=12.5 * GB,
            gpus_per_node=8,
            price_per_hour=0.70,
            fp4_flops=1676 * TFLOPS,
            # TensorRT-LLM 0.19 on RTX 5090: "total: 31.84 GiB"
            # (NVIDIA/TensorRT-LLM#4275 comment 2941155249); nvidia-smi 32607MiB
            # (noonghunna/club-3090#1322)
            usable_memory_bytes=31.84 * GiB,
            smi_memory_mib=32607,
            source="NVIDIA RTX Blackwell GPU architecture whitepaper; usable: TensorRT-LLM #4275",
        ),
        # ------------------------------------------------------------------------------ AMD
        # AMD Instinct MI250X, one GCD: the module carries two graphics compute dies, each its
        # own device to ROCm and to serving engines (a tensor-parallel rank), so the entry is
        # per GCD: half the OAM's 128 GB HBM2e and 3.2768 TB/s, half its 383 TFLOP/s dense
        # bf16 (CDNA2 has no fp8); 8 GCDs per 4-OAM node; Infinity Fabric 800 GB/s both ways
        # per OAM = 200 GB/s per direction per GCD. Network: one 200 Gb/s NIC per OAM (as
        # Frontier's nodes), 12.5 GB/s per GCD.
        GPU(
            name="mi250x",
            vendor="amd",
            memory_bytes=64 * GiB,
            hbm_bandwidth=1.6384 * TB,
            bf16_flops=191.5 * TFLOPS,
            fp8_flops=191.5 * TFLOPS,
            int8_flops=383 * TFLOPS,  # MI250X datasheet: 383 TOPS int8
            fp32_flops=47.85
            * TFLOPS,  # MI250X datasheet: FP32 matrix 95.7 TFLOP/s per OAM, per GCD half
            nvlink_bandwidth=200 * GB,
            network_bandwidth=12.5 * GB,
            gpus_per_node=8,
            price_per_hour=0.80,  # per GCD; a thin rental market: an estimate
            # derived: rocm-smi VRAM Total Memory 68702699520 B = 65520 MiB per GCD (public
            # gfx90a rocm-smi logs), all of it reported by ROCm as on MI300X
            usable_memory_bytes=65520 * MiB,
            smi_memory_mib=65520,
            source="AMD Instinct MI250X datasheet (per GCD); usable derived from rocm-smi",
        ),
        # AMD Instinct MI300X OAM. AMD datasheet: 192 GB HBM3 (rocm-smi shows ~192 GiB),
        # 5.3 TB/s, 1307.4 TFLOP/s dense bf16, 2614.9 TFLOP/s dense fp8. Infinity Fabric: 7
        # links x 64 GB/s per direction to the 7 peers of an 8-GPU platform = 448 GB/s per
        # direction per GPU (AMD quotes 896 GB/s bidirectional aggregate); an all-reduce over
        # the full mesh can use all links, so this is the comparable figure to NVLink's.
        GPU(
            name="mi300x",
            vendor="amd",
            memory_bytes=192 * GiB,
            hbm_bandwidth=5.3 * TB,
            bf16_flops=1307.4 * TFLOPS,
            fp8_flops=2614.9 * TFLOPS,
            int8_flops=2614.9 * TFLOPS,  # MI300X datasheet: 2614.9 TOPS dense int8
            fp32_flops=163.4 * TFLOPS,  # MI300X datasheet: FP32 matrix (= vector) 163.4 TFLOP/s
            nvlink_bandwidth=448 * GB,
            network_bandwidth=50 * GB,  # one 400 Gb/s NIC per GPU, as MI300X platforms pair them
            gpus_per_node=8,
            price_per_hour=2.50,
            # vLLM on ROCm: "Free memory on device cuda:0 (191.46/191.98 GiB)" in public MI300X
            # logs; rocm-smi VRAM Total Memory 206141652992 B = 196592 MiB
            # (ROCm/legacy-rocm-build#4750)
            usable_memory_bytes=191.98 * GiB,
            smi_memory_mib=196592,
            source="AMD Instinct MI300X datasheet; usable: vLLM-on-ROCm logs",
        ),
        # AMD Instinct MI325X OAM: MI300X's CDNA3 compute with 256 GB HBM3E at 6 TB/s (AMD
        # datasheet: 1307.4 / 2614.9 TFLOP/s dense bf16 / fp8), the same 8-GPU Infinity Fabric
        # mesh, 448 GB/s per direction.
        GPU(
            name="mi325x",
            vendor="amd",
            memory_bytes=256 * GiB,
            hbm_bandwidth=6.0 * TB,
            bf16_flops=1307.4 * TFLOPS,
            fp8_flops=2614.9 * TFLOPS,
            int8_flops=2614.9 * TFLOPS,
            fp32_flops=163.4 * TFLOPS,  # MI325X datasheet: FP32 matrix 163.4 TFLOP/s
            nvlink_bandwidth=448 * GB,
            network_bandwidth=50 * GB,
            gpus_per_node=8,
            price_per_hour=3.00,
            # derived: rocm-smi shows 16 MiB less than the capacity on MI300X (196592 MiB) and
            # MI250X (65520 MiB), so 262128 MiB here, all of it reported by ROCm
            usable_memory_bytes=262128 * MiB,
            smi_memory_mib=262128,
            source="AMD Instinct MI325X datasheet; usable derived as MI300X",
        ),
    )
}

GPU_NAMES: tuple[str, ...] = tuple(_CATALOG)

GPU_ALIASES: dict[str, str] = {
    # NVIDIA AI Configurator's system names (its ``--system``; ``aiconfigurator cli default
    # --help`` lists h200_sxm, h100_sxm, h100_pcie, b200_sxm, b300_sxm, gb200, a100_sxm,
    # a100_pcie, l40s, l4, a30, gb300; its systems/ folder also h20_sxm and rtx_5090; older
    # releases spelled GB200 ``gb200_sxm``). Its ``systems/a100_sxm.yaml`` is the 80 GiB part
    # (copy under shared/data/calibration/aiconfigurator/systems), and its A100 PCIe is taken to
    # be the 80 GB one alike. A30 and GB300 have no catalog GPU.
    "h200_sxm": "h200",
    "h100_sxm": "h100-sxm",
    "h100_pcie": "h100-pcie",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200_sxm": "gb200",
    "a100_sxm": "a100-80gb",
    "a100_pcie": "a100-80gb-pcie",
    "h20_sxm": "h20",
    "rtx_5090": "rtx-5090",
    # the SXM form factor spelled out where the catalog name leaves it implied
    "h200-sxm": "h200",
    "b200-sxm": "b200",
    "b300-sxm": "b300",
    "a100-sxm": "a100-80gb",
    "a100-80gb-sxm": "a100-80gb",
    "a100-40gb-sxm": "a100-40gb",
    "h100-sxm5": "h100-sxm",
}
"""Other spellings of catalog GPUs (compared without case): AI Configurator's system names and
the SXM form factor spelled out."""


def fp4_gpus_hint() -> str:
    """The catalog GPUs with FP4 tensor cores, for error messages."""
    return ", ".join(name for name, gpu in _CATALOG.items() if gpu.has_fp4)


def get_gpu(name: str) -> GPU:
    """The catalog GPU called ``name`` (compared without case: ``H100-SXM`` is ``h100-sxm``);
    :class:`CbsimError` listing the known names, and the close ones, otherwise."""
    gpu = _CATALOG.get(name)
    if gpu is not None:
        return gpu
    canonical = gpu_spelling(name)
    if canonical is None:
        raise _unknown_gpu(name)
    return _CATALOG[canonical]


def _unknown_gpu(name: str) -> CbsimError:
    """Unknown GPU: the catalog names, AI Configurator's, and the close ones."""
    aic = sorted(alias for alias in GPU_ALIASES if "_" in alias)
    hint = did_you_mean(name, [*GPU_NAMES, *GPU_ALIASES])
    return CbsimError(
        f"unknown gpu {name!r}; known: {', '.join(sorted(GPU_NAMES))} (or AI Configurator's "
        f"{', '.join(aic)}){hint}"
    )


def gpu_spelling(name: str) -> str | None:
    """The catalog name ``name`` stands for (a catalog name or :data:`GPU_ALIASES` entry, in any
    case), or None."""
    canonical = canonical_name(name, GPU_NAMES)
    if canonical is not None:
        return canonical
    alias = canonical_name(name, GPU_ALIASES)
    return GPU_ALIASES[alias] if alias is not None else None
