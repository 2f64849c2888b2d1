"""The workload: what the clients send, and the requests it becomes.

A scenario's ``workload`` section is read once into what the request sources need
(:mod:`~cbsim.workload.build`: arrival times, prompt and output lengths, sessions, prompt pools,
replayed traces, per-request acceptance), then :mod:`~cbsim.workload.sources` send those requests
into a simulation as it runs (open loop, closed loop, sessions, stages, trace replay).
:mod:`~cbsim.workload.request` is one request's state as it travels through the engine, and
:mod:`~cbsim.workload.request_table` the columns finished requests are kept in.
:mod:`~cbsim.workload.prefix_segments` names a prompt's content as chained segments, the identity
the prefix cache matches on.

Layer 4: imports :mod:`cbsim.common`, :mod:`cbsim.catalog`, :mod:`cbsim.cost`, :mod:`cbsim.schema`.
"""
