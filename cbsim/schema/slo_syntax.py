"""One way to write an SLO on every command: durations with units, vLLM's and cbsim's key spellings.

The SLO used to be written four ways: ``ttft_s`` in a scenario, ``--slo ttft_p99_s=2`` on
``cbsim capacity``, ``--ttft 2`` (seconds) on ``cbsim plan`` and ``--goodput ttft:2000``
(milliseconds, as vLLM writes it) on ``cbsim bench``. Every command now reads the same items
(:func:`parse_slo`), and every duration may carry its unit (:func:`parse_duration`):

* a **target** is ``KEY=VALUE`` or vLLM's ``KEY:VALUE``; several are separated by commas or
  spaces, and an option holding them may be repeated;
* a **value** is a number with a unit, ``300ms``, ``0.3s``, ``300us``, or a bare number whose unit
  comes from the key: ``_ms`` keys (``p99_ttft_ms``, vLLM's result keys) are milliseconds, ``_s``
  keys and bare keys after ``=`` are seconds (cbsim's unit), and bare numbers after ``:`` are
  milliseconds (vLLM's ``--goodput ttft:300``). So ``ttft=300ms``, ``ttft=0.3``, ``ttft_s=0.3``,
  ``ttft_ms=300`` and ``ttft:300`` are one target;
* a **key** names a latency and, optionally, a statistic of it, in either order and spelling:
  ``ttft_p99``, ``p99_ttft``, ``ttft_p99_s``, ``p99_ttft_ms`` (vLLM's result key), ``mean_tpot``,
  ``median_e2el`` (``median`` is ``p50``; vLLM's ``e2el`` and AI Configurator's
  ``request_latency`` are cbsim's ``e2e``). The latencies are the summary's: ``ttft``, ``tpot``,
  ``e2e``, ``itl``, ``itl_chunk``, ``queue`` and the server-side ``server_ttft``, ``server_tpot``,
  ``server_e2e``; other summary metrics (``slo_attainment``, ``goodput_ratio``, ...) take plain
  numbers.

A key with a statistic (``ttft_p99``) is a target on that summary figure: what ``cbsim capacity``
and ``cbsim plan`` search against, and what ``cbsim run`` and ``cbsim bench`` report as met or not.
A bare latency (``ttft``, ``tpot``, ``e2e``) is a per-request target: the scenario's
``slo.ttft_s`` (goodput and ``slo_attainment`` count the requests within it; vLLM's ``--goodput``
is the same thing), which capacity and plan check at their percentile (p99 by default), as they
always checked a scenario's ``slo``. Every target is stored in seconds under the summary's key
(``ttft_p99_s``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cbsim.common.errors import CbsimError, close_names

__all__ = [
    "AT_LEAST",
    "LATENCIES",
    "PER_REQUEST",
    "SloTarget",
    "check_known",
    "format_seconds",
    "known_targets",
    "parse_duration",
    "parse_slo",
    "per_request_targets",
    "statistic_targets",
    "verdicts",
]

LATENCIES = (
    "ttft", "tpot", "e2e", "itl", "itl_chunk", "queue", "server_ttft", "server_tpot", "server_e2e",
)  # fmt: skip
"""The latencies of a run's summary (``<latency>_<statistic>_s``)."""

STATISTICS = ("p50", "p90", "p99", "mean")
"""The statistics a run's summary gives of each latency."""

PER_REQUEST = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}
"""The latencies a request can be held to, and their field of the scenario's ``slo``."""

_LATENCY_ALIASES = {"e2el": "e2e", "request_latency": "e2e", "latency": "e2e"}
_STATISTIC_ALIASES = {"median": "p50", "avg": "mean", "average": "mean"}
_UNITS = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
_NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?inf(?:inity)?|nan"
_DURATION = re.compile(rf"^\s*({_NUMBER})\s*([a-zµ]*)\s*$", re.IGNORECASE)
_STATISTIC = re.compile(r"^(p\d+(?:\.\d+)?|mean|median|avg|average)$")


@dataclass(frozen=True)
class SloTarget:
    """One parsed target: ``metric`` the summary key (``ttft_p99_s``, ``slo_attainment``), or for
    a per-request target the latency (``ttft``); ``value`` in seconds for a latency; ``text`` as
    the user wrote it."""

    metric: str
    value: float
    text: str
    per_request: bool = False
    bare_seconds: bool = False  # a latency written as a bare number read as seconds

    @property
    def is_latency(self) -> bool:
        """Whether the value is a duration (seconds)."""
        return self.per_request or self.metric.endswith("_s")

    def describe(self) -> str:
        """``ttft_p99 ≤ 300 ms`` (``slo_attainment ≥ 0.99``)."""
        if not self.is_latency:
            return f"{self.metric} = {self.value:g}"
        name = self.metric if self.per_request else self.metric.removesuffix("_s")
        return f"{name} ≤ {format_seconds(self.value)}"


def format_seconds(value: float) -> str:
    """``300 ms`` below a second, ``2.5 s`` from one up."""
    if value < 1.0:
        return f"{value * 1000:.4g} ms"
    return f"{value:.4g} s"


def parse_duration(text: str, *, default_unit: str = "s", field: str) -> float:
    """``300ms``, ``0.3s``, ``300us`` or a bare number in ``default_unit`` (``s`` or ``ms``), as
    seconds; finite and at least 0, else a :class:`CbsimError` on ``field``."""
    match = _DURATION.match(text)
    if match is None:
        raise CbsimError(
            f"{text.strip()!r} is not a duration: write a number with its unit, e.g. 300ms or "
            "0.3s (a bare number is "
            + ("milliseconds" if default_unit == "ms" else "seconds")
            + ")",
            field=field,
        )
    number, unit = match.group(1), match.group(2).lower()
    scale = _UNITS.get(unit or default_unit)
    if scale is None:
        raise CbsimError(
            f"{text.strip()!r}: unknown unit {match.group(2)!r}; use ms, s or us", field=field
        )
    value = float(number) * scale
    if not math.isfinite(value) or value < 0:
        raise CbsimError(f"{text.strip()!r}: must be a finite duration >= 0", field=field)
    return value


def _items(texts: str | Iterable[str]) -> list[str]:
    """The targets of one or several option values: split at commas and spaces."""
    values = [texts] if isinstance(texts, str) else list(texts)
    return [item for value in values for item in re.split(r"[,\s]+", value.strip()) if item]


def _split_key(key: str) -> tuple[str, str | None, str | None]:
    """``p99_ttft_ms`` -> ``("ttft", "p99", "ms")``: the latency (or the key as it is, when it
    names none), the statistic (None: a per-request target) and the key's unit suffix."""
    name = key.strip().lower().replace("-", "_")
    unit = None
    for suffix in ("_ms", "_s", "_us"):
        if name.endswith(suffix):
            name, unit = name[: -len(suffix)], suffix[1:]
            break
    parts = name.split("_")
    orders = [(parts[0], parts[1:]), (parts[-1], parts[:-1])]  # vLLM's order, then cbsim's
    for stat, rest in orders if len(parts) > 1 else []:
        if _STATISTIC.match(stat):
            latency = "_".join(rest)
            latency = _LATENCY_ALIASES.get(latency, latency)
            if latency in LATENCIES:
                return latency, _STATISTIC_ALIASES.get(stat, stat), unit
    latency = _LATENCY_ALIASES.get(name, name)
    if latency in LATENCIES:
        return latency, None, unit
    return key.strip(), None, None  # another summary metric, as given


def _suggestion(key: str, raw: str, field: str) -> CbsimError:
    """A key that mentions a latency but no statistic cbsim reads: the key meant, with the value
    in seconds when it converts."""
    words = key.lower().replace("-", "_").split("_")
    latency = next((_LATENCY_ALIASES.get(w, w) for w in words if w in (*LATENCIES, "e2el")), None)
    digits = next((w for w in words if w.isdigit()), "99")
    guess = f"{latency}_p{digits}_s"
    unit = "ms" if key.lower().endswith("_ms") else "s"
    try:
        value = f"={parse_duration(raw, default_unit=unit, field=field):g}"
    except CbsimError:
        value = ""
    return CbsimError(
        f"{key!r} is not a latency target cbsim reads; did you mean {guess}{value}? (a latency "
        f"and a statistic: {', '.join(LATENCIES[:4])} with {', '.join(STATISTICS)}, e.g. "
        "ttft_p99=300ms)",
        field=field,
    )


def _parse_item(item: str, field: str) -> SloTarget:
    sep = "=" if "=" in item else ":" if ":" in item else None
    if sep is None:
        raise CbsimError(
            f"{item!r} is not METRIC=THRESHOLD (e.g. ttft_p99=300ms, or vLLM's ttft:300 in ms)",
            field=field,
        )
    key, _, raw = item.partition(sep)
    if not key.strip() or not raw.strip():
        raise CbsimError(f"{item!r} is not METRIC=THRESHOLD (e.g. ttft_p99=300ms)", field=field)
    latency, statistic, unit = _split_key(key)
    if latency not in LATENCIES:
        words = key.lower().replace("-", "_").split("_")
        if any(w in (*LATENCIES, "e2el") for w in words) and len(words) > 1:
            raise _suggestion(key, raw, field)
        return SloTarget(latency, _plain_number(raw, item, field), item)
    default = unit or ("ms" if sep == ":" else "s")
    value = parse_duration(raw, default_unit=default, field=field)
    bare = default == "s" and _DURATION.match(raw) is not None and not _has_unit(raw)
    if statistic is None:
        return SloTarget(latency, value, item, per_request=True, bare_seconds=bare)
    return SloTarget(f"{latency}_{statistic}_s", value, item, bare_seconds=bare)


def _has_unit(raw: str) -> bool:
    match = _DURATION.match(raw)
    return match is not None and bool(match.group(2))


def _plain_number(raw: str, item: str, field: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise CbsimError(f"{item!r}: {raw.strip()!r} is not a number", field=field) from None
    if not math.isfinite(value):
        raise CbsimError(f"{item!r}: must be finite", field=field)
    return value


def parse_slo(texts: str | Iterable[str], *, field: str = "--slo") -> list[SloTarget]:
    """Every target of one or several option values (see the module docstring), in order; a
    later target of the same key replaces an earlier one."""
    targets: dict[str, SloTarget] = {}
    for item in _items(texts):
        target = _parse_item(item, field)
        targets.pop(target.metric, None)
        targets[target.metric] = target
    return list(targets.values())


def statistic_targets(
    targets: Sequence[SloTarget], percentile: str | None = None
) -> dict[str, float]:
    """The targets as ``{summary metric: threshold}``; a per-request target counted at
    ``percentile`` (``p99``: ``ttft`` -> ``ttft_p99_s``), or left out when it is None."""
    found: dict[str, float] = {}
    for target in targets:
        if not target.per_request:
            found[target.metric] = target.value
        elif percentile is not None:
            found[f"{target.metric}_{percentile}_s"] = target.value
    return found


def per_request_targets(targets: Sequence[SloTarget], *, field: str = "--slo") -> dict[str, float]:
    """The per-request targets as the scenario's ``slo`` fields (``{"ttft_s": 0.3}``); a
    per-request ``itl`` or ``queue`` has no such field and is refused."""
    found: dict[str, float] = {}
    for target in targets:
        if not target.per_request:
            continue
        if target.metric not in PER_REQUEST:
            raise CbsimError(
                f"{target.text!r}: a request is held to a ttft, tpot or e2e target; give "
                f"{target.metric} a statistic, e.g. {target.metric}_p99=50ms",
                field=field,
            )
        found[PER_REQUEST[target.metric]] = target.value
    return found


def known_targets() -> list[str]:
    """The latency targets every run's summary has (``ttft_p50_s``, ...)."""
    return [f"{latency}_{stat}_s" for latency in LATENCIES for stat in STATISTICS]


def check_known(targets: Sequence[SloTarget], extra: Iterable[str] = (), *, field: str) -> None:
    """Refuse, before a run, a statistic target the summary will not have (``ttft_p95``)."""
    known = [*known_targets(), *extra]
    for target in targets:
        if target.per_request or target.metric in known:
            continue
        close = close_names(target.metric, known, limit=2)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise CbsimError(
            f"{target.text!r}: a run's summary has no {target.metric!r}{hint} (statistics: "
            f"{', '.join(STATISTICS)})",
            field=field,
        )


AT_LEAST = frozenset({"slo_attainment", "goodput_ratio"})
"""Metrics a target is a floor of (every other: a ceiling)."""


def verdicts(targets: Sequence[SloTarget], summary: dict[str, object]) -> list[str]:
    """One line per statistic target: met or not, with the run's figure (per-request targets
    are the scenario's ``slo``, which the run's summary judges already)."""
    lines = []
    for target in targets:
        if target.per_request:
            continue
        figure = summary.get(target.metric)
        if not isinstance(figure, int | float) or isinstance(figure, bool) or math.isnan(figure):
            lines.append(f"SLO {target.describe()}: no figure (no request finished)")
            continue
        if target.metric in AT_LEAST:
            met = figure >= target.value
            text = (
                f"{target.metric} ≥ {target.value:g}: {'met' if met else 'NOT met'} ({figure:.4g})"
            )
        else:
            met = figure <= target.value
            shown = format_seconds(float(figure)) if target.is_latency else f"{figure:.4g}"
            text = f"{target.describe()}: {'met' if met else 'NOT met'} ({shown})"
        lines.append(f"SLO {text}")
    return lines
