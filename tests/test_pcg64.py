"""numpy's PCG64 stream stepped in compiled code (:mod:`cbsim.common.pcg64`) draws numpy's numbers,
number for number, and leaves the generator where numpy would."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbsim.common.pcg64 import WordStream, fill_doubles, next_double, set_state, state_words
from cbsim.common.rng import stream


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    before=st.integers(0, 50),
    count=st.integers(1, 2000),
)
def test_the_words_draw_numpys_doubles(seed: int, before: int, count: int) -> None:
    generator = stream(seed, "acceptance", seed % 4)
    generator.random(before)
    words = state_words(generator.bit_generator.state)
    ours = np.array([next_double(words) for _ in range(count)])
    theirs = generator.random(count)
    assert np.array_equal(ours, theirs)
    # the words now stand where the generator does
    again = stream(seed, "other")
    set_state(again, words)
    assert again.random(5).tolist() == generator.random(5).tolist()


def test_extreme_states_step_as_numpy_does() -> None:
    top = (1 << 128) - 1
    for value, increment in ((0, 1), (top, top), (1 << 127, (1 << 64) + 1), (top >> 1, 3)):
        generator = np.random.Generator(np.random.PCG64(0))
        generator.bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": value, "inc": increment},
            "has_uint32": 0,
            "uinteger": 0,
        }
        words = state_words(generator.bit_generator.state)
        assert [next_double(words) for _ in range(64)] == generator.random(64).tolist()


def test_only_a_pcg64_state_at_a_whole_output_is_taken() -> None:
    with pytest.raises(ValueError, match="PCG64"):
        state_words(np.random.Generator(np.random.MT19937(1)).bit_generator.state)
    generator = np.random.Generator(np.random.PCG64(1))
    generator.integers(0, 10, dtype=np.uint32)  # a 32-bit draw keeps half an output
    with pytest.raises(ValueError, match="whole output"):
        state_words(generator.bit_generator.state)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    draws=st.lists(
        st.tuples(st.booleans(), st.integers(1, 5), st.integers(1, 9)), min_size=1, max_size=12
    ),
)
def test_a_word_stream_draws_one_generators_numbers_whoever_draws(
    seed: int, draws: list[tuple[bool, int, int]]
) -> None:
    """Kernels (through the words) and Python (through the generator) drawing in any order take
    the numbers of one generator drawn alone, in that order."""
    shared = WordStream(stream(seed, "acceptance"))
    alone = stream(seed, "acceptance")
    for compiled, rows, width in draws:
        if compiled:
            ours = np.empty((rows, width))
            fill_doubles(shared.words(), ours)
        else:
            ours = shared.generator().random((rows, width))
        assert np.array_equal(ours, alone.random((rows, width)))
    assert shared.generator().random(3).tolist() == alone.random(3).tolist()
