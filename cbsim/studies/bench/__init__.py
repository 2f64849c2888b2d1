"""``cbsim bench``: a serving benchmark from flags alone, reported as ``vllm bench serve`` does.

People who size LLM deployments already run ``vllm bench serve --model M --input-len 1024
--output-len 128 --num-prompts 1000 --request-rate 8`` (or ``--max-concurrency 64``) against a
real server and read its ``Serving Benchmark Result`` block and ``--save-result`` JSON. ``cbsim
bench`` takes the same flags plus the deployment a real benchmark gets from its server
(``--gpu``, ``--tp``, ``--engine``, ``--dtype``), simulates the run, prints the same block and
writes a result JSON with the same keys, so a simulated run diffs against a measured one with the
tools already used for measured ones. Several values of ``--request-rate`` or
``--max-concurrency`` make a sweep, one run (and one row, one result file) per value.

Every other flag of ``vllm bench serve`` is taken too, simulated (datasets, ramp-ups, a rate
behind a concurrency cap, vLLM's result-file naming) or named as ignored.

The package: :mod:`~cbsim.studies.bench.vllm_flags` (vLLM's flags without meaning in a simulation),
:mod:`~cbsim.studies.bench.datasets` (``--dataset-name`` and its lengths), :mod:`~cbsim.studies.bench.options`
(the flags checked), :mod:`~cbsim.studies.bench.load` (flags → one scenario per load point),
:mod:`~cbsim.studies.bench.vllm_result` (a run → vLLM's per-request records, metrics and result JSON),
:mod:`~cbsim.studies.bench.run` (running the points, writing result files and folders),
:mod:`~cbsim.studies.bench.render` (vLLM's text) and :mod:`~cbsim.studies.bench.cli` (the command).
"""

from __future__ import annotations

from cbsim.studies.bench.cli import bench_command
from cbsim.studies.bench.load import BenchOptions, LoadPoint, load_points
from cbsim.studies.bench.run import BenchRun, Reporting, run_bench
from cbsim.studies.bench.vllm_result import result_json

__all__ = [
    "BenchOptions",
    "BenchRun",
    "LoadPoint",
    "Reporting",
    "bench_command",
    "load_points",
    "result_json",
    "run_bench",
]
