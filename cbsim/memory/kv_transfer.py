"""KV transfer: how a disaggregated request's KV cache crosses from prefill to decode.

When a prefill instance has computed a prompt, the decode instance chosen for the request
allocates blocks for it and the prompt's KV cache is copied into them (vLLM's NixlConnector pulls,
Mooncake and SGLang push; either way one copy per request). What crosses is the KV the decode
instance keeps for the prompt: every layer's keys and values of every prompt token as the decode
instance's layout shards them (a KV head its tensor-parallel GPUs replicate is sent to each of
them), in its KV-cache precision.

Each GPU of the sending instance moves its own shard over its own link, so a transfer uses as many
GPU-to-GPU streams in parallel as the smaller side has GPUs holding the request's KV. A stream
runs at NVLink's bandwidth when the two instances share a node, else at the GPUs' NICs' (RDMA,
``network_bandwidth`` in the hardware catalog), the slower side's where the GPUs differ. So

    time = KV bytes / (streams x per-stream bandwidth) + latency

or ``KV bytes / bandwidth + latency`` for a link whose bandwidth the scenario gives
(``kv_transfer.bandwidth_gb_s``: the whole link's). The latency is a per-transfer constant (an
assumption, not measured here: :data:`NVLINK_LATENCY_S`, :data:`RDMA_LATENCY_S`, both
overridable by ``kv_transfer.latency_s``) for the descriptor exchange and completion.

Where instances are. Instances are packed into nodes in order, prefill pool first: an instance
takes the next node with room for all its GPUs (an instance larger than a node takes whole nodes
of its own), and pools of different GPU types never share a node. A prefill and a decode instance
share a node when packing put them in the same one (``kv_transfer.link: auto``); ``nvlink`` or
``rdma`` force the link.

Links. Every (prefill instance, decode instance) pair has one link, a SimPy resource of capacity
one: transfers on it queue, each holding it for its whole time.

Layer-wise transfer (``kv_transfer.layerwise``), as Mooncake and NIXL can: a layer's KV leaves as
soon as the prefill has computed it, so the copy overlaps the prefill; what is left once the
prefill ends is the copy minus the time the prefill took (from its first scheduled iteration), but
never less than one layer's share of it, plus the latency. The overlapped part is taken not to
contend with other transfers on the link (an approximation: it happened while the link was
otherwise idle or shared).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import simpy

from cbsim.catalog.hardware import GPU, get_gpu
from cbsim.catalog.model_bytes import kv_bytes_per_token_per_gpu
from cbsim.catalog.models import get_model
from cbsim.schema.cluster import Cluster, KvTransfer

NVLINK_LATENCY_S = 10e-6
"""Per-transfer latency over NVLink (an assumption: a peer copy's launch and completion)."""
RDMA_LATENCY_S = 100e-6
"""Per-transfer latency over RDMA (an assumption: a descriptor exchange and completion poll)."""

LinkKind = Literal["nvlink", "rdma"]


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """A prefill-to-decode link: its kind, bandwidth in bytes/s (all streams) and latency."""

    kind: LinkKind
    bandwidth: float
    latency_s: float

    def time(self, kv_bytes: float) -> float:
        """Seconds to move ``kv_bytes`` over the link."""
        return kv_bytes / self.bandwidth + self.latency_s


def kv_bytes_per_token(cluster: Cluster, kv_dtype: str) -> float:
    """Bytes one prompt token's KV takes on the receiving (decode) instance, all its GPUs that
    hold the request's KV together (one data-parallel rank's)."""
    model = get_model(cluster.model)
    per_gpu = kv_bytes_per_token_per_gpu(model, cluster.tp, kv_dtype, cluster.pp)
    return per_gpu * cluster.tp * cluster.pp


def kv_holding_gpus(cluster: Cluster) -> int:
    """GPUs of one instance holding a request's KV (one data-parallel rank's tp x pp)."""
    return cluster.tp * cluster.pp


def node_of_instances(
    gpus_per_instance: list[int], kinds: list[str], gpus_per_node: list[int]
) -> list[int]:
    """The node each instance lands on, packing them in order (see the module docstring):
    instance i needs ``gpus_per_instance[i]`` GPUs of kind ``kinds[i]``, whose nodes have
    ``gpus_per_node[i]``."""
    nodes: list[int] = []
    node, used, kind = -1, 0, ""
    for gpus, gpu_kind, per_node in zip(gpus_per_instance, kinds, gpus_per_node, strict=True):
        if node < 0 or gpu_kind != kind or used + gpus > per_node:
            node, used, kind = node + 1, 0, gpu_kind
        nodes.append(node)
        if gpus >= per_node:  # whole nodes of its own
            node += -(-gpus // per_node) - 1
            used = per_node
        else:
            used += gpus
    return nodes


def link_spec(settings: KvTransfer, prefill: Cluster, decode: Cluster, same_node: bool) -> LinkSpec:
    """The link between a prefill and a decode instance (see the module docstring)."""
    kind: LinkKind = (
        ("nvlink" if same_node else "rdma") if settings.link == "auto" else settings.link
    )
    latency = settings.latency_s
    if latency is None:
        latency = NVLINK_LATENCY_S if kind == "nvlink" else RDMA_LATENCY_S
    if settings.bandwidth_gb_s is not None:
        return LinkSpec(kind, settings.bandwidth_gb_s * 1e9, latency)
    sender, receiver = get_gpu(prefill.gpu), get_gpu(decode.gpu)
    streams = min(kv_holding_gpus(prefill), kv_holding_gpus(decode))
    per_stream = min(_stream_bandwidth(sender, kind), _stream_bandwidth(receiver, kind))
    return LinkSpec(kind, streams * per_stream, latency)


def _stream_bandwidth(gpu: GPU, kind: LinkKind) -> float:
    return gpu.nvlink_bandwidth if kind == "nvlink" else gpu.network_bandwidth


def visible_time(link: LinkSpec, kv_bytes: float, layers: int, prefill_s: float) -> float:
    """A layer-wise transfer's seconds after its prefill ends, the prefill having taken
    ``prefill_s`` (see the module docstring)."""
    copy = kv_bytes / link.bandwidth
    return max(copy / layers, copy - prefill_s) + link.latency_s


class Link:
    """One prefill-to-decode link: its spec and the SimPy resource its transfers queue on."""

    __slots__ = ("busy_s", "resource", "spec", "transfers")

    def __init__(self, env: simpy.Environment, spec: LinkSpec) -> None:
        self.spec = spec
        self.resource = simpy.Resource(env, capacity=1)
        self.transfers = 0
        self.busy_s = 0.0
