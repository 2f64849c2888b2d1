"""The options ``cbsim capacity`` and ``cbsim plan`` share, spelt and defaulted once.

Each is a click decorator with the default of :mod:`cbsim.studies.capacity.defaults`, so the two commands
cannot drift apart again: the window, the tolerance, the headroom, the target load, the seeds the
fleet is verified on, the prices (``--prices`` and ``--price``, both spellings, each repeatable and
each taking ``GPU=USD`` pairs separated by commas) and ``--quiet``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from cbsim.studies.capacity.defaults import HEADROOM, TOLERANCE, VERIFY_SEEDS, WINDOW_S

__all__ = [
    "headroom_option",
    "prices_option",
    "quiet_option",
    "target_option",
    "tolerance_option",
    "verify_seeds_option",
    "window_option",
]

F = TypeVar("F", bound=Callable[..., Any])


def window_option(function: F) -> F:
    return click.option(
        "--window-s",
        type=float,
        default=WINDOW_S,
        show_default=True,
        help="Seconds of arrivals simulated per rate (the knee has converged by 300 s; shorter "
        "windows overstate it).",
    )(function)


def tolerance_option(function: F) -> F:
    return click.option(
        "--tolerance",
        type=float,
        default=TOLERANCE,
        show_default=True,
        help="Relative width at which the bisection of the knee stops.",
    )(function)


def headroom_option(function: F) -> F:
    return click.option(
        "--headroom",
        type=float,
        default=HEADROOM,
        show_default=True,
        help="Plan each replica at this fraction of its knee (0.8: 25% headroom); 1 plans at "
        "the knee.",
    )(function)


def target_option(function: F) -> F:
    return click.option(
        "--target-rps",
        type=float,
        default=None,
        help="Size a fleet for this load: replicas at --headroom of their knee, verified by "
        "simulation at the target.",
    )(function)


def verify_seeds_option(function: F) -> F:
    return click.option(
        "--verify-seeds",
        type=int,
        default=None,
        help=f"Seeds the planned load is verified on: the scenario's and the next ones "
        f"(default {VERIFY_SEEDS}).",
    )(function)


def prices_option(function: F) -> F:
    return click.option(
        "--prices",
        "--price",
        "price_texts",
        multiple=True,
        metavar="GPU=USD,...",
        help="USD per GPU-hour over the catalog's list prices, e.g. h100-sxm=2.5,h200=3.2 "
        "(repeatable; --price is the same option).",
    )(function)


def quiet_option(function: F) -> F:
    return click.option(
        "--quiet",
        "-q",
        is_flag=True,
        help="No progress lines on stderr.",
    )(function)
