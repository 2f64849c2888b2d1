"""A batch as the cost model sees it: sums over its requests, not the requests themselves.

An iteration's price depends on a batch only through a few counts: its tokens and the positions it
samples, and per attention kernel (the bandwidth-bound decode kernel for entries of at most
:data:`DECODE_QUERY_MAX` new tokens, the compute-bound prefill kernel for longer ones) the new
tokens, the keys and values read, the causal (query, key) pairs and the requests. The schedulers
add entries to a :class:`BatchStats` as they build a batch, so pricing it never walks the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cbsim.common.errors import CbsimError

# Batch entries with at most this many new tokens run in the bandwidth-bound decode attention
# kernel (decode steps, speculative verification, the tail chunk of a prefill); larger ones run the
# compute-bound prefill kernel.
DECODE_QUERY_MAX = 64


@dataclass(slots=True)
class BatchStats:
    """The sufficient statistics of a batch for the cost model (sums over its requests).

    ``*_kv_tokens`` count the keys/values attention reads (cached + new), ``*_pairs`` the causal
    query-key pairs Σ q·(c + (q+1)/2). ``sampled_tokens`` are positions whose logits are needed.
    """

    num_requests: int = 0
    num_tokens: int = 0
    sampled_tokens: int = 0
    decode_tokens: int = 0
    decode_kv_tokens: int = 0
    decode_pairs: float = 0.0
    decode_requests: int = 0
    prefill_tokens: int = 0
    prefill_kv_tokens: int = 0
    prefill_pairs: float = 0.0
    prefill_requests: int = 0

    def copy(self) -> BatchStats:
        """A copy (``copy.copy`` of a slotted dataclass goes through pickling's protocol: slower
        than the constructor on the hot path that copies one per speculative step)."""
        return BatchStats(
            self.num_requests,
            self.num_tokens,
            self.sampled_tokens,
            self.decode_tokens,
            self.decode_kv_tokens,
            self.decode_pairs,
            self.decode_requests,
            self.prefill_tokens,
            self.prefill_kv_tokens,
            self.prefill_pairs,
            self.prefill_requests,
        )

    def add(self, new_tokens: int, cached_tokens: int, sampled: int) -> None:
        """Add one request's entry: q new tokens over c cached ones, ``sampled`` logits needed."""
        pairs = new_tokens * (cached_tokens + (new_tokens + 1) * 0.5)
        self.num_requests += 1
        self.num_tokens += new_tokens
        self.sampled_tokens += sampled
        if new_tokens <= DECODE_QUERY_MAX:
            self.decode_tokens += new_tokens
            self.decode_kv_tokens += cached_tokens + new_tokens
            self.decode_pairs += pairs
            self.decode_requests += 1
        else:
            self.prefill_tokens += new_tokens
            self.prefill_kv_tokens += cached_tokens + new_tokens
            self.prefill_pairs += pairs
            self.prefill_requests += 1

    def add_entries(
        self, new_tokens: Sequence[int], cached_tokens: Sequence[int], sampled: Sequence[int]
    ) -> None:
        """:meth:`add` of every entry (``new_tokens[i]``, ``cached_tokens[i]``, ``sampled[i]``) in
        order: the same sums in the same order, kept in locals while adding."""
        requests, tokens, sampled_tokens = self.num_requests, self.num_tokens, self.sampled_tokens
        d_tokens, d_kv, d_pairs = self.decode_tokens, self.decode_kv_tokens, self.decode_pairs
        d_requests = self.decode_requests
        p_tokens, p_kv, p_pairs = self.prefill_tokens, self.prefill_kv_tokens, self.prefill_pairs
        p_requests = self.prefill_requests
        for q, c, s in zip(new_tokens, cached_tokens, sampled, strict=True):
            pairs = q * (c + (q + 1) * 0.5)
            requests += 1
            tokens += q
            sampled_tokens += s
            if q <= DECODE_QUERY_MAX:
                d_tokens += q
                d_kv += c + q
                d_pairs += pairs
                d_requests += 1
            else:
                p_tokens += q
                p_kv += c + q
                p_pairs += pairs
                p_requests += 1
        self.num_requests, self.num_tokens, self.sampled_tokens = requests, tokens, sampled_tokens
        self.decode_tokens, self.decode_kv_tokens, self.decode_pairs = d_tokens, d_kv, d_pairs
        self.decode_requests = d_requests
        self.prefill_tokens, self.prefill_kv_tokens, self.prefill_pairs = p_tokens, p_kv, p_pairs
        self.prefill_requests = p_requests

    def add_many(self, count: int, new_tokens: int, cached_sum: int) -> None:
        """Add ``count`` decode/verify entries of ``new_tokens`` each (all sampled) whose cached
        tokens sum to ``cached_sum``; the same as ``count`` calls of :meth:`add`."""
        if count <= 0:
            return
        tokens = count * new_tokens
        self.num_requests += count
        self.num_tokens += tokens
        self.sampled_tokens += tokens
        pairs = new_tokens * cached_sum + count * new_tokens * (new_tokens + 1) * 0.5
        if new_tokens <= DECODE_QUERY_MAX:
            self.decode_tokens += tokens
            self.decode_kv_tokens += cached_sum + tokens
            self.decode_pairs += pairs
            self.decode_requests += count
        else:
            self.prefill_tokens += tokens
            self.prefill_kv_tokens += cached_sum + tokens
            self.prefill_pairs += pairs
            self.prefill_requests += count

    @classmethod
    def from_pairs(cls, batch: Iterable[Sequence[int]]) -> BatchStats:
        """Stats of a contract batch: (new_tokens, cached_tokens) pairs.

        Decode-sized entries sample every new token (a verify step needs k + 1 logits); prefill
        entries are taken as finishing, sampling one token.
        """
        stats = cls()
        for entry in batch:
            if len(entry) != 2:
                raise CbsimError(f"batch entry {entry!r} must be (new_tokens, cached_tokens)")
            q, c = int(entry[0]), int(entry[1])
            if q < 1 or c < 0:
                raise CbsimError(f"batch entry {entry!r}: need new_tokens >= 1, cached_tokens >= 0")
            stats.add(q, c, q if q <= DECODE_QUERY_MAX else 1)
        return stats
