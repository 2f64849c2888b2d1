"""A serving engine's own all-reduce kernel, priced from its mechanism on a GPU without its table.

vLLM, SGLang and TensorRT-LLM do not run tensor parallelism's small all-reduces through NCCL but
through their own one-shot / two-shot kernels over NVLink peer memory (vLLM's and SGLang's
``custom_all_reduce``, TensorRT-LLM's ``ONESHOT``/``TWOSHOT`` strategies), up to some message size
(vLLM: below 8 MiB) and NCCL beyond. Where an engine's kernel was measured (AI Configurator's
``custom_allreduce`` tables, H100 and H200) the cost model reads the measurement; elsewhere
(A100, B200) :class:`CustomAllreduce` prices it from what the kernel does:

* **one-shot**: a launch-and-synchronisation latency (each GPU writes a flag to every peer and
  waits for theirs), then every GPU reads the whole message from each of its ``n − 1`` peers over
  NVLink and reduces locally: ``L₁(n) + (n − 1) · S / (B · η)``;
* **two-shot** (larger messages): reduce-scatter then all-gather, each GPU reading
  ``(n − 1)/n`` of the message twice, behind two synchronisations: ``L₂(n) + 2(n − 1)/n · S /
  (B · η)``;
* the engine runs whichever is faster, and NCCL (the GPU's own measured curve) where that is
  faster still or the message exceeds ``max_bytes``.

``S`` is the message (bytes), ``B`` the GPU's NVLink bandwidth per direction (the catalog's
``nvlink_bandwidth``), ``L(n) = latency + latency_per_peer · (n − 1)``. The latencies and the
efficiency ``η`` are fitted to one GPU's measured custom all-reduce
(:mod:`cbsim.studies.calibration.custom_allreduce`); on another GPU the latencies are scaled by that GPU's
measured small-message NCCL latency over the fitted GPU's (``reference_latency_s`` at
``reference_size_bytes``, per GPU count): the synchronisation is NVLink round trips and a launch,
which NCCL's smallest messages measure on every GPU. A model, not a measurement: no custom
all-reduce table of A100 or B200 is shipped.

Not modelled: recent vLLM on Hopper and Blackwell with symmetric memory narrows its custom kernel's
range (SM 10.0, 8 GPUs: up to 1 MiB) and runs PyTorch's symmetric-memory all-reduce up to
64–128 MiB before NCCL; here the custom kernel's two-shot covers up to 8 MiB and NCCL the rest,
which overestimates 8–128 MiB messages (prefill chunks of 512+ tokens on wide models). Across
nodes the engines' custom kernels are off; the cost model still prices a multi-node group's
in-node part like a node's all-reduce.
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from cbsim.common.limits import ENGINE_TIME

MAX_CUSTOM_BYTES = 8.0 * 2**20
"""vLLM's ``CustomAllreduce`` default ``max_size`` (messages below it run the custom kernel)."""


class CustomAllreduce(BaseModel):
    """Fitted terms of an engine's one-shot / two-shot all-reduce (see the module docstring) and
    the GPUs it prices (those without a measured table of the engine's kernel)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fitted_on: str
    gpus: list[str] = Field(default_factory=list)
    latency_s: float = Field(gt=0.0, le=ENGINE_TIME.high)
    latency_per_peer_s: float = Field(ge=0.0, le=ENGINE_TIME.high)
    two_shot_latency_s: float = Field(gt=0.0, le=ENGINE_TIME.high)
    two_shot_latency_per_peer_s: float = Field(ge=0.0, le=ENGINE_TIME.high)
    efficiency: float = Field(gt=0.0, le=1.5)
    max_bytes: float = Field(default=MAX_CUSTOM_BYTES, gt=0.0, le=2.0**40)
    reference_size_bytes: float = Field(default=4096.0, gt=0.0, le=2.0**40)
    reference_latency_s: dict[str, Annotated[float, Field(gt=0.0, le=ENGINE_TIME.high)]] = Field(
        default_factory=dict
    )

    def kernel_time(
        self, size_bytes: float, gpus: int, nvlink_bandwidth: float, scale: float = 1.0
    ) -> float:
        """Seconds of the faster of one-shot and two-shot for a ``size_bytes`` message over
        ``gpus`` GPUs, latencies times ``scale``."""
        one, two = self._shots(size_bytes, gpus, nvlink_bandwidth, scale)
        return float(one if one < two else two)

    def _shots(self, size_bytes: Any, gpus: int, nvlink_bandwidth: float, scale: Any) -> Any:
        """(one-shot, two-shot) seconds, for one message or element-wise over arrays (the same
        operations in the same order either way)."""
        peers = gpus - 1
        rate = nvlink_bandwidth * self.efficiency
        one = (self.latency_s + self.latency_per_peer_s * peers) * scale + peers * size_bytes / rate
        two = (self.two_shot_latency_s + self.two_shot_latency_per_peer_s * peers) * scale
        two = two + 2.0 * peers / gpus * size_bytes / rate
        return one, two

    def time(
        self,
        size_bytes: float,
        gpus: int,
        nvlink_bandwidth: float,
        nccl_s: float,
        nccl_reference_s: float,
    ) -> float:
        """Seconds of the engine's all-reduce of ``size_bytes`` over ``gpus`` GPUs of a GPU whose
        NCCL takes ``nccl_s`` for this message and ``nccl_reference_s`` at
        ``reference_size_bytes``: its own kernel where that is faster and the message small
        enough, else NCCL. A GPU count the fit did not measure gets NCCL."""
        reference = self.reference_latency_s.get(str(gpus))
        if reference is None or gpus < 2 or size_bytes > self.max_bytes:
            return nccl_s
        own = self.kernel_time(size_bytes, gpus, nvlink_bandwidth, nccl_reference_s / reference)
        return own if own < nccl_s else nccl_s

    def times(
        self,
        size_bytes: np.ndarray,
        gpus: int,
        nvlink_bandwidth: float,
        nccl_s: np.ndarray,
        nccl_reference_s: float | np.ndarray,
    ) -> np.ndarray:
        """:meth:`time` at each of the messages ``size_bytes`` (NCCL's ``nccl_s`` for each), the
        same float per message bit for bit."""
        reference = self.reference_latency_s.get(str(gpus))
        if reference is None or gpus < 2:
            return np.asarray(nccl_s, dtype=np.float64)
        one, two = self._shots(size_bytes, gpus, nvlink_bandwidth, nccl_reference_s / reference)
        own = np.where(one < two, one, two)
        return np.where((size_bytes > self.max_bytes) | (own >= nccl_s), nccl_s, own)
