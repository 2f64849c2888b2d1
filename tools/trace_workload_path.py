"""The path a scenario takes through cbsim's modules while its workload is generated.

Runs :func:`cbsim.simulate` on a few shipped scenarios under :func:`sys.setprofile` and, within
each call of :func:`cbsim.workload.build.build_workload` (from its call until it returns), follows
which cbsim module the running code is in (frames outside cbsim — numpy, pandas, the standard
library — are transparent: their time counts to the cbsim module that called them). It reports:

- stays: the stretches spent in one module (consecutive frames of one module are one stay);
- modules: the distinct modules the path visits;
- climbs: stays entered by a return, i.e. the path climbing back up into a module above it;
- entries: how many stays each module has (how often it is entered);
- handed the scenario: the calls that take the :class:`~cbsim.schema.scenario.Scenario` itself
  as an argument, and in which functions.

Usage: ``PYTHONPATH=$PWD python tools/trace_workload_path.py [--paths]``.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import cbsim
import cbsim.workload.build as build

SCENARIOS: list[tuple[str, dict[str, Any]]] = [
    ("scenarios/chat-llama3-8b-h100.yaml", {"workload.num_requests": 50}),
    ("scenarios/chat-sessions.yaml", {"workload.sessions.count": 20}),
    ("scenarios/azure-conv-replay.yaml", {"workload.duration_s": 30}),
]


@dataclass
class Path:
    """One build's stays: (module, entered by a return)."""

    stays: list[tuple[str, bool]] = field(default_factory=list)
    handed: Counter[str] = field(default_factory=Counter)  # function -> calls given the scenario

    def enter(self, module: str, climb: bool) -> None:
        if not self.stays or self.stays[-1][0] != module:
            self.stays.append((module, climb))

    @property
    def climbs(self) -> int:
        return sum(climb for _, climb in self.stays)

    @property
    def entries(self) -> Counter[str]:
        return Counter(module for module, _ in self.stays)


def _module(frame: FrameType | None) -> str | None:
    """The cbsim module of the nearest cbsim frame at or above ``frame``."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name == "cbsim" or name.startswith("cbsim."):
            return str(name)
        frame = frame.f_back
    return None


def _takes(frame: FrameType, value: object) -> bool:
    """Whether the function just called in ``frame`` was given ``value`` as an argument."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    return any(frame.f_locals.get(name) is value for name in code.co_varnames[:count])


def trace_builds(path: str, overrides: dict[str, Any]) -> list[Path]:
    """The path of every workload build while the scenario is simulated."""
    scenario = cbsim.load_scenario(path, overrides)  # traces read (and cached) before tracing
    target = build.build_workload.__code__
    paths: list[Path] = []
    active: list[FrameType] = []
    given: list[object] = []  # the scenario the build was given

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            if not active and frame.f_code is target:
                active.append(frame)
                paths.append(Path())
                given[:] = [frame.f_locals["scenario"]]
            if active:
                module = _module(frame)
                if module is not None:
                    paths[-1].enter(module, climb=False)
                if _takes(frame, given[0]):
                    paths[-1].handed[f"{module}.{frame.f_code.co_qualname}"] += 1
        elif event == "return" and active:
            if frame is active[0]:
                active.clear()
                return
            module = _module(frame.f_back)
            if module is not None:
                paths[-1].enter(module, climb=True)

    sys.setprofile(profile)
    try:
        cbsim.simulate(scenario)
    finally:
        sys.setprofile(None)
    return paths


def main() -> None:
    show = "--paths" in sys.argv
    for path, overrides in SCENARIOS:
        builds = trace_builds(path, overrides)
        for number, build_path in enumerate(builds, 1):
            entries = build_path.entries
            print(
                f"{path} {overrides} build {number}/{len(builds)}: {len(build_path.stays)} stays "
                f"in {len(entries)} modules, {build_path.climbs} climbs back up"
            )
            for module, count in entries.most_common():
                print(f"    {count:3d}  {module}")
            handed = build_path.handed
            print(f"  handed the scenario: {sum(handed.values())} calls of {len(handed)} functions")
            for function, count in handed.most_common():
                print(f"    {count:3d}  {function}")
            if show:
                print(
                    "    path: " + " > ".join(m.removeprefix("cbsim.") for m, _ in build_path.stays)
                )


if __name__ == "__main__":
    main()
