"""The goodput policy's k sweep on a real run's inputs, another version against this one, paired.

Not a test; about a minute. A stepped run of the Azure trace's first minutes (Llama-3-8B on one
H100 under ``sarathi``, EAGLE, per-request acceptance, goodput with k_max 8), its speculative
cohort and fused step turned off so that every iteration's choice goes through
:func:`~cbsim.engine.speculative.goodput_kernel.choose_goodput`, gives the sweeps' inputs (the
requests' α, outputs left, contexts and the step's other work). They are then swept by this
checkout's :func:`~cbsim.engine.speculative.goodput_kernel.goodput_sweep` and, with
``--against FILE``, by another version of its module, for instance the code before a change::

    git show REV:cbsim/engine/speculative/goodput_kernel.py > /tmp/old_goodput_kernel.py
    python benchmarks/goodput_sweep_replay.py --against /tmp/old_goodput_kernel.py

Both sweep the same chunks of inputs one after the other, in random order, many times; this
prints the median of the per-chunk ratios (this version ÷ the other) with its quartiles, which a
machine whose speed drifts by a third within minutes leaves far steadier than two best-of-N
figures taken apart, and whether both versions chose alike. Each time includes Python's call of
the kernel, also printed (a kernel of the same arguments that returns at once).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import importlib.util
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest.mock import patch

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_suite import AZURE, SPECULATIVE

import cbsim
import cbsim.engine.scheduler.base as scheduler_base
import cbsim.engine.speculative.decoder as decoder
from cbsim.engine.loop import Simulation
from cbsim.engine.speculative import goodput_kernel

K_MAX = 8
Sweep = tuple[Any, ...]


def scenario(minutes: float) -> dict[str, Any]:
    """The Azure trace's first ``minutes`` under sarathi with the goodput policy, stepped."""
    data: dict[str, Any] = {**copy.deepcopy(AZURE), "scheduler": {"kind": "sarathi"}}
    data["workload"]["duration_s"] = 60.0 * minutes
    data["fast_forward"] = False
    data["speculative"] = copy.deepcopy(SPECULATIVE)
    data["speculative"]["policy"] = {"kind": "goodput", "k_max": K_MAX}
    return data


def captured_inputs(data: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Every goodput choice's inputs in a stepped run of ``data``: α, outputs left, contexts, the
    step's other work (:class:`~cbsim.engine.speculative.goodput_kernel.StepBase` fields) and its
    tokens (the cost tables' size)."""
    captured: list[tuple[Any, ...]] = []
    choose = goodput_kernel.choose_goodput
    init = decoder.SpeculativeDecoding.__init__

    def recording(
        drafter: Any, k_max: int, target: Any, proposer: Any, *args: Any, **kw: Any
    ) -> Any:
        alphas, remaining, contexts, prefill = args[:4]
        base = tuple(goodput_kernel.step_base(target, prefill))
        captured.append(
            (alphas.copy(), remaining.copy(), contexts.copy(), base, prefill.num_tokens)
        )
        return choose(drafter, k_max, target, proposer, *args, **kw)

    def unfused(self: Any, *args: Any, **kw: Any) -> None:
        init(self, *args, **kw)
        self._step = None  # each step's choice through choose_goodput

    with (
        patch.object(decoder, "choose_goodput", recording),
        patch.object(decoder.SpeculativeDecoding, "__init__", unfused),
        patch.object(scheduler_base, "SPEC_MIXED_COHORT_FROM", 1 << 62),
    ):
        cbsim.simulate(cbsim.load_scenario(data))
    return captured


def load_module(path: Path, folder: Path) -> ModuleType:
    """Another version of the goodput kernel module, copied into ``folder`` (numba caches its
    kernels beside it, so a stale cache of an earlier file of that name is never read) and
    loaded under a name of its own."""
    copied = folder / "other_goodput_kernel.py"
    shutil.copyfile(path, copied)
    spec = importlib.util.spec_from_file_location(copied.stem, copied)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # numba's cache finds its functions' module by name
    spec.loader.exec_module(module)
    return module


def costs(data: dict[str, Any], inputs: list[tuple[Any, ...]]) -> list[Sweep]:
    """Each captured input as goodput_sweep's arguments from n to the draft's cost tables, the
    same for every version (the sweep only reads them)."""
    spec = Simulation(cbsim.load_scenario(data)).pools[0].spec
    assert spec is not None
    drafter = goodput_kernel.compiled_proposer(spec.proposer, spec.target)
    assert not isinstance(drafter, str)
    cost = spec.proposer.cost  # type: ignore[attr-defined]
    out = []
    for alphas, remaining, contexts, _, tokens in inputs:
        n = len(alphas)
        out.append(
            (
                n, np.clip(alphas, 0.0, 1.0), remaining.astype(np.int64),
                contexts.astype(np.int64), K_MAX, spec.target.compiled(tokens + n * (K_MAX + 1)),
                drafter.kind, cost.compiled(n, drafter.extra_gemm),
            )
        )  # fmt: skip
    return out


def sweeps(module: ModuleType, shared: list[Sweep], inputs: list[tuple[Any, ...]]) -> list[Sweep]:
    """``module``'s goodput_sweep arguments for each captured input: the ``shared`` ones, then
    the step's other work and the scratch as ``module`` defines them."""
    return [
        (*head, module.StepBase(*base), module.sweep_reals(head[0], K_MAX),
         module.sweep_ints(head[0], K_MAX), np.empty(head[0], dtype=np.int64))
        for head, (_, _, _, base, _) in zip(shared, inputs, strict=True)
    ]  # fmt: skip


def entry_point(kernel: Any, first: Sweep) -> Any:
    """``kernel``'s machine code for ``first``'s argument types, called without dispatch."""
    kernel(*first)
    return kernel.overloads[kernel.signatures[0]].entry_point


def choices(kernel: Any, arguments: list[Sweep]) -> str:
    """A digest of every sweep's chosen k."""
    digest = hashlib.sha256()
    for sweep in arguments:
        kernel(*sweep)
        digest.update(sweep[-1].tobytes())
    return digest.hexdigest()[:12]


@numba.njit
def _returns_at_once(
    n: Any, alphas: Any, remaining: Any, contexts: Any, k_max: Any, target: Any, proposer: Any,
    draft: Any, base: Any, reals: Any, ints: Any, best: Any,
) -> float:  # fmt: skip  # pragma: no cover - compiled
    """A kernel of goodput_sweep's arguments that does nothing: Python's call alone."""
    return 0.0


def paired_ratios(
    entries: list[Any], arguments: list[list[Sweep]], pairs: int, chunk: int
) -> list[list[float]]:
    """For each of ``pairs`` random chunks of ``chunk`` sweeps, each entry's time ÷ the first's."""
    rng = random.Random(1)
    count = len(arguments[0])
    ratios: list[list[float]] = [[] for _ in entries]
    for _ in range(pairs):
        low = rng.randrange(0, max(count - chunk, 1))
        order = list(range(len(entries)))
        rng.shuffle(order)
        seconds = [0.0] * len(entries)
        for at in order:
            call, swept = entries[at], arguments[at][low : low + chunk]
            start = time.perf_counter()
            for sweep in swept:
                call(*sweep)
            seconds[at] = time.perf_counter() - start
        for at in range(len(entries)):
            ratios[at].append(seconds[at] / seconds[0])
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="of the Azure trace")
    parser.add_argument("--against", type=Path, help="another goodput_kernel.py")
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--chunk", type=int, default=2000, help="sweeps a chunk")
    args = parser.parse_args()
    data = scenario(args.minutes)
    inputs = captured_inputs(data)
    sizes = [len(a) for a, *_ in inputs]
    print(
        f"{len(inputs)} sweeps captured, {np.mean(sizes):.1f} requests on average, at most {max(sizes)}"
    )
    with tempfile.TemporaryDirectory(prefix="goodput-replay-") as folder:
        other = [load_module(args.against, Path(folder))] if args.against else []
        report(args, data, inputs, [goodput_kernel, *other])


def report(
    args: argparse.Namespace,
    data: dict[str, Any],
    inputs: list[tuple[Any, ...]],
    modules: list[ModuleType],
) -> None:
    """Time ``modules``' sweeps of ``inputs`` paired and print the figures."""
    shared = costs(data, inputs)
    arguments = [sweeps(module, shared, inputs) for module in modules]
    pairs = list(zip(modules, arguments, strict=True))
    entries = [entry_point(module.goodput_sweep, swept[0]) for module, swept in pairs]
    digests = [choices(module.goodput_sweep, swept) for module, swept in pairs]
    arguments.append(arguments[0])  # the call alone, on this checkout's arguments
    entries.append(entry_point(_returns_at_once, arguments[0][0]))
    chunk = min(args.chunk, len(inputs))
    ratios = paired_ratios(entries, arguments, args.pairs, chunk)
    start = time.perf_counter()
    for sweep in arguments[0][:chunk]:
        entries[0](*sweep)
    each = (time.perf_counter() - start) / chunk * 1e6
    call = statistics.median(ratios[-1])
    print(
        f"this checkout: about {each:.2f} µs a sweep, of which Python's call of the kernel about "
        f"{call * each:.2f} µs (its share {call:.2f}, the median of {args.pairs} chunks)"
    )
    if args.against:
        ours = [1.0 / r for r in ratios[1]]
        low, _, high = statistics.quantiles(ours, n=4)
        print(
            f"this checkout ÷ {args.against}: median {statistics.median(ours):.3f} "
            f"(quartiles {low:.3f}-{high:.3f}, {args.pairs} chunks of {chunk} sweeps)"
        )
        print(f"choices alike: {digests[0] == digests[1]} ({digests[0]}, {digests[1]})")


if __name__ == "__main__":
    main()
