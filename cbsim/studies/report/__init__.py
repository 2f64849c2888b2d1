"""Reports: one self-contained HTML page (or Markdown for pasting) from a run, a sweep or a plan.

``cbsim report SOURCE --out report.html [--format html|md] [--title T]`` reads one of four kinds
of cbsim output, detected from what ``SOURCE`` holds:

* **run** — a result directory written by :meth:`cbsim.run.results.Results.write` (it holds
  ``summary.json``): an overview of the scenario, the summary as tables (headline figures and a
  latency percentile table), the throughput/queue, latency CDF and batch/KV/k figures, the
  per-request acceptance figure when the run speculated, the scenario YAML and every summary field.
* **sweep** — a sweep directory written by :func:`cbsim.studies.sweep.runner.run_sweep` (it holds
  ``sweep.parquet``): the points as a table (override columns, seed, key and the key summary
  fields), latency (and output throughput) against load when a rate-like override column varies,
  one line per value of the other varying columns, and the latency CDFs of all points overlaid when
  there are at most :data:`MAX_OVERLAID_POINTS` of them.
* **capacity** — the JSON object of :func:`cbsim.studies.capacity.plan` (``cbsim capacity --json >
  plan.json``), given as the file or as a directory holding ``capacity.json`` or ``plan.json``:
  the recommendation (best alternative, replicas, GPUs, cost per hour and per million output
  tokens, the SLO), a table of alternatives with the SLO metrics each achieved, the cost-vs-latency
  Pareto frontier per SLO metric and latency against offered load from the search's evaluations
  (failed rates marked, the SLO as a line), and the fleet verification runs.
* **plan** — the folder ``cbsim plan --out`` writes (or its ``plan.json``): the line to buy on
  and the winner with its launch command, what was searched, the layouts that meet the SLO, the
  Pareto front, the others with why, and the verifications (:mod:`~cbsim.studies.report.deployment_plan`).

HTML embeds every figure as a base64 PNG ``data:`` URI and its CSS inline: the file makes no
request to anything outside itself, so it can be mailed or attached as is. Markdown writes the
figures as PNG files beside the ``.md`` file (``<stem>-<figure>.png``) and references them
relatively. Files are written atomically (a temporary file beside the target, then a rename), and
an existing file is overwritten only when cbsim wrote it: a report (its generator line), or a figure
the Markdown report being replaced refers to (see :mod:`cbsim.common.output_folders`).

The pieces are usable from Python: :func:`build_report` (or :func:`run_report`,
:func:`sweep_report`, :func:`capacity_report` for objects in memory) gives a :class:`Report`,
:func:`render_html` / :func:`render_markdown` turn it into text and :func:`write_report` does
everything. :data:`report_command` is the click command (``cbsim report``). A path that does not
exist, or is not one of the four kinds, raises :class:`~cbsim.common.errors.CbsimError` naming it.

The package: :mod:`~cbsim.studies.report.document` (the document model), :mod:`~cbsim.studies.report.formatting`
(shared formatting), :mod:`~cbsim.studies.report.sources` (detection), one module per report
(:mod:`~cbsim.studies.report.run`, :mod:`~cbsim.studies.report.sweep`, :mod:`~cbsim.studies.report.capacity`), the
renderers (:mod:`~cbsim.studies.report.html_page`, :mod:`~cbsim.studies.report.markdown`),
:mod:`~cbsim.studies.report.writing` (building and writing) and :mod:`~cbsim.studies.report.cli` (the command).
"""

from __future__ import annotations

from cbsim.studies.report.capacity import capacity_report
from cbsim.studies.report.cli import report_command
from cbsim.studies.report.document import (
    Code,
    Facts,
    Image,
    Paragraph,
    Report,
    ReportKind,
    Section,
    Table,
)
from cbsim.studies.report.formatting import format_value
from cbsim.studies.report.html_page import render_html
from cbsim.studies.report.markdown import render_markdown
from cbsim.studies.report.run import run_report
from cbsim.studies.report.sources import CAPACITY_FILES, detect
from cbsim.studies.report.sweep import MAX_OVERLAID_POINTS, sweep_report
from cbsim.studies.report.writing import build_report, write_report

__all__ = [
    "CAPACITY_FILES",
    "MAX_OVERLAID_POINTS",
    "Code",
    "Facts",
    "Image",
    "Paragraph",
    "Report",
    "ReportKind",
    "Section",
    "Table",
    "build_report",
    "capacity_report",
    "detect",
    "format_value",
    "render_html",
    "render_markdown",
    "report_command",
    "run_report",
    "sweep_report",
    "write_report",
]
