"""A Llama-style decoder layer built from a model's shape alone, to be timed.

Random weights, nothing downloaded: RMSNorm, a fused QKV projection (with bias for Qwen2), rotary
embedding, grouped-query attention through
``torch.nn.functional.scaled_dot_product_attention`` (``enable_gqa``), the O projection and a
SwiGLU MLP with fused gate+up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cbsim.catalog.models import ModelShape
from cbsim.studies.calibration.measure_grid import IterationBatch

if TYPE_CHECKING:  # torch is optional: mypy sees it only where it is installed
    from torch import Tensor  # type: ignore[import-not-found, unused-ignore]


# --------------------------------------------------------------------------- the model


class _Layer:
    """One Llama-style decoder layer (pre-norm, fused QKV and gate+up, SwiGLU, no biases but
    Qwen2's QKV bias) with random weights."""

    def __init__(self, torch: Any, shape: ModelShape, device: Any, dtype: Any) -> None:
        nn = torch.nn
        h, q, kv = shape.hidden_size, shape.q_dim, shape.kv_dim
        inner = shape.intermediate_size
        opts: dict[str, Any] = {"device": device, "dtype": dtype}
        self.torch = torch
        self.shape = shape
        self.input_norm = torch.ones(h, **opts)
        self.qkv_proj = nn.Linear(h, q + 2 * kv, bias=shape.qkv_bias, **opts)
        self.o_proj = nn.Linear(q, h, bias=False, **opts)
        self.post_norm = torch.ones(h, **opts)
        self.gate_up_proj = nn.Linear(h, (2 if shape.gated_mlp else 1) * inner, bias=False, **opts)
        self.down_proj = nn.Linear(inner, h, bias=False, **opts)

    def linears(self) -> dict[str, Any]:
        return {
            "qkv_proj": self.qkv_proj,
            "o_proj": self.o_proj,
            "gate_up_proj": self.gate_up_proj,
            "down_proj": self.down_proj,
        }

    def forward(self, x: Tensor, rope: _Rope, attention: _Attention) -> Tensor:
        torch, s = self.torch, self.shape
        F = torch.nn.functional
        tokens = x.shape[0]
        qkv = self.qkv_proj(_rms_norm(torch, x, self.input_norm))
        q, k, v = qkv.split([s.q_dim, s.kv_dim, s.kv_dim], dim=-1)
        q = rope.apply(q.view(tokens, s.num_heads, s.head_dim))
        k = rope.apply(k.view(tokens, s.num_kv_heads, s.head_dim))
        v = v.view(tokens, s.num_kv_heads, s.head_dim)
        x = x + self.o_proj(attention(self, q, k, v))
        up = self.gate_up_proj(_rms_norm(torch, x, self.post_norm))
        if s.gated_mlp:
            gate, up = up.chunk(2, dim=-1)
            act = F.silu(gate) * up
        else:
            act = F.gelu(up)
        out: Tensor = x + self.down_proj(act)
        return out


def _rms_norm(torch: Any, x: Tensor, weight: Tensor) -> Tensor:
    variance = x.float().pow(2).mean(-1, keepdim=True)
    out: Tensor = (x.float() * torch.rsqrt(variance + 1e-6)).to(x.dtype) * weight
    return out


class _Rope:
    """Rotary embedding (NeoX layout) read from a cos/sin cache at given positions."""

    def __init__(
        self, torch: Any, head_dim: int, positions: Tensor, device: Any, dtype: Any
    ) -> None:
        self.torch = torch
        half = head_dim // 2
        inv_freq = 1.0 / (
            10000.0 ** (torch.arange(0, half, device=device, dtype=torch.float32) / max(half, 1))
        )
        angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
        self.cos = angles.cos().to(dtype)[:, None, :]
        self.sin = angles.sin().to(dtype)[:, None, :]
        self.half = half

    def apply(self, x: Tensor) -> Tensor:
        half = self.half
        x1, x2 = x[..., :half], x[..., half : 2 * half]
        rotated = [x1 * self.cos - x2 * self.sin, x2 * self.cos + x1 * self.sin]
        if x.shape[-1] > 2 * half:  # odd head_dim: the last channel passes through
            rotated.append(x[..., 2 * half :])
        out: Tensor = self.torch.cat(rotated, dim=-1)
        return out


class _Attention:
    """Attention over a flattened mixed batch: causal self-attention for each prefill, then the
    decodes (one token each) over their KV cache, which this call appends to."""

    def __init__(
        self,
        torch: Any,
        shape: ModelShape,
        batch: IterationBatch,
        layers: Sequence[_Layer],
        device: Any,
        dtype: Any,
    ) -> None:
        self.torch = torch
        self.batch = batch
        self.shape = shape
        self.cache: dict[int, tuple[Tensor, Tensor]] = {}
        if batch.decodes:
            size = (batch.decodes, shape.num_kv_heads, batch.context + 1, shape.head_dim)
            for layer in layers:
                self.cache[id(layer)] = (
                    torch.randn(size, device=device, dtype=dtype),
                    torch.randn(size, device=device, dtype=dtype),
                )

    def __call__(self, layer: _Layer, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        torch, s, b = self.torch, self.shape, self.batch
        sdpa = torch.nn.functional.scaled_dot_product_attention
        outputs = []
        start = 0
        for length in b.prefill_lengths:
            end = start + length
            out = sdpa(
                q[start:end].transpose(0, 1).unsqueeze(0),
                k[start:end].transpose(0, 1).unsqueeze(0),
                v[start:end].transpose(0, 1).unsqueeze(0),
                is_causal=True,
                enable_gqa=True,
            )
            outputs.append(out.squeeze(0).transpose(0, 1).reshape(length, s.q_dim))
            start = end
        if b.decodes:
            cache_k, cache_v = self.cache[id(layer)]
            cache_k[:, :, b.context] = k[start:]
            cache_v[:, :, b.context] = v[start:]
            out = sdpa(q[start:].unsqueeze(2), cache_k, cache_v, enable_gqa=True)
            outputs.append(out.reshape(b.decodes, s.q_dim))
        result: Tensor = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
        return result
