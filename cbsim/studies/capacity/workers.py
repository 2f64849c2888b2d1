"""Independent searches of one plan, run on local processes at once (``--workers``).

The alternatives of ``cbsim capacity --vary``, the layouts of ``cbsim plan`` and the candidates of
a disaggregated plan are searches that do not depend on each other. A :class:`JobPool` runs lists
of such :class:`Job` objects (one list per stage of a plan; :func:`run_jobs` for a single list):
with one worker in this process, one after the other (the serial path); with ``N`` workers in this
process and ``N - 1`` worker processes started as ``cbsim sweep``'s local backend starts its
own (:mod:`cbsim.common.worker_start`: on Linux forked from a server that imported cbsim once,
spawned elsewhere): each ends as soon as this process dies
(:func:`cbsim.common.parent_watch.exit_with_parent`). A search draws its randomness only from its
scenario's seed and shares nothing with the others (each builds its own cost models), so a job
gives the same result, bit for bit, in any process, and the results come back in the jobs' order.

A worker's start costs time (the server's import of cbsim, or each spawned worker's; loading
numba's cached kernels), so no job waits for one: a job goes to a worker only when that worker
has started and is idle; meanwhile this process, already warm, takes the next job itself
(checking for idle workers at every simulation).
A small plan is then about as fast as the serial path, and the workers, started once per plan,
serve all of its stages.

Errors are the serial path's: the outcome stops at the first job, in the jobs' order, that raised,
and holds its exception (a user error pickles with its message, source and field; an internal one
carries the worker's traceback); no job after it starts, and workers still computing one are
ended. Ctrl-C ends the workers at once (they ignore SIGINT themselves, so that one key press does
not print a traceback per worker) and reaches the caller as usual. The workers' progress lines
come back through a queue and go to ``progress`` with how many jobs of the stage are done (a
:class:`~cbsim.common.progress.StepReporter` shows the count and the time the stage has left).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import queue
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar, cast

from cbsim.common.errors import CbsimError
from cbsim.common.progress import tell
from cbsim.common.worker_start import (
    WorkerStart,
    parent_start,
    sigint_ignored,
    start_worker,
    worker_context,
)

__all__ = ["Job", "JobPool", "Outcome", "cli_workers", "run_jobs", "worker_count"]

T = TypeVar("T")
Progress = Callable[[str], None]

POLL_S = 0.1
"""How often this process looks for finished jobs and idle workers while it waits."""
STOP_WAIT_S = 5.0
"""How long an ended worker is waited for."""
STOP_ROUNDS = 3
"""How many times the pool's table is read for workers it started while others were ended."""


@dataclass(frozen=True)
class Job(Generic[T]):
    """``fn(*args, progress=..., **kwargs)``: a module-level function (workers import it by name)
    and picklable arguments; ``progress`` is where the search reports each simulation."""

    fn: Callable[..., T]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self, progress: Progress | None) -> T:
        return self.fn(*self.args, progress=progress, **self.kwargs)


@dataclass
class Outcome(Generic[T]):
    """What a list of jobs gave: ``values[i]`` is job ``i``'s result; ``error`` the exception of
    the first job that raised (``error_index``), after which no value counts (None)."""

    values: list[T | None]
    error: BaseException | None = None
    error_index: int | None = None

    def results(self) -> list[T]:
        """Every job's result, or the first job's error raised."""
        if self.error is not None:
            raise self.error
        return cast("list[T]", list(self.values))

    def failed(self, index: int, error: BaseException) -> None:
        if self.error_index is None or index < self.error_index:
            self.error, self.error_index = error, index

    def limit(self) -> int:
        """Jobs before this index still count."""
        return len(self.values) if self.error_index is None else self.error_index


def worker_count(workers: int | JobPool | None) -> int:
    """The processes to use: ``workers`` (or a pool's), or this process alone (None: what a
    Python caller gets unless it asks; the commands ask for one per CPU, see
    :func:`cli_workers`); a user error below 1."""
    if isinstance(workers, JobPool):
        return workers.workers
    if workers is None:
        return 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise CbsimError(f"must be a whole number >= 1, got {workers!r}", field="--workers")
    return workers


def cli_workers(workers: int | None) -> int:
    """A command's ``--workers``: as given, or one process per CPU."""
    return worker_count(workers if workers is not None else (os.cpu_count() or 1))


def run_jobs(
    jobs: Sequence[Job[T]], workers: int | JobPool | None, progress: Progress | None = None
) -> Outcome[T]:
    """Run ``jobs`` with ``workers`` processes (None or 1: here, one after the other;
    a :class:`JobPool`: its processes and progress, kept for the caller's next jobs) and return
    their :class:`Outcome`; see the module docstring."""
    if isinstance(workers, JobPool):
        return workers.run(jobs)
    with JobPool(workers, progress) as pool:
        return pool.run(jobs)


# --------------------------------------------------------------------------- in a worker


_lines: Any = None  # the queue this worker reports to


def _start_worker(start: WorkerStart, lines: Any) -> None:
    """A worker's initializer: the parent's environment, end with the parent, leave Ctrl-C to it
    (SIGINT is ignored from the start, see :func:`sigint_ignored`), say it is ready."""
    global _lines
    start_worker(start)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _lines = lines
    import cbsim.run.simulate  # noqa: F401  (the searches' modules, loaded before it says so)

    lines.put(("ready", os.getpid()))


def _say(text: str) -> None:
    _lines.put(("say", text))


def _run_job(job: Job[T]) -> T:
    return job(_say)


def _nothing() -> None:
    """Submitted once per worker to start it (a process pool starts workers as jobs come)."""


# --------------------------------------------------------------------------- the pool


class JobPool:
    """``workers`` processes (this one included) for the jobs of every stage of one plan, as a
    context manager: the others start when a stage first has two jobs or more and are kept for
    the next stages; leaving the ``with`` block ends them (after an exception, Ctrl-C included,
    while they may still compute). With one worker every job runs here."""

    local_jobs = True
    """Whether this process takes jobs itself while no worker is idle (tests turn it off to send
    every job of a stage of several to the workers)."""

    def __init__(self, workers: int | None, progress: Progress | None = None) -> None:
        self.workers = worker_count(workers)
        self.progress = progress
        self._pool: cf.ProcessPoolExecutor | None = None
        self._lines: Any = None
        self._ready: set[int] = set()
        self._text = ""

    def __enter__(self) -> JobPool:
        return self

    def __exit__(self, *_: object) -> None:
        self._stop()

    def run(self, jobs: Sequence[Job[T]]) -> Outcome[T]:
        """Run ``jobs`` (see the module docstring)."""
        if self.workers <= 1 or len(jobs) <= 1:
            outcome: Outcome[T] = Outcome([None] * len(jobs))
            for i, job in enumerate(jobs):
                try:
                    outcome.values[i] = job(self._serial_progress(i, len(jobs)))
                except Exception as err:
                    outcome.failed(i, err)
                    break
            return outcome
        return _Stage(self, jobs).run()

    def executor(self, jobs: int | None = None) -> cf.ProcessPoolExecutor:
        """The worker processes, started on the first call: as many as ``jobs`` (the first
        stage's) can use beside this process, at most ``workers - 1``."""
        if self._pool is None:
            processes = self.workers - 1 if jobs is None else min(self.workers, jobs) - 1
            context = worker_context()
            self._lines = context.Queue()
            self._ready = set()
            self._pool = cf.ProcessPoolExecutor(
                max_workers=max(processes, 1),
                mp_context=context,
                initializer=_start_worker,  # as cbsim sweep's: they end when this process dies
                initargs=(parent_start(), self._lines),
            )
            with sigint_ignored():  # inherited: Ctrl-C while a worker imports cbsim is ours
                for _ in range(max(processes, 1)):
                    self._pool.submit(_nothing)
        return self._pool

    def idle_workers(self, busy: int) -> int:
        """Workers started and not computing one of the ``busy`` jobs."""
        while self._lines is not None:
            try:
                kind, value = self._lines.get_nowait()
            except (queue.Empty, OSError, ValueError):
                break
            if kind == "ready":
                self._ready.add(value)
            else:
                self._text = value
        return len(self._ready) - busy

    def show(self, done: int, total: int) -> None:
        if self.progress is not None and self._text:
            tell(self.progress, self._text, done, total, "searches")

    def say(self, text: str) -> None:
        self._text = text

    def _serial_progress(self, index: int, count: int) -> Progress | None:
        """Where job ``index`` of ``count`` run here reports: the caller's progress itself for a
        job alone (its steps are the count), else each step with the searches done."""
        progress = self.progress
        if progress is None or count <= 1:
            return progress
        return lambda text: tell(progress, text, index, count, "searches")

    def _stop(self) -> None:
        """End the workers: idle ones hold nothing, busy ones compute what nobody needs."""
        pool, lines = self._pool, self._lines
        self._pool = self._lines = None
        if pool is None:
            return
        ended: list[BaseProcess] = []
        # the pool forgets its table on shutdown, but its manager thread, which may still be
        # starting a worker, keeps adding to it
        table = pool._processes if pool._processes is not None else {}
        pool.shutdown(wait=False, cancel_futures=True)
        for _ in range(STOP_ROUNDS):
            processes = [p for p in list(table.values()) if p not in ended]
            if not processes and ended:
                break
            _end_processes(processes)
            ended += processes
        # once its workers are gone the manager thread ends; any worker it started meanwhile
        # is ended after it
        manager = getattr(pool, "_executor_manager_thread", None)
        if manager is not None:
            manager.join(STOP_WAIT_S)
        _end_processes([p for p in list(table.values()) if p.is_alive()])
        lines.close()


def _end_processes(processes: Sequence[BaseProcess]) -> None:
    """Terminate worker processes and wait for them (killed if SIGTERM is not handled in time,
    as by a worker still starting)."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(STOP_WAIT_S)
        if process.is_alive():
            process.kill()
            process.join(STOP_WAIT_S)


class _Stage(Generic[T]):
    """One list of jobs on a pool: given to idle workers, the rest run here."""

    def __init__(self, pool: JobPool, jobs: Sequence[Job[T]]) -> None:
        self.pool = pool
        self.jobs = jobs
        self.outcome: Outcome[T] = Outcome([None] * len(jobs))
        self.running: dict[cf.Future[T], int] = {}
        self.next = 0
        self.done = 0

    def run(self) -> Outcome[T]:
        outcome = self.outcome
        self.pool.say("")  # the last stage's step is not this one's
        self.pool.executor(len(self.jobs))
        while True:
            self.feed()
            limit = outcome.limit()
            if self.pool.local_jobs and self.next < limit:
                i, self.next = self.next, self.next + 1
                try:
                    outcome.values[i] = self.jobs[i](self.here)
                except Exception as err:
                    outcome.failed(i, err)
                self.done += 1
            elif self.running and (self.next < limit or min(self.running.values()) < limit):
                cf.wait(self.running, timeout=POLL_S, return_when=cf.FIRST_COMPLETED)
            elif self.next < limit:
                time.sleep(POLL_S)  # no worker has started yet
            else:
                break
        for i in range(outcome.limit(), len(outcome.values)):
            outcome.values[i] = None
        if self.running:  # workers computing jobs after the first error
            self.pool._stop()
        return outcome

    def here(self, text: str) -> None:
        """The progress of a job running here: shown, and a moment to feed idle workers."""
        self.pool.say(text)
        self.feed()

    def feed(self) -> None:
        """Collect finished jobs, give idle workers the next ones, show the progress."""
        outcome = self.outcome
        for future in [f for f in self.running if f.done()]:
            i = self.running.pop(future)
            self.done += 1
            try:
                outcome.values[i] = future.result()
            except Exception as err:  # the job's error, or its worker died
                outcome.failed(i, err)
        idle = self.pool.idle_workers(len(self.running))
        while idle > 0 and self.next < outcome.limit():
            i, self.next = self.next, self.next + 1
            try:
                self.running[self.pool.executor().submit(_run_job, self.jobs[i])] = i
            except Exception as err:  # the pool broke (a worker was killed)
                outcome.failed(i, err)
            idle -= 1
        self.pool.show(self.done, len(self.jobs))
