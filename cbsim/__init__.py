"""cbsim: a discrete-event simulator of continuous-batching LLM serving.

>>> import cbsim
>>> scenario = cbsim.load_scenario("scenarios/chat-llama3-8b-h100.yaml")  # doctest: +SKIP
>>> results = cbsim.simulate(scenario)  # doctest: +SKIP
>>> results.summary["ttft_p99_s"]  # doctest: +SKIP
"""

from __future__ import annotations

from cbsim.common.errors import CbsimError
from cbsim.cost.kernel_cache import stamp_kernels
from cbsim.cost.kernel_loading import load_all_lightly, package_kernels
from cbsim.run.loading import Scenario, load_scenario
from cbsim.run.results import Results
from cbsim.run.simulate import RunTables, compare_no_spec, simulate, simulate_tables

# every kernel is imported by now: each one's cache entries hold for the sources of every kernel
# and of what they import, and each loads from numba's cache without numba's compiler set-up
_kernels = package_kernels(__name__)
stamp_kernels(_kernels)
load_all_lightly(_kernels)
del _kernels

__all__ = [
    "CbsimError",
    "Results",
    "RunTables",
    "Scenario",
    "compare_no_spec",
    "load_scenario",
    "simulate",
    "simulate_tables",
]
__version__ = "0.1.0"
