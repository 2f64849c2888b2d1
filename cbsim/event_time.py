"""Event times exact to the float: when a replica's iteration ends, and how to land on it.

The engine keeps its own clock (an iteration ends at start + duration exactly) and asks SimPy for
events at those times. SimPy computes ``now + delay``, which may round: :func:`exact_delay` finds a
delay that lands exactly on the time wanted (or, where none does, the first float after it).
:func:`iteration_end` is such an event at urgent priority, so an iteration that ends when
something else happens is seen first (see :mod:`cbsim.engine` on ties).
"""

from __future__ import annotations

import math

import simpy


def iteration_end(env: simpy.Environment, delay: float) -> simpy.Event:
    """A timeout of ``delay`` that SimPy processes before any normal event of the same time (an
    arrival, a front end's delivery): what :class:`simpy.events.Timeout` does, at urgent
    priority (see the module docstring on ties)."""
    event = simpy.Event(env)
    event._ok = True
    event._value = None
    env.schedule(event, simpy.events.URGENT, delay)
    return event


def exact_delay(now: float, end: float) -> float:
    """A delay that SimPy's ``now + delay`` turns into exactly ``end`` (no rounding drift)."""
    delay = end - now
    for _ in range(4):
        reached = now + delay
        if reached == end:
            break
        delay = math.nextafter(delay, math.inf if reached < end else -math.inf)
    while now + delay < end:  # end itself unreachable: never before it
        delay = math.nextafter(delay, math.inf)
    return delay
