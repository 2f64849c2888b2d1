"""numpy's PCG64 stream drawn inside compiled code from four machine words.

Every random stream in cbsim is a ``numpy.random.Generator`` over numpy's ``PCG64`` bit generator
(:mod:`cbsim.common.rng`). A numba kernel can take the generator itself, but each call then
unboxes it through ``ctypes`` (about 8 µs a generator), which for the speculative decode runs,
called once per arrival, was most of a call's fixed cost. PCG64 is small enough to step here: a
128-bit linear congruential state advanced by numpy's multiplier and the stream's increment, and
the XSL-RR output (the high and low halves xor-ed, rotated by the top six bits). A double is the
top 53 bits of an output over 2**53, as numpy's ``Generator.random`` takes it. So a kernel takes
the state as four 64-bit words (:func:`state_words`), draws exactly the numbers the generator
would, and the generator is then set to where the kernel left the state (:func:`set_state`):
the same stream, number for number (``tests/test_pcg64.py`` against numpy).

A stream drawn from by kernels far more often than by Python is held as a :class:`WordStream`:
its words are the stream's state, advanced in place by each kernel, and the generator is set from
them only when Python code asks for it (and read back before the next kernel draws), so a kernel
call costs no conversion of the state at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

WordArray = npt.NDArray[np.uint64]

_MASK64 = (1 << 64) - 1
_MULTIPLIER = 0x2360ED051FC65DA44385DF649FCCF645  # PCG's default 128-bit multiplier
MULTIPLIER_HIGH = np.uint64(_MULTIPLIER >> 64)
MULTIPLIER_LOW = np.uint64(_MULTIPLIER & _MASK64)
STATE_HIGH, STATE_LOW, INCREMENT_HIGH, INCREMENT_LOW = range(4)


def state_words(state: Mapping[str, Any]) -> WordArray:
    """A PCG64 ``bit_generator.state`` mapping as the words the kernels step (state and increment,
    high and low halves). Raises ``ValueError`` for another bit generator, or one holding half an
    output for a 32-bit draw (cbsim draws doubles only)."""
    if state.get("bit_generator") != "PCG64" or state.get("has_uint32"):
        raise ValueError("not a PCG64 state at a whole output")
    value, increment = int(state["state"]["state"]), int(state["state"]["inc"])
    return np.array(
        [value >> 64, value & _MASK64, increment >> 64, increment & _MASK64], dtype=np.uint64
    )


def set_state(generator: np.random.Generator, words: WordArray) -> None:
    """Set ``generator`` (PCG64) to the state in ``words``."""
    value = (int(words[STATE_HIGH]) << 64) | int(words[STATE_LOW])
    increment = (int(words[INCREMENT_HIGH]) << 64) | int(words[INCREMENT_LOW])
    generator.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": value, "inc": increment},
        "has_uint32": 0,
        "uinteger": 0,
    }


@numba.njit(cache=True)
def _multiply_high(a: np.uint64, b: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    """The high 64 bits of the 128-bit product ``a * b``."""
    mask = np.uint64(0xFFFFFFFF)
    shift = np.uint64(32)
    a_low, a_high = a & mask, a >> shift
    b_low, b_high = b & mask, b >> shift
    low_low = a_low * b_low
    low_high = a_low * b_high
    high_low = a_high * b_low
    carry = ((low_low >> shift) + (low_high & mask) + (high_low & mask)) >> shift
    return a_high * b_high + (low_high >> shift) + (high_low >> shift) + carry


@numba.njit(cache=True)
def next_double(words: WordArray) -> float:  # pragma: no cover - compiled
    """The generator's next ``random()`` double, ``words`` advanced in place (numpy's
    ``pcg64_next_double``: step the state, output XSL-RR of the new state, its top 53 bits)."""
    high = words[STATE_HIGH]
    low = words[STATE_LOW]
    # state = state * multiplier + increment (mod 2**128)
    new_low = low * MULTIPLIER_LOW
    new_high = high * MULTIPLIER_LOW + low * MULTIPLIER_HIGH + _multiply_high(low, MULTIPLIER_LOW)
    increment_low = words[INCREMENT_LOW]
    summed_low = new_low + increment_low
    carry = np.uint64(1) if summed_low < new_low else np.uint64(0)
    new_high = new_high + words[INCREMENT_HIGH] + carry
    words[STATE_HIGH] = new_high
    words[STATE_LOW] = summed_low
    value = new_high ^ summed_low
    rotation = new_high >> np.uint64(58)
    output = (value >> rotation) | (value << ((np.uint64(64) - rotation) & np.uint64(63)))
    return float(output >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(cache=True)
def fill_doubles(words: WordArray, out: npt.NDArray[np.float64]) -> None:  # pragma: no cover
    """Fill ``out`` (any shape, in C order) with the stream's next doubles, as
    ``Generator.random(out.shape)`` draws them."""
    flat = out.reshape(-1)
    for i in range(flat.size):
        flat[i] = next_double(words)


class WordStream:
    """A PCG64 generator's stream drawn from by compiled code (through its words) and by Python
    code (through the generator), in any interleaving: the same numbers as the generator alone."""

    __slots__ = ("_generator", "_lent", "_words")

    def __init__(self, generator: np.random.Generator) -> None:
        self._generator = generator
        self._words = state_words(generator.bit_generator.state)
        self._lent = False  # the generator was handed out: it may have drawn past the words

    def words(self) -> WordArray:
        """The stream's state as words, for a kernel to advance in place (the stream's state
        from then on)."""
        if self._lent:
            self._words = state_words(self._generator.bit_generator.state)
            self._lent = False
        return self._words

    def generator(self) -> np.random.Generator:
        """The stream as a numpy generator, where the kernels left it. Draw from it before the
        next call of :meth:`words`, not after."""
        if not self._lent:
            set_state(self._generator, self._words)
            self._lent = True
        return self._generator
