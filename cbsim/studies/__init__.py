"""Studies: what people do with many runs — sweeps, capacity searches, deployment plans,
simulated serving benchmarks, calibration against measurements, and reports of them.

- :mod:`~cbsim.studies.sweep`: a base scenario and its variations, one table.
- :mod:`~cbsim.studies.capacity`: the highest rate a replica sustains within an SLO, and the fleet
  a load needs.
- :mod:`~cbsim.studies.plan`: the cheapest layout for a workload and SLO.
- :mod:`~cbsim.studies.bench`: ``vllm bench serve``'s flags and results, simulated.
- :mod:`~cbsim.studies.calibration`: fitting the cost model to measured timings and checking it.
- :mod:`~cbsim.studies.report`: HTML and Markdown reports of runs, sweeps, capacities and plans.

Layer 9: imports every layer below (through :mod:`cbsim.run`); the command line imports it.
"""
