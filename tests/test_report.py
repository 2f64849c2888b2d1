"""Tests of :mod:`cbsim.studies.report`: run, sweep and capacity reports as self-contained HTML and as
Markdown with PNGs beside it, input detection and errors, the command, and a real browser.

The inputs are tiny: a 30-request run, a 2-point sweep with one seed (one spawned worker) and a
capacity plan over two GPUs with 10 s windows; each is made once per module. The browser test
renders the HTML reports in headless Chromium (Debian's ``chromium`` package). When Chromium is
missing it is installed with apt-get only if ``CI`` or ``CBSIM_INSTALL_CHROMIUM`` is set and the
tests run as root; otherwise, or when that fails, the test is skipped with the reason.
``CBSIM_SKIP_BROWSER=1`` skips it outright. With Chromium present it takes a few seconds.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from cbsim.common.errors import CbsimError
from cbsim.run.results import Results
from cbsim.run.simulate import simulate
from cbsim.studies.capacity import plan
from cbsim.studies.report import (
    Report,
    Table,
    build_report,
    capacity_report,
    detect,
    format_value,
    render_html,
    render_markdown,
    report_command,
    run_report,
    write_report,
)
from cbsim.studies.sweep.runner import run_sweep
from tests.conftest import find_chromium, run_chromium, small_scenario

plt.switch_backend("Agg")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SLO = {"ttft_p99_s": 2.0, "tpot_p99_s": 0.1}
DATA_URI = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")
MD_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


# --------------------------------------------------------------------------- inputs


@pytest.fixture(scope="module")
def spec_results() -> Results:
    return simulate(
        small_scenario(
            workload__num_requests=30,
            speculative={"enabled": True, "proposer": {"kind": "eagle"}},
            output={"timeseries_window_s": 0.5},
        )
    )


@pytest.fixture(scope="module")
def run_dir(spec_results: Results, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return spec_results.write(tmp_path_factory.mktemp("report") / "run")


@pytest.fixture(scope="module")
def plain_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = simulate(
        small_scenario(workload__num_requests=30, output={"timeseries_window_s": 0.5})
    )
    return results.write(tmp_path_factory.mktemp("report") / "plain")


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "sweep"
    frame = run_sweep(
        {
            "name": "tiny",
            "base": small_scenario(workload__num_requests=20),
            "grid": {"workload.arrival.rate": [2.0, 8.0]},
            "seeds": [1],
        },
        out=out,
        workers=1,
    )
    assert len(frame) == 2
    return out


@pytest.fixture(scope="module")
def capacity_plan() -> dict[str, Any]:
    return plan(
        small_scenario(),
        SLO,
        vary={"cluster.gpu": ["h100-sxm", "a100-80gb"]},
        target_rps=20.0,
        window_s=10.0,
        min_requests=20,
        tolerance=0.2,
    )


@pytest.fixture(scope="module")
def plan_file(capacity_plan: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "plan.json"
    path.write_text(json.dumps(capacity_plan, indent=2), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def run_html(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report(run_dir, tmp_path_factory.mktemp("html") / "run.html")


@pytest.fixture(scope="module")
def sweep_html(sweep_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report(sweep_dir, tmp_path_factory.mktemp("html") / "sweep.html")


@pytest.fixture(scope="module")
def plan_html(plan_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report(plan_file, tmp_path_factory.mktemp("html") / "plan.html")


@pytest.fixture
def infeasible_file(tmp_path: Path) -> Path:
    path = tmp_path / "infeasible.json"
    path.write_text(json.dumps(infeasible_plan()), encoding="utf-8")
    return path


def infeasible_plan() -> dict[str, Any]:
    """A hand-written plan with the contract keys, nothing varied, whose SLO cannot be met."""
    return {
        "feasible": False,
        "reason": "SLO cannot be met even at 0.01562 req/s (ttft_p99_s = 0.02 > 1e-06)",
        "max_rate_rps": None,
        "slo": {"ttft_p99_s": 1e-6},
        "slo_directions": {"ttft_p99_s": "≤"},
        "seeds": [3],
        "window_s": 10.0,
        "tolerance": 0.2,
        "simulations": 2,
        "target_rps": None,
        "scenario": "small",
        "gpu": "h100-sxm",
        "tp": 1,
        "replicas": None,
        "gpus": None,
        "cost_per_hour": None,
        "cost_per_million_output_tokens": None,
        "evaluations": [
            {
                "rate_rps": 1.0,
                "passed": False,
                "reason": "ttft_p99_s = 0.02 > 1e-06",
                "simulations": 1,
                "metrics": {"ttft_p99_s": 0.02},
            },
            {
                "rate_rps": 0.5,
                "passed": False,
                "reason": "ttft_p99_s = 0.019 > 1e-06",
                "simulations": 1,
                "metrics": {"ttft_p99_s": 0.019},
            },
        ],
    }


# --------------------------------------------------------------------------- helpers


class _Refs(HTMLParser):
    """Every URL-bearing attribute of a document, and the tags seen."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "srcset", "action", "poster", "data") and value:
                self.refs.append((tag, name, value))


def assert_self_contained(text: str) -> list[bytes]:
    """Check an HTML report references nothing outside itself; return its embedded PNGs."""
    parser = _Refs()
    parser.feed(text)
    assert "script" not in parser.tags and "link" not in parser.tags and "iframe" not in parser.tags
    for tag, name, value in parser.refs:
        assert value.startswith(("data:image/png;base64,", "#")), (tag, name, value[:80])
    without_data = DATA_URI.sub("data:", text)
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", without_data, re.IGNORECASE)
    assert "@import" not in without_data
    assert not re.search(r"url\((?!['\"]?data:)", without_data)
    images = [base64.b64decode(m) for m in DATA_URI.findall(text)]
    for png in images:
        assert png.startswith(PNG_SIGNATURE)
        assert len(png) > 5_000
    img_tags = re.findall(r"<img\b[^>]*>", text)
    assert len(img_tags) == len(images)
    assert all('src="data:image/png;base64,' in tag for tag in img_tags)
    return images


def section_titles(text: str) -> list[str]:
    return re.findall(r"<h2>([^<]*)</h2>", text)


# --------------------------------------------------------------------------- detection and errors


def test_detect_each_kind(
    run_dir: Path, sweep_dir: Path, plan_file: Path, capacity_plan: dict[str, Any], tmp_path: Path
) -> None:
    assert detect(run_dir) == ("run", run_dir)
    assert detect(run_dir / "summary.json") == ("run", run_dir)
    assert detect(sweep_dir) == ("sweep", sweep_dir)
    assert detect(sweep_dir / "sweep.parquet") == ("sweep", sweep_dir)
    assert detect(plan_file) == ("capacity", plan_file)
    holder = tmp_path / "plan-dir"
    holder.mkdir()
    (holder / "capacity.json").write_text(json.dumps(capacity_plan), encoding="utf-8")
    assert detect(holder) == ("capacity", holder / "capacity.json")


def test_missing_path_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-run"
    with pytest.raises(CbsimError, match=re.escape(f"{missing}: no such file or directory")):
        build_report(missing)


def test_unrecognised_inputs_are_errors_naming_them(tmp_path: Path) -> None:
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    with pytest.raises(CbsimError, match=re.escape(f"{empty}: not a cbsim result")):
        detect(empty)
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}', encoding="utf-8")
    with pytest.raises(CbsimError, match=re.escape(f"{other}: not a cbsim result")):
        detect(other)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(CbsimError, match=re.escape(f"{broken}: not valid JSON")):
        detect(broken)
    wrong = tmp_path / "wrong-plan"
    wrong.mkdir()
    (wrong / "plan.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(CbsimError, match=re.escape(f"{wrong / 'plan.json'}: not a capacity plan")):
        detect(wrong)
    text = tmp_path / "notes.txt"
    text.write_text("hi", encoding="utf-8")
    with pytest.raises(CbsimError, match=re.escape(f"{text}: not a cbsim result")):
        write_report(text, tmp_path / "r.html")


def test_out_must_be_a_file(run_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(CbsimError, match="is a directory"):
        write_report(run_dir, tmp_path)


def test_format_value() -> None:
    assert format_value(None) == "—"
    assert format_value(float("nan")) == "—"
    assert format_value(40) == "40"
    assert format_value(96.0) == "96"
    assert format_value(3.592073) == "3.592"
    assert format_value(0.0141111) == "0.01411"
    assert format_value(12345.6) == "12346"
    assert format_value("vllm") == "vllm"
    assert format_value(True) == "yes"


# --------------------------------------------------------------------------- run


def test_run_html_is_self_contained_with_summary_and_figures(
    run_html: Path, spec_results: Results
) -> None:
    text = run_html.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    images = assert_self_contained(text)
    # throughput/queue, latency CDFs, batch/KV/k, acceptance (the run speculated)
    assert len(images) == 4
    summary = spec_results.summary
    for key in ("throughput_rps", "output_tokens_per_s", "ttft_p99_s", "tpot_p50_s", "e2e_p90_s"):
        assert format_value(summary[key]) in text, key
    assert format_value(summary["acceptance_rate"]) in text
    assert f'<td class="num">{summary["completed"]}</td>' in text
    assert "<title>cbsim run: small</title>" in text
    titles = section_titles(text)
    for title in ("Overview", "Summary", "Latency", "Speculative decoding", "Scenario"):
        assert title in titles
    assert "max_batch_size: 1024" in text  # the scenario YAML (vLLM's default on an H100)
    assert sorted(p.name for p in run_html.parent.iterdir()) == ["run.html"]  # no temporaries


def test_run_without_speculation_has_no_acceptance_figure(
    plain_run_dir: Path, tmp_path: Path
) -> None:
    text = write_report(plain_run_dir, tmp_path / "plain.html").read_text(encoding="utf-8")
    assert len(assert_self_contained(text)) == 3
    assert "Speculative decoding" not in section_titles(text)


def test_run_report_from_memory_matches_the_directory(
    spec_results: Results, run_dir: Path, run_html: Path
) -> None:
    from_memory = run_report(spec_results, source=str(run_dir))
    from_disk = run_html.read_text(encoding="utf-8")
    assert [s.title for s in from_memory.sections] == section_titles(from_disk)
    assert [f'id="fig-{i.name}"' in from_disk for i in from_memory.images()] == [True] * 4


def test_run_whose_scenario_no_longer_loads(run_dir: Path, tmp_path: Path) -> None:
    # e.g. a trace it replayed has moved: the report is drawn from the tables alone
    copy = tmp_path / "moved"
    shutil.copytree(run_dir, copy)
    scenario = yaml.safe_load((copy / "scenario.yaml").read_text(encoding="utf-8"))
    scenario["workload"]["no_longer_a_field"] = 1
    (copy / "scenario.yaml").write_text(yaml.safe_dump(scenario), encoding="utf-8")
    (copy / "iterations.parquet").unlink()
    report = build_report(copy)
    assert [i.name for i in report.images()] == [
        "throughput-and-queue",
        "latency-cdfs",
        "batch-kv-k",
        "acceptance",
    ]
    assert "no_longer_a_field: 1" in render_html(report)


def test_markdown_writes_pngs_beside_it(
    run_dir: Path, spec_results: Results, tmp_path: Path
) -> None:
    out = write_report(run_dir, tmp_path / "md" / "run.md", title="Nightly run")
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Nightly run\n")
    assert "data:image" not in text
    references = MD_IMAGE.findall(text)
    assert len(references) == 4
    for ref in references:
        assert "/" not in ref and ref.startswith("run-") and ref.endswith(".png")
        png = (out.parent / ref).read_bytes()
        assert png.startswith(PNG_SIGNATURE) and len(png) > 5_000
    assert sorted(p.name for p in out.parent.glob("*.png")) == sorted(references)
    assert format_value(spec_results.summary["throughput_rps"]) in text
    assert "```yaml" in text
    assert "| metric | value | unit |" in text


def test_format_option_overrides_the_suffix(infeasible_file: Path, tmp_path: Path) -> None:
    out = write_report(infeasible_file, tmp_path / "report.txt", fmt="md")
    assert out.read_text(encoding="utf-8").startswith("# cbsim capacity plan: small")
    assert len(list(tmp_path.glob("report-*.png"))) == 2
    with pytest.raises(CbsimError, match="unknown format"):
        write_report(infeasible_file, tmp_path / "r.html", fmt="pdf")


def test_rewriting_a_report_replaces_it(infeasible_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "plan.html"
    write_report(infeasible_file, out, title="first")
    write_report(infeasible_file, out, title="second")
    assert "<title>second</title>" in out.read_text(encoding="utf-8")
    assert sorted(p.name for p in out.parent.iterdir()) == ["plan.html"]


# --------------------------------------------------------------------------- sweep


def test_sweep_report(sweep_dir: Path, sweep_html: Path, tmp_path: Path) -> None:
    import pandas as pd

    frame = pd.read_parquet(sweep_dir / "sweep.parquet")
    text = sweep_html.read_text(encoding="utf-8")
    images = assert_self_contained(text)
    # TTFT, TPOT, E2E and output throughput against load, and the overlaid CDFs of both points
    assert len(images) == 5
    assert "<th>workload.<wbr>arrival.<wbr>rate</th>" in text  # may wrap after its dots
    for row in frame.itertuples(index=False):
        assert str(row.key) in text
    for value in frame["ttft_p99_s"]:
        assert format_value(value) in text
    assert "Latency vs load" in section_titles(text)
    assert "Latency distributions" in section_titles(text)

    md = write_report(sweep_dir, tmp_path / "sweep.md")
    refs = MD_IMAGE.findall(md.read_text(encoding="utf-8"))
    assert len(refs) == 5 and all((tmp_path / r).is_file() for r in refs)


def test_sweep_without_a_load_column_says_so(sweep_dir: Path) -> None:
    import pandas as pd

    from cbsim.studies.report import sweep_report

    frame = pd.read_parquet(sweep_dir / "sweep.parquet").drop(columns=["workload.arrival.rate"])
    report = sweep_report(frame)
    text = render_html(report)
    assert "No rate-like override column" in text
    assert not report.images()


# --------------------------------------------------------------------------- capacity


def test_capacity_report(plan_html: Path, capacity_plan: dict[str, Any]) -> None:
    text = plan_html.read_text(encoding="utf-8")
    images = assert_self_contained(text)
    # a frontier and a latency-vs-load figure per SLO metric, and tokens per GPU vs per user
    assert len(images) == 5
    titles = section_titles(text)
    for title in (
        "Recommendation",
        "Alternatives",
        "Cost vs SLO frontier",
        "Latency vs load",
        "Tokens per GPU vs tokens per user",
    ):
        assert title in titles
    best = capacity_plan["best"]
    assert best is not None
    assert f"${capacity_plan['cost_per_million_output_tokens']:.4f}" in text
    assert f"${capacity_plan['cost_per_hour']:.2f}" in text
    assert "gpu=" + best["overrides"]["cluster.gpu"] in text
    assert f"{format_value(capacity_plan['max_rate_rps'])} req/s" in text
    # metrics named for people, not by their keys (issue 37)
    assert "TTFT p99 ≤ 2 s, TPOT p99 ≤ 100 ms" in text and "TTFT p99 achieved (ms)" in text
    assert "ttft_p99_s" not in text and "tpot_p99_s" not in text
    assert '<tr class="highlight">' in text
    for alt in capacity_plan["alternatives"]:
        assert format_value(alt["max_rate_rps"]) in text
    assert "Fleet verification" in titles


def test_capacity_report_tokens_per_gpu_and_per_user(capacity_plan: dict[str, Any]) -> None:
    """Per alternative, at the operating point of its cost (the verified fleet): output tokens/s
    per GPU (served: the run's output tokens/s ÷ GPUs, issue 27) and per user (1 / mean TPOT);
    alternatives are named key=value."""
    report = capacity_report(capacity_plan)
    (table,) = [
        b for s in report.sections if s.title == "Alternatives" for b in s.blocks
        if isinstance(b, Table)
    ]  # fmt: skip
    gpu_col = table.columns.index("output tok/s per GPU")
    user_col = table.columns.index("output tok/s per user")
    for alt, row in zip(capacity_plan["alternatives"], table.rows, strict=True):
        (fleet,) = [r for r in alt["fleet"] if r["passed"]]
        metrics = fleet["metrics"]
        gpus = fleet["replicas"] * alt["tp"]
        per_gpu = metrics["output_tokens_per_s"] / gpus
        assert row[gpu_col] == format_value(per_gpu)
        assert row[user_col] == format_value(1.0 / metrics["tpot_mean_s"])
    (figure,) = [i for i in report.images() if i.name == "tokens-per-gpu-vs-per-user"]
    assert "1 / mean TPOT" in (figure.caption or "")
    text = render_html(report)
    assert "gpu=h100-sxm" in text and "gpu=a100-80gb" in text


def test_capacity_report_from_a_directory_and_as_markdown(
    capacity_plan: dict[str, Any], tmp_path: Path
) -> None:
    holder = tmp_path / "plan-dir"
    holder.mkdir()
    (holder / "plan.json").write_text(json.dumps(capacity_plan), encoding="utf-8")
    out = write_report(holder, tmp_path / "out" / "capacity.md")
    text = out.read_text(encoding="utf-8")
    assert "## Recommendation" in text and "> - **replicas:**" in text
    refs = MD_IMAGE.findall(text)
    assert len(refs) == 5 and all((out.parent / r).is_file() for r in refs)


def test_infeasible_hand_written_plan(infeasible_file: Path, tmp_path: Path) -> None:
    text = write_report(infeasible_file, tmp_path / "plan.html").read_text(encoding="utf-8")
    assert "none: the SLO cannot be met" in text
    assert "SLO cannot be met even at 0.01562 req/s" in text
    assert 'class="facts bad"' in text
    # the frontier says there is nothing to draw; latency vs load shows the failed rates
    assert len(assert_self_contained(text)) == 2


def test_capacity_report_rejects_other_objects() -> None:
    with pytest.raises(CbsimError, match="not a capacity plan"):
        capacity_report({"slo": {}})


# --------------------------------------------------------------------------- command


def test_command(infeasible_file: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cli.html"
    result = runner.invoke(
        report_command, [str(infeasible_file), "--out", str(out), "--title", "T"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out)
    assert "<title>T</title>" in out.read_text(encoding="utf-8")

    result = runner.invoke(report_command, [str(tmp_path / "nope"), "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.startswith("error: ")
    assert str(tmp_path / "nope") in result.output
    assert "Traceback" not in result.output

    result = runner.invoke(report_command, [str(infeasible_file)])
    assert result.exit_code == 2  # --out is required

    result = runner.invoke(
        report_command, [str(infeasible_file), "--out", str(tmp_path / "p.md"), "--format", "md"]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.md").read_text(encoding="utf-8").startswith("# cbsim capacity plan")


# --------------------------------------------------------------------------- a real browser

BROWSER_TIMEOUT_S = 25
INSTALL_TIMEOUT_S = 600
# Injected into a test copy of a report: external requests are forbidden (and counted), and
# once the page has loaded the title says whether every image decoded.
PROBE = """<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:;
 style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<script>
var blocked = 0;
document.addEventListener('securitypolicyviolation', function () { blocked += 1; });
window.addEventListener('load', function () {
  var images = Array.prototype.slice.call(document.images);
  var ok = images.length > 0 && images.every(function (i) {
    return i.complete && i.naturalWidth > 0 && i.naturalHeight > 0;
  });
  var external = performance.getEntriesByType('resource').filter(function (r) {
    return !r.name.startsWith('data:');
  }).length;
  document.title = (ok ? 'IMAGES-OK' : 'IMAGES-BROKEN') + ' images=' + images.length +
    ' external=' + (external + blocked) + ' widths=' +
    images.map(function (i) { return i.naturalWidth; }).join(',');
});
</script>"""


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium executable, installed from Debian packages when allowed; else skip."""
    if os.environ.get("CBSIM_SKIP_BROWSER"):
        pytest.skip("CBSIM_SKIP_BROWSER is set")
    found = find_chromium()
    if found:
        return found
    if not (os.environ.get("CI") or os.environ.get("CBSIM_INSTALL_CHROMIUM")):
        pytest.skip(
            "chromium is not installed; set CI or CBSIM_INSTALL_CHROMIUM=1 (as root) to let the "
            "test install it with apt-get, or install the Debian package chromium"
        )
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium is not installed and apt-get cannot be run as root here")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    started = time.monotonic()
    try:
        for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
            left = INSTALL_TIMEOUT_S - (time.monotonic() - started)
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=max(left, 1), check=False
            )
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                pytest.skip(f"installing chromium failed: {' '.join(command)}: {' | '.join(tail)}")
    except (OSError, subprocess.TimeoutExpired) as err:
        pytest.skip(f"installing chromium failed: {err}")
    found = find_chromium()
    if not found:
        pytest.skip("apt-get installed chromium but no chromium executable was found")
    return found


def _browser(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_chromium(chromium, profile, *args, timeout_s=BROWSER_TIMEOUT_S)


@pytest.mark.slow  # .ci/run's second stage runs it
def test_reports_render_in_a_real_browser(
    chromium: str, run_html: Path, sweep_html: Path, plan_html: Path, tmp_path: Path
) -> None:
    started = time.monotonic()
    pages = {"run": run_html, "sweep": sweep_html, "capacity": plan_html}
    for name, page in pages.items():
        count = len(DATA_URI.findall(page.read_text(encoding="utf-8")))
        assert count > 0
        probe = tmp_path / f"{name}-probe.html"
        probe.write_text(
            page.read_text(encoding="utf-8").replace("<head>", "<head>\n" + PROBE, 1),
            encoding="utf-8",
        )
        done = _browser(
            chromium,
            tmp_path / f"profile-{name}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            probe.as_uri(),
        )
        assert done.returncode == 0, done.stderr[-2000:]
        title = re.search(r"<title>([^<]*)</title>", done.stdout)
        assert title is not None, done.stdout[:500]
        assert title.group(1).startswith(f"IMAGES-OK images={count} external=0 "), title.group(1)
        widths = [int(w) for w in title.group(1).rsplit("widths=", 1)[1].split(",")]
        assert all(w >= 500 for w in widths)

    # a screenshot of the unmodified run report: the page really painted text and figures
    shot = tmp_path / "run.png"
    done = _browser(
        chromium,
        tmp_path / "profile-shot",
        f"--screenshot={shot}",
        "--window-size=1280,2000",
        "--hide-scrollbars",
        pages["run"].as_uri(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.is_file() and shot.stat().st_size > 50_000
    pixels = np.asarray(matplotlib.image.imread(shot))
    assert pixels.shape[:2] == (2000, 1280)
    rgb = np.round(pixels[..., :3] * 255).astype(np.int32)
    colours = np.unique(rgb[..., 0] * 65536 + rgb[..., 1] * 256 + rgb[..., 2])
    assert len(colours) > 200  # antialiased text and plot colours, not a blank page
    assert float(rgb.std()) > 10.0
    # the figures' blue lines (matplotlib C0, #1f77b4) are on screen
    blue = (np.abs(rgb - np.array([31, 119, 180])).sum(axis=-1) < 40).sum()
    assert blue > 500
    assert time.monotonic() - started < 30.0


def test_report_type_is_public() -> None:
    # the document model can be built by hand and rendered (e.g. from a notebook)
    from cbsim.studies.report import Facts, Paragraph, Section, Table

    report = Report(title="hand made", kind="run", source="notebook")
    report.sections.append(Section("Numbers", [Facts([("a", "1")]), Paragraph("x | y")]))
    report.sections.append(Section("Table", [Table(["k", "v"], [["a", "1.5"]])]))
    text, files = render_markdown(report)
    assert files == {}
    assert "| k | v |" in text and "| a | 1.5 |" in text
    assert '<td class="num">1.5</td>' in render_html(report)
