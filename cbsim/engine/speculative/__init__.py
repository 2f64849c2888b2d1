"""Speculative decoding inside continuous batching.

``verification`` (exact rejection sampling), ``token_level`` (explicit draft/target distributions),
``acceptance`` (acceptance models and conversions between α, the marginal rate and acceptance
length), ``acceptance_trace`` (replayed oracle acceptance lengths), ``proposers`` (draft model,
EAGLE head, n-gram, with their cost), ``policies`` (k policies) and ``decoder`` (the per-request
decoders wired into the batch); ``step_kernel`` (a stepped iteration's drafts planned and verified
in one compiled call each) and ``fast_run`` (runs of speculative iterations in one compiled call).
"""

from __future__ import annotations
