"""cbsim: a discrete-event simulator of continuous-batching LLM serving.

>>> import cbsim
>>> scenario = cbsim.load_scenario("scenarios/chat-llama3-8b-h100.yaml")  # doctest: +SKIP
>>> results = cbsim.simulate(scenario)  # doctest: +SKIP
>>> results.summary["ttft_p99_s"]  # doctest: +SKIP
"""

from __future__ import annotations

from cbsim.common.errors import CbsimError
from cbsim.cost.kernel_loading import load_package_lightly
from cbsim.run.loading import Scenario, load_scenario
from cbsim.run.results import Results
from cbsim.run.simulate import compare_no_spec, simulate

# every kernel is imported by now: each loads from numba's cache without numba's compiler set-up
load_package_lightly(__name__)

__all__ = ["CbsimError", "Results", "Scenario", "compare_no_spec", "load_scenario", "simulate"]
__version__ = "0.1.0"
