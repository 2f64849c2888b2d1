"""A run: a scenario loaded and checked, simulated, and its results.

- :mod:`~cbsim.run.loading`: :func:`load_scenario` (a YAML file or mapping, overrides, every check
  that needs the catalog, the workload or the fleet).
- :mod:`~cbsim.run.preflight`: what a run will do, told before it starts.
- :mod:`~cbsim.run.simulate`: :func:`simulate` (scenario to :class:`~cbsim.run.results.Results`).
- :mod:`~cbsim.run.results`: the results (requests, iterations, timeseries, summary) and writing
  them; :mod:`~cbsim.run.plots`: their charts.

The package's top level (``cbsim.load_scenario``, ``cbsim.simulate``, ``cbsim.Results``)
re-exports these.

Layer 8: imports every layer below; the studies and the command line import it.
"""
