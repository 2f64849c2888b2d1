"""The run and capacity HTML reports as a user sees them: rendered by headless Chromium.

Each report is loaded twice, through Chromium's plain command-line modes (no Python browser
driver): ``--dump-dom`` of a copy with a small probe script (it records, once the page has loaded,
the page height and every image's decoded size) and ``--screenshot`` of the unmodified report at
the page's full height. The DOM must hold what a reader looks for (title, the summary or
recommendation, the tables, every figure as a PNG that decodes, no ``NaN`` / ``undefined`` text);
the screenshot must be a real rendering (the asked size, many colours, figures' ink) painted down
to the footer, not cut short.

The inputs are tiny (a 30-request run with speculation, a capacity plan over two GPUs with 10 s
windows), made once per module. Chromium is looked up as ``chromium``, ``chromium-browser`` or
``google-chrome``; without one (as on CI) every test here is skipped. ``CBSIM_SKIP_BROWSER=1``
skips them outright. With ``CBSIM_SCREENSHOT_DIR`` set the screenshots are also copied there.
About 10 s with Chromium present.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest

from cbsim.run.simulate import simulate
from cbsim.studies.capacity import plan
from cbsim.studies.report import write_report
from cbsim.studies.sweep.runner import run_sweep
from tests.conftest import find_chromium, run_chromium, small_scenario

plt.switch_backend("Agg")

BROWSER_TIMEOUT_S = 30
WIDTH_PX = 1280
#: Tallest screenshot taken; a report taller than this is checked down to here only.
MAX_HEIGHT_PX = 12_000
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DATA_URI = re.compile(r"^data:image/png;base64,([A-Za-z0-9+/=]+)$")
BAD_TEXT = re.compile(r"\b(NaN|nan|undefined|None|Infinity|\[object Object\])\b")
# Injected into a copy of a report: once loaded, a <pre id="cbsim-probe"> holds JSON with the
# page's height and each image's state (the report itself has no script).
PROBE = """<script>
window.addEventListener('load', function () {
  var images = Array.prototype.slice.call(document.images).map(function (i) {
    return {complete: i.complete, width: i.naturalWidth, height: i.naturalHeight,
            shown: i.getBoundingClientRect().width};
  });
  var out = document.createElement('pre');
  out.id = 'cbsim-probe';
  var wraps = Array.prototype.slice.call(document.querySelectorAll('.table-wrap')).map(
    function (w) { return {scroll: w.scrollWidth, client: w.clientWidth}; });
  var first = document.querySelector('section');
  out.textContent = JSON.stringify({
    height: document.documentElement.scrollHeight,
    width: document.documentElement.scrollWidth,
    images: images,
    tables: wraps,
    first: first ? {id: first.id, top: first.getBoundingClientRect().top} : null
  });
  document.body.appendChild(out);
});
</script>"""


# --------------------------------------------------------------------------- browser


@pytest.fixture(scope="module")
def chromium() -> str:
    if os.environ.get("CBSIM_SKIP_BROWSER"):
        pytest.skip("CBSIM_SKIP_BROWSER is set")
    found = find_chromium()
    if not found:
        pytest.skip("no chromium, chromium-browser or google-chrome on PATH")
    return found


def _browser(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium once with a fresh profile, failing the test if it hangs."""
    done = run_chromium(chromium, profile, "--hide-scrollbars", *args, timeout_s=BROWSER_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


# --------------------------------------------------------------------------- inputs


@pytest.fixture(scope="module")
def run_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = simulate(
        small_scenario(
            workload__num_requests=30,
            speculative={"enabled": True, "proposer": {"kind": "eagle"}},
            output={"timeseries_window_s": 0.5},
        )
    )
    out = tmp_path_factory.mktemp("browser")
    return write_report(results.write(out / "run"), out / "run-report.html")


@pytest.fixture(scope="module")
def capacity_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    result = plan(
        small_scenario(),
        {"ttft_p99_s": 2.0, "tpot_p99_s": 0.1},
        vary={"cluster.gpu": ["h100-sxm", "a100-80gb"]},
        target_rps=20.0,
        window_s=10.0,
        min_requests=20,
        tolerance=0.2,
    )
    out = tmp_path_factory.mktemp("browser")
    path = out / "plan.json"
    path.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return write_report(path, out / "capacity-report.html")


@pytest.fixture(scope="module")
def sweep_html(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep of three overrides (eight points of 20 requests): a wide table of points."""
    out = tmp_path_factory.mktemp("browser")
    run_sweep(
        {
            "name": "wide",
            "base": small_scenario(workload__num_requests=20, slo={"ttft_s": 0.5, "tpot_s": 0.05}),
            "grid": {
                "workload.arrival.rate": [2.0, 8.0],
                "scheduler.max_batch_size": [8, 64],
                "scheduler.max_batched_tokens": [2048, 8192],
            },
        },
        out=out / "sweep",
        workers=1,
    )
    return write_report(out / "sweep", out / "sweep-report.html")


# --------------------------------------------------------------------------- the rendered DOM


class _Dom(HTMLParser):
    """The parts of a rendered DOM the checks need."""

    def __init__(self) -> None:
        super().__init__()
        self.title = ""
        self.h1: list[str] = []
        self.h2: list[str] = []
        self.images: list[dict[str, str]] = []
        self.tables: list[list[list[str]]] = []  # table → rows → cells
        self.row_classes: list[list[str]] = []
        self.dl_classes: list[str] = []
        self.text: list[str] = []  # visible text outside <pre>, <script> and <style>
        self.probe = ""
        self._stack: list[str] = []
        self._cell: list[str] | None = None
        self._probe = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {k: v or "" for k, v in attrs}
        self._stack.append(tag)
        if tag == "img":
            self.images.append(attr)
            self._stack.pop()  # void element
        elif tag == "table":
            self.tables.append([])
            self.row_classes.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
            self.row_classes[-1].append(attr.get("class", ""))
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "dl":
            self.dl_classes.append(attr.get("class", ""))
        elif tag == "pre" and attr.get("id") == "cbsim-probe":
            self._probe = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.tables:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "pre":
            self._probe = False
        if tag in self._stack:
            while self._stack and self._stack.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if self._probe:
            self.probe += data
            return
        top = self._stack[-1] if self._stack else ""
        if top == "title":
            self.title += data
        elif top == "h1":
            self.h1.append(data.strip())
        elif top == "h2":
            self.h2.append(data.strip())
        if self._cell is not None:
            self._cell.append(data)
        if not {"pre", "script", "style", "title"} & set(self._stack):
            self.text.append(data)


def _rendered(chromium: str, page: Path, tmp_path: Path) -> tuple[_Dom, dict[str, Any]]:
    """The DOM Chromium built for ``page`` (a copy with the probe) and the probe's findings."""
    probe = tmp_path / f"{page.stem}-probe.html"
    probe.write_text(
        page.read_text(encoding="utf-8").replace("<head>", "<head>\n" + PROBE, 1), encoding="utf-8"
    )
    done = _browser(
        chromium,
        tmp_path / f"profile-dom-{page.stem}",
        f"--window-size={WIDTH_PX},2400",
        "--virtual-time-budget=5000",
        "--dump-dom",
        probe.as_uri(),
    )
    dom = _Dom()
    dom.feed(done.stdout)
    assert dom.probe, f"the probe did not run; DOM starts {done.stdout[:300]!r}"
    return dom, json.loads(dom.probe)


def _check_images(dom: _Dom, found: dict[str, Any], least: int) -> None:
    """Every <img> is an embedded PNG that decodes, and the browser decoded and showed it."""
    assert len(dom.images) >= least, [i.get("alt") for i in dom.images]
    assert len(found["images"]) == len(dom.images)
    for attr, seen in zip(dom.images, found["images"], strict=True):
        assert attr.get("alt"), "every figure has alt text"
        match = DATA_URI.match(attr.get("src", ""))
        assert match, attr.get("src", "")[:80]
        png = base64.b64decode(match.group(1), validate=True)
        assert png.startswith(PNG_SIGNATURE)
        pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
        height, width = pixels.shape[:2]
        assert width >= 400 and height >= 200, (attr.get("alt"), pixels.shape)
        assert float(pixels[..., :3].std()) > 0.02, f"{attr.get('alt')}: a blank figure"
        # the browser decoded the same image and laid it out at a readable size
        assert seen["complete"] and (seen["width"], seen["height"]) == (width, height), seen
        assert seen["shown"] >= 300, seen


def _check_text(dom: _Dom) -> None:
    text = " ".join(" ".join(dom.text).split())
    bad = BAD_TEXT.search(text)
    assert bad is None, text[max(bad.start() - 80, 0) : bad.end() + 80] if bad else ""
    for table in dom.tables:
        for row in table:
            for cell in row:
                assert not BAD_TEXT.search(cell), row


def _table_with(dom: _Dom, header: str) -> tuple[list[list[str]], list[str]]:
    for table, classes in zip(dom.tables, dom.row_classes, strict=True):
        if table and header in table[0]:
            return table, classes
    raise AssertionError(f"no table with a {header!r} column: {[t[0] for t in dom.tables if t]}")


def test_run_report_dom(chromium: str, run_html: Path, tmp_path: Path) -> None:
    dom, found = _rendered(chromium, run_html, tmp_path)
    assert dom.title.startswith("cbsim run: small"), dom.title
    assert dom.h1 and dom.h1[0].startswith("cbsim run: small")
    for section in ("Overview", "Summary", "Throughput and queue", "Latency", "Scenario"):
        assert section in dom.h2, dom.h2
    assert "Speculative decoding" in dom.h2  # the run speculates
    summary, _ = _table_with(dom, "metric")
    metrics = {row[0]: row[1:] for row in summary[1:]}
    assert metrics["requests"][0] == "30"
    assert metrics["completed"][0] == "30"
    assert float(metrics["throughput"][0]) > 0
    latency, _ = _table_with(dom, "p99")
    assert [row[0] for row in latency[1:]][:3] == ["TTFT", "TPOT", "E2E latency"]
    assert all(float(cell) > 0 for row in latency[1:4] for cell in row[1:])
    # throughput and queue, the latency CDFs, batch / KV / draft length, acceptance
    _check_images(dom, found, least=4)
    _check_text(dom)
    assert found["width"] <= WIDTH_PX, "the page scrolls sideways"


def test_capacity_report_dom(chromium: str, capacity_html: Path, tmp_path: Path) -> None:
    dom, found = _rendered(chromium, capacity_html, tmp_path)
    assert dom.title.startswith("cbsim capacity plan: small"), dom.title
    for section in ("Recommendation", "Search", "Alternatives", "Fleet verification"):
        assert section in dom.h2, dom.h2
    assert "facts good" in dom.dl_classes  # the green recommendation box
    text = " ".join(dom.text)
    assert "recommendation" in text and "cost per hour" in text and "$" in text
    alternatives, classes = _table_with(dom, "gpu")  # the key named for people
    assert sorted(row[0] for row in alternatives[1:]) == ["a100-80gb", "h100-sxm"]
    assert classes.count("highlight") == 1  # the cheapest alternative is marked
    cheapest = alternatives[classes.index("highlight")]
    assert any(cell.startswith("$") for cell in cheapest)
    fleet, _ = _table_with(dom, "result")
    assert "pass" in [row[fleet[0].index("result")] for row in fleet[1:]]
    _check_images(dom, found, least=3)
    _check_text(dom)


#: What a reader sees before scrolling: a laptop's window below the browser's own bars.
FIRST_SCREEN_PX = 700


@pytest.mark.parametrize("which", ["run", "sweep"])
def test_the_verdict_is_on_the_first_screen(
    which: str, chromium: str, run_html: Path, sweep_html: Path, tmp_path: Path
) -> None:
    page = {"run": run_html, "sweep": sweep_html}[which]
    dom, found = _rendered(chromium, page, tmp_path)
    assert dom.h2[0] == "Verdict", dom.h2
    assert found["first"]["id"] == "verdict" and found["first"]["top"] < FIRST_SCREEN_PX / 2
    assert "verdict" in " ".join(dom.text)


def test_a_wide_sweep_table_fits_1280_px(chromium: str, sweep_html: Path, tmp_path: Path) -> None:
    """Eight points of three overrides: every table fits the page at 1,280 px (its headers wrap
    after dots and underscores), and the page never scrolls sideways."""
    dom, found = _rendered(chromium, sweep_html, tmp_path)
    points, _ = _table_with(dom, "SLO (p99)")
    assert len(points) == 1 + 8
    assert found["width"] <= WIDTH_PX, "the page scrolls sideways"
    too_wide = [t for t in found["tables"] if t["scroll"] > t["client"]]
    assert not too_wide, too_wide
    _check_text(dom)


# --------------------------------------------------------------------------- screenshots

# The page's two backgrounds: body (#f6f7f9) and the white <main> column.
BACKGROUNDS = np.array([[246, 247, 249], [255, 255, 255]])


def _ink(rgb: np.ndarray) -> np.ndarray:
    """Per pixel: neither background (text, rules, table shading, figures)."""
    distance = np.abs(rgb[:, :, None, :] - BACKGROUNDS[None, None]).sum(axis=-1)
    return distance.min(axis=-1) > 12


@pytest.mark.slow  # 5 to 10 s each; the DOM tests above render the same pages by default
@pytest.mark.parametrize("which", ["run", "capacity"])
def test_screenshot_is_a_full_rendering(
    which: str, chromium: str, run_html: Path, capacity_html: Path, tmp_path: Path
) -> None:
    page = {"run": run_html, "capacity": capacity_html}[which]
    _, found = _rendered(chromium, page, tmp_path)
    height = min(int(found["height"]), MAX_HEIGHT_PX)
    assert height > 1200, found  # a report, not an error line
    shot = tmp_path / f"{which}-report.png"
    _browser(
        chromium,
        tmp_path / f"profile-shot-{which}",
        f"--screenshot={shot}",
        f"--window-size={WIDTH_PX},{height}",
        page.as_uri(),
    )
    assert shot.is_file() and shot.stat().st_size > 50_000
    if os.environ.get("CBSIM_SCREENSHOT_DIR"):
        target = Path(os.environ["CBSIM_SCREENSHOT_DIR"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, target / shot.name)

    pixels = np.asarray(matplotlib.image.imread(shot))
    assert pixels.shape[:2] == (height, WIDTH_PX)
    rgb = np.round(pixels[..., :3] * 255).astype(np.int32)
    colours = np.unique(rgb[..., 0] * 65536 + rgb[..., 1] * 256 + rgb[..., 2])
    assert len(colours) > 300  # antialiased text and plot colours, not a blank page
    assert float(rgb.std()) > 10.0
    # matplotlib's first colour (C0, #1f77b4) draws lines and points in every report's figures
    blue = (np.abs(rgb - np.array([31, 119, 180])).sum(axis=-1) < 40).sum()
    assert blue > 500

    # inside <main> (1180 px wide, centred) only, away from its box shadow
    ink = _ink(rgb[:, 60 : WIDTH_PX - 60])
    rows = np.flatnonzero(ink.any(axis=1))
    # painted from the top to the footer: the last ink (the "Generated by" line) lies within
    # 150 px of the page's bottom, so nothing below the window was left out or unpainted
    assert rows[0] < 150, rows[0]
    if height == int(found["height"]):
        assert rows[-1] > height - 150, (rows[-1], height)
    # and no stretch of the page is empty: every quarter holds text or figures
    for quarter in np.array_split(ink, 4, axis=0):
        assert quarter.mean() > 0.005, [float(q.mean()) for q in np.array_split(ink, 4)]
