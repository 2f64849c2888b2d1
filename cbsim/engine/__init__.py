"""The engine: the discrete-event loop that serves requests on replicas, iteration by iteration.

- :mod:`~cbsim.engine.loop`: the simulation (one SimPy process per replica, a run of decode
  iterations advanced in one event).
- :mod:`~cbsim.engine.fleet`, :mod:`~cbsim.engine.replica`: building the replicas of every pool,
  each with its scheduler, KV cache and cost model (:mod:`~cbsim.engine.cost_models`).
- :mod:`~cbsim.engine.scheduler`: the batching schedulers (static, orca, prefill-first, sarathi).
- :mod:`~cbsim.engine.speculative`: speculative decoding inside the batch (proposers, acceptance,
  draft-length policies).
- :mod:`~cbsim.engine.decode_plan`, :mod:`~cbsim.engine.decode_run`: runs of pure-decode
  iterations planned and priced at once (compiled).
- :mod:`~cbsim.engine.dispatch`, :mod:`~cbsim.engine.router`, :mod:`~cbsim.engine.handoff`:
  arrivals routed to replicas; prefill-to-decode hand-off when disaggregated.
- :mod:`~cbsim.engine.load_generator`: the clients' side (stages, timeouts).
- :mod:`~cbsim.engine.autoscale`: replicas added and removed as load changes.
- :mod:`~cbsim.engine.recorder`: what every iteration and request did, as columns.

Layer 7: imports every layer below (:mod:`cbsim.common` to :mod:`cbsim.outputs`); nothing below
imports it.
"""
