"""Rendering a :class:`~cbsim.studies.report.document.Report` as one self-contained HTML page (figures as
base64 PNG ``data:`` URIs, CSS inline).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence

from cbsim.studies.report.document import Block, Code, Facts, Image, Paragraph, Report, Table
from cbsim.studies.report.formatting import _NUMERIC, _kind_name

_CSS = """
:root { color-scheme: light; }
body { margin: 0; background: #f6f7f9; color: #1d2430;
  font: 15px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 32px 48px; background: #fff;
  box-shadow: 0 0 12px rgba(0,0,0,.06); }
h1 { font-size: 26px; margin: 8px 0 4px; }
h2 { font-size: 20px; margin: 36px 0 12px; padding-bottom: 4px; border-bottom: 1px solid #e3e6ea; }
.meta { color: #5f6b7a; font-size: 13px; margin: 0 0 16px; }
nav { font-size: 13px; margin: 8px 0 16px; }
nav a { color: #2457a6; text-decoration: none; margin-right: 14px; white-space: nowrap; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 18px; margin: 8px 0; }
dl.facts dt { color: #5f6b7a; }
dl.facts dd { margin: 0; font-weight: 500; min-width: 0; overflow-wrap: anywhere; }
dl.good, dl.bad { padding: 14px 18px; border-radius: 6px; }
dl.good { background: #eef8f0; border-left: 5px solid #2e8b47; }
dl.bad { background: #fdf0ef; border-left: 5px solid #c0392b; }
.table-wrap { overflow: auto; max-width: 100%; margin: 8px 0 16px; }
.table-wrap.wide { max-height: 75vh; border: 1px solid #e3e6ea; }
.table-wrap.wide th { position: sticky; top: 0; z-index: 1; }
.table-wrap.wide table { font-size: 12.5px; }
.table-wrap.wide th, .table-wrap.wide td { padding: 4px 6px; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e3e6ea; text-align: left; vertical-align: top; }
th { background: #f0f2f5; font-weight: 600; }
td.num { text-align: right; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fafbfc; }
tr.highlight, tbody tr.highlight:nth-child(even) { background: #e6f4ea; font-weight: 600; }
caption { caption-side: bottom; text-align: left; color: #5f6b7a; font-size: 12px; padding-top: 6px; }
pre { background: #f3f4f6; padding: 12px 14px; border-radius: 6px; overflow-x: auto;
  font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
figure { margin: 12px 0 24px; }
figure img { max-width: 100%; height: auto; display: block; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr)); gap: 0 24px; }
figcaption { color: #5f6b7a; font-size: 12.5px; margin-top: 4px; }
p.note { color: #5f6b7a; font-style: italic; }
footer { margin-top: 40px; color: #8a94a3; font-size: 12px; }
""".strip()

#: Figures at most this wide (pixels) are laid out two to a row in HTML.
GRID_MAX_WIDTH_PX = 900
#: Tables with more columns than this scroll in a box of their own (at most 75% of the window
#: high, the header row kept in view), so that their horizontal scroll bar is on screen.
WIDE_TABLE_COLUMNS = 8
_BREAK_AFTER = re.compile(r"([._/])(?=\w)")


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _header(text: str) -> str:
    """A column name, escaped, that may wrap after its dots, underscores and slashes
    (``workload.<wbr>arrival.<wbr>rate``): a wide table then narrows its columns before it
    overflows."""
    return _BREAK_AFTER.sub(r"\1<wbr>", _esc(text))


def _html_block(block: Block) -> str:
    if isinstance(block, Paragraph):
        return f"<p{' class=note' if block.note else ''}>{_esc(block.text)}</p>"
    if isinstance(block, Facts):
        items = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in block.items)
        return f'<dl class="facts {block.tone}">{items}</dl>'
    if isinstance(block, Table):
        head = "".join(f"<th>{_header(c)}</th>" for c in block.columns)
        body = []
        for i, row in enumerate(block.rows):
            cells = "".join(
                f'<td class="num">{_esc(c)}</td>' if _NUMERIC.match(c) else f"<td>{_esc(c)}</td>"
                for c in row
            )
            attr = ' class="highlight"' if i in block.highlight else ""
            body.append(f"<tr{attr}>{cells}</tr>")
        caption = f"<caption>{_esc(block.caption)}</caption>" if block.caption else ""
        wrap = "table-wrap wide" if len(block.columns) > WIDE_TABLE_COLUMNS else "table-wrap"
        return (
            f'<div class="{wrap}"><table>{caption}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )
    if isinstance(block, Code):
        language = f' class="language-{_esc(block.language)}"' if block.language else ""
        return f"<pre><code{language}>{_esc(block.text)}</code></pre>"
    width, height = block.size
    data = base64.b64encode(block.png).decode("ascii")
    caption = f"<figcaption>{_esc(block.caption)}</figcaption>" if block.caption else ""
    return (
        f'<figure id="fig-{_esc(block.name)}"><img src="data:image/png;base64,{data}" '
        f'alt="{_esc(block.alt)}" width="{width}" height="{height}">{caption}</figure>'
    )


def _html_blocks(blocks: Sequence[Block]) -> str:
    """Blocks in order; runs of two or more narrow figures share rows of a two-column grid."""
    parts: list[str] = []
    run: list[Image] = []

    def flush() -> None:
        if len(run) > 1:
            figures = "".join(_html_block(image) for image in run)
            parts.append(f'<div class="grid">{figures}</div>')
        elif run:
            parts.append(_html_block(run[0]))
        run.clear()

    for block in blocks:
        if isinstance(block, Image) and block.size[0] <= GRID_MAX_WIDTH_PX:
            run.append(block)
            continue
        flush()
        parts.append(_html_block(block))
    flush()
    return "\n".join(parts)


def render_html(report: Report) -> str:
    """The report as one self-contained HTML document (figures as base64 PNG data URIs)."""
    nav = "".join(f'<a href="#{s.anchor}">{_esc(s.title)}</a>' for s in report.sections)
    sections = []
    for section in report.sections:
        blocks = _html_blocks(section.blocks)
        sections.append(
            f'<section id="{section.anchor}">\n<h2>{_esc(section.title)}</h2>\n{blocks}\n</section>'
        )
    from cbsim import __version__

    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta name="generator" content="cbsim {_esc(__version__)}">',
            f"<title>{_esc(report.title)}</title>",
            f"<style>\n{_CSS}\n</style>",
            "</head>",
            "<body>",
            "<main>",
            f"<h1>{_esc(report.title)}</h1>",
            f'<p class="meta">{_esc(_kind_name(report.kind))} · {_esc(report.source)}</p>',
            f"<nav>{nav}</nav>",
            *sections,
            f"<footer>Generated by cbsim {_esc(__version__)} on {_esc(report.generated)}.</footer>",
            "</main>",
            "</body>",
            "</html>",
            "",
        ]
    )
