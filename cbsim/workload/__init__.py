"""The workload: what the clients send, and the requests it becomes.

A scenario's ``workload`` section is read once (:func:`~cbsim.workload.build.read_workload`
into :class:`~cbsim.workload.inputs.WorkloadInputs`) and each part drawn from its own spec into
what the request sources need (:mod:`~cbsim.workload.build`, :mod:`~cbsim.workload.drawn`: arrival
times, prompt and output lengths, sessions, prompt pools, replayed traces, per-request
acceptance; no module below ``build`` takes the scenario), then :mod:`~cbsim.workload.sources` send those requests
into a simulation as it runs (open loop, closed loop, sessions, stages, trace replay).
:mod:`~cbsim.workload.request` is one request's state as it travels through the engine, and
:mod:`~cbsim.workload.request_table` the columns finished requests are kept in.
:mod:`~cbsim.workload.prefix_segments` names a prompt's content as chained segments, the identity
the prefix cache matches on.

Layer 4: imports :mod:`cbsim.common`, :mod:`cbsim.catalog`, :mod:`cbsim.cost`, :mod:`cbsim.schema`.
"""
