"""The document model of a report: a :class:`Report` of titled :class:`Section` s, each a list of
blocks (:class:`Paragraph`, :class:`Facts`, :class:`Table`, :class:`Code`, :class:`Image`) that the
renderers turn into HTML or Markdown.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

ReportKind = Literal["run", "sweep", "capacity", "plan"]
Format = Literal["html", "md"]
FORMATS: tuple[str, ...] = ("html", "md")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass
class Paragraph:
    """Plain text (escaped when rendered); ``note`` renders it muted."""

    text: str
    note: bool = False


@dataclass
class Facts:
    """Label/value pairs; ``tone`` ``"good"`` or ``"bad"`` renders them as a highlighted callout."""

    items: list[tuple[str, str]]
    tone: Literal["plain", "good", "bad"] = "plain"


@dataclass
class Table:
    """A table of already formatted cells; ``highlight`` marks row indices (e.g. the best)."""

    columns: list[str]
    rows: list[list[str]]
    caption: str | None = None
    highlight: set[int] = field(default_factory=set)


@dataclass
class Code:
    """A preformatted block (a scenario's YAML)."""

    text: str
    language: str = ""


@dataclass
class Image:
    """A PNG figure: ``name`` is a file-name-safe slug, unique within the report."""

    name: str
    png: bytes
    alt: str
    caption: str | None = None

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels, read from the PNG header."""
        if len(self.png) < 24 or not self.png.startswith(_PNG_SIGNATURE):
            raise ValueError(f"figure {self.name!r} is not a PNG")
        width, height = struct.unpack(">II", self.png[16:24])
        return int(width), int(height)


Block = Paragraph | Facts | Table | Code | Image


@dataclass
class Section:
    """A titled part of a report."""

    title: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return _slug(self.title)


@dataclass
class Report:
    """A report before rendering: a title, what it was made from, and its sections."""

    title: str
    kind: ReportKind
    source: str
    sections: list[Section] = field(default_factory=list)
    generated: str = field(
        default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    )

    def images(self) -> list[Image]:
        """Every figure, in order."""
        return [b for s in self.sections for b in s.blocks if isinstance(b, Image)]


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug or "section"
