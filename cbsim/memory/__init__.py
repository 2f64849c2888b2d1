"""KV memory: the blocks a replica's requests hold, the prefixes it keeps cached, and moving KV.

- :mod:`~cbsim.memory.kvcache`: the paged KV cache's block accounting.
- :mod:`~cbsim.memory.prefix_cache`: prefix caching (a radix tree of cached segments, an optional
  CPU tier).
- :mod:`~cbsim.memory.kv_transfer`: the prefill-to-decode KV transfer of disaggregated serving.

How many blocks a replica has is the engine's memory plan (:mod:`cbsim.cost.engine_memory`); the
bytes per token are the model's (:mod:`cbsim.catalog.model_bytes`).

Layer 5: imports :mod:`cbsim.common`, :mod:`cbsim.catalog`, :mod:`cbsim.cost`, :mod:`cbsim.schema`,
:mod:`cbsim.workload`.
"""
