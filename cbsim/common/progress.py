"""Progress of a long command, in every output mode.

``cbsim capacity``, ``cbsim plan``, ``cbsim sweep`` and long ``cbsim run`` s take minutes. A user
should see where they are whether stderr is a terminal or not:

* **not a terminal** (a pipe, a file, CI): one plain line per step on stderr, each naming the
  command (``capacity: rate 12.5 req/s (step 3 of ~8), seed 1``; ``plan: layout 4 of 12
  (h100-sxm TP2): ...``), a step that repeats the last line's text printing nothing;
* **a terminal**: one spinner line, rewritten at each step, with the pass's count and an estimate
  of the time it has left (``3 of 12 done · about 1m20s left``).

A step is a text (:meth:`StepReporter.__call__`); before it, :meth:`StepReporter.count` may say
how many of the current pass's units (searches, layouts, sweep points, simulations of one
search) are done out of how many. The estimate is the pass's elapsed time per unit done times
the units left; a step without a count shows none (a fleet check's length is not known ahead).
A new pass begins when the total changes or the count goes back. The clock is injectable, so the
estimate is tested without waiting.

:func:`step_reporter` gives the reporter a command line uses (None with ``--quiet``), and stops
its spinner when the command ends; :func:`tell` is how a search reports a step with its count
to whatever progress callable it was given (plain callables ignore the count). A ``cbsim run``
or a sweep on a terminal keeps its progress bar; elsewhere a sweep prints a line per point
(:meth:`StepReporter.counted`) and a run a line per tenth of its requests once it has taken
ten seconds (:class:`CountLines`: a short run prints none).
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

__all__ = [
    "CountLines",
    "StepReporter",
    "format_eta",
    "step_reporter",
    "stream_is_terminal",
    "tell",
    "time_left",
]

Clock = Callable[[], float]


def stream_is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an interactive terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def format_eta(seconds: float) -> str:
    """``12s``, ``4m05s``, ``1h02m``: a time left, to the second below an hour."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def time_left(seconds: float) -> str:
    """``about 1m20s left``, or ``under 1s left``."""
    if seconds < 0.5:
        return "under 1s left"
    return f"about {format_eta(seconds)} left"


class StepReporter:
    """Reports the steps of ``command`` on ``stream`` (default stderr): plain lines, or a spinner
    on a terminal (``interactive``: default, whether ``stream`` is one)."""

    def __init__(
        self,
        command: str,
        *,
        stream: IO[str] | None = None,
        interactive: bool | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.command = command
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = (
            stream_is_terminal(self.stream) if interactive is None else bool(interactive)
        )
        self.clock = clock
        self._last = ""
        self._pending: tuple[int, int, str] | None = None
        self._pass: tuple[int, float, int, int] | None = None  # total, start, first, last done
        self._status: Any = None

    # ----------------------------------------------------------------- counting

    def count(self, done: int, total: int, unit: str = "") -> None:
        """``done`` of ``total`` units of the current pass (``unit``: what they are, plural) are
        finished: the next step's count."""
        if self._pass is None or self._pass[0] != total or done < self._pass[3]:
            self._pass = (total, self.clock(), done, done)  # a new pass: its pace from here
        else:
            self._pass = (*self._pass[:3], done)
        self._pending = (done, total, unit)

    def eta_s(self, done: int, total: int) -> float | None:
        """Seconds the current pass has left, by its pace so far (None before a unit is done)."""
        if self._pass is None:
            return None
        _, start, first, _ = self._pass
        finished = done - first
        if finished <= 0 or total <= done:
            return None
        return (self.clock() - start) / finished * (total - done)

    def _count_text(self) -> str:
        if self._pending is None:
            return ""
        done, total, unit = self._pending
        self._pending = None
        parts = [f"{done} of {total} {unit} done"] if unit else []  # steps name their count
        eta = self.eta_s(done, total)
        if eta is not None:
            parts.append(time_left(eta))
        return " · ".join(parts)

    # ----------------------------------------------------------------- showing

    def __call__(self, text: str) -> None:
        """A step: shown at once (a plain line only when its text is new)."""
        counted = self._count_text()
        self._emit(text, f"{text} · {counted}" if counted else text)

    def counted(self, done: int, total: int, unit: str) -> None:
        """A step that is a count alone: ``3 of 8 points done · about 1m05s left``."""
        self.count(done, total, unit)
        text = self._count_text()
        self._emit(text.split(" · ")[0], text)

    def _emit(self, key: str, text: str) -> None:
        """Show ``text``: on the spinner, or as a line when ``key`` differs from the last one."""
        if self.interactive:
            self._show(f"{self.command}: {text}")
            return
        if key == self._last:
            return
        self._last = key
        try:
            self.stream.write(f"{self.command}: {text}\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed pipe: progress is not worth failing for
            pass

    def _show(self, text: str) -> None:
        if self._status is None:
            from rich.console import Console

            console = Console(file=self.stream, stderr=self.stream is sys.stderr)
            self._status = console.status(text)
            self._status.start()
        else:
            self._status.update(text)

    def stop(self) -> None:
        """End the spinner (a plain reporter has nothing to end)."""
        if self._status is not None:
            self._status.stop()
            self._status = None


@contextlib.contextmanager
def step_reporter(
    command: str, *, quiet: bool = False, stream: IO[str] | None = None
) -> Iterator[StepReporter | None]:
    """The reporter of a command line (None when ``quiet``), its spinner stopped on the way out,
    whatever ends the command."""
    if quiet:
        yield None
        return
    reporter = StepReporter(command, stream=stream)
    try:
        yield reporter
    finally:
        reporter.stop()


def tell(
    progress: Callable[[str], None] | None,
    text: str,
    done: int | None = None,
    total: int | None = None,
    unit: str = "",
) -> None:
    """Report the step ``text`` to ``progress`` (nothing when None), with its count of ``unit``:
    a :class:`StepReporter` shows it with the time left; a plain callable (a worker's queue, a
    Python caller's function) gets ``text (done/total unit done)`` when ``unit`` is named, else
    the text alone."""
    if progress is None:
        return
    if done is None or total is None:
        progress(text)
    elif isinstance(progress, StepReporter):
        progress.count(done, total, unit)
        progress(text)
    else:
        progress(f"{text} ({done}/{total} {unit} done)" if unit else text)


class CountLines:
    """Plain lines of a count that grows (a run's requests): one each time another
    ``1 / steps`` of the total is done, once the command has run ``after_s`` seconds (a short
    command prints none), with the time left at the pace so far."""

    def __init__(
        self,
        command: str,
        unit: str,
        *,
        stream: IO[str] | None = None,
        clock: Clock = time.monotonic,
        after_s: float = 10.0,
        steps: int = 10,
    ) -> None:
        self.command, self.unit = command, unit
        self.stream = stream if stream is not None else sys.stderr
        self.clock, self.after_s, self.steps = clock, after_s, steps
        self.started = clock()
        self._shown = 0  # the last tenth shown

    def __call__(self, done: int, total: int, simulated_s: float | None = None) -> None:
        if total <= 0:
            return
        step = min(self.steps, done * self.steps // total)
        elapsed = self.clock() - self.started
        if step <= self._shown or elapsed < self.after_s:
            return
        self._shown = step
        text = f"{done:,} of {total:,} {self.unit} done ({done / total:.0%})"
        if simulated_s is not None:
            text += f", {simulated_s:,.0f} s simulated"
        if 0 < done < total:
            text += f" · {time_left(elapsed / done * (total - done))}"
        try:
            self.stream.write(f"{self.command}: {text}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass
