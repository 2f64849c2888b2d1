"""Event times exact to the float: when a replica's iteration ends, and how to land on it.

The engine keeps its own clock (an iteration ends at start + duration exactly) and asks SimPy for
events at those times. SimPy computes ``now + delay``, which may round, and from some ``now`` no
delay reaches the time wanted (``now + delay`` rounds to even on a tie). :func:`iteration_end_at`
schedules an event at the exact time itself, at urgent priority, so an iteration that ends when
something else happens is seen first (see :mod:`cbsim.engine.loop` on ties), and a run of iterations
waited for in one event lands where stepping through them lands, to the bit. :func:`exact_delay`
finds a delay that lands exactly on a time (or, where none does, the first float after it) for
ordinary timeouts.
"""

from __future__ import annotations

import heapq
import math

import simpy


def iteration_end_at(env: simpy.Environment, end: float) -> simpy.Event:
    """An event at exactly ``end`` (``env.now`` if that is later) that SimPy processes before any
    normal event of the same time (an arrival, a front end's delivery): a
    :class:`simpy.events.Timeout` at urgent priority, scheduled at the time itself rather than
    at ``now`` plus a delay (see the module docstring)."""
    event = simpy.Event(env)
    event._ok = True
    event._value = None
    at = end if end > env.now else env.now
    # what Environment.schedule does, with the time itself instead of now + delay
    heapq.heappush(env._queue, (at, simpy.events.URGENT, next(env._eid), event))
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
