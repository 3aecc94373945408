"""Stop sets on device (EOS ids, token sequences) and the host-side stop-string check."""

import jax.numpy as jnp
import numpy as np
import pytest

from memr1.sampling.stopping import (
    empty_tail,
    hits_stop,
    make_stop_set,
    push_tail,
    truncate_at_stop_strings,
)


def test_stop_set_is_padded_to_shared_shapes():
    small = make_stop_set([2, 9, 2], [[4, 5, 6], [7]])
    assert small.eos_E.shape == (8,) and small.patterns_QL.shape == (4, 4)
    np.testing.assert_array_equal(small.eos_E[:3], [2, 9, -1])
    np.testing.assert_array_equal(small.patterns_QL[:2], [[-1, 4, 5, 6], [-1, -1, -1, 7]])
    np.testing.assert_array_equal(small.lengths_Q, [3, 1, 0, 0])
    big = make_stop_set(range(9), [[1] * 5])
    assert big.eos_E.shape == (16,) and big.patterns_QL.shape == (4, 8)
    with pytest.raises(ValueError, match="empty stop sequence"):
        make_stop_set([], [[]])
    with pytest.raises(ValueError, match="non-negative"):
        make_stop_set([-3])


def _run(stream_BT, stops):
    """Feeds tokens step by step, returning the first step at which each row stops (or -1)."""
    stops = type(stops)(*map(jnp.asarray, stops))
    tail = empty_tail(stream_BT.shape[0], stops.window)
    first = np.full(stream_BT.shape[0], -1)
    for i in range(stream_BT.shape[1]):
        token = jnp.asarray(stream_BT[:, i])
        tail = push_tail(tail, token)
        hit = np.asarray(hits_stop(token, tail, stops))
        first = np.where((first < 0) & hit, i, first)
    return first


def test_hits_stop_on_eos_and_on_complete_sequences_only():
    stops = make_stop_set([50], [[3, 4, 5], [8, 8]])
    stream = np.array(
        [
            [1, 3, 4, 6, 3, 4, 5, 9],  # "3 4" alone does not stop; "3 4 5" at step 6 does
            [8, 1, 8, 8, 50, 0, 0, 0],  # "8 8" at step 3, before the EOS at step 4
            [4, 5, 7, 7, 7, 7, 7, 50],  # a suffix "4 5" at the very start is not "3 4 5"
            [2, 2, 2, 2, 2, 2, 2, 2],  # never
        ]
    )
    np.testing.assert_array_equal(_run(stream, stops), [6, 3, 7, -1])


def test_padding_rows_of_the_stop_set_never_match():
    # With no sequences at all the pattern rows are padding; -1 in the tail must not match them.
    np.testing.assert_array_equal(_run(np.array([[0, 1, 2, 3, 4]]), make_stop_set([], [])), [-1])


PIECES = {1: "ab", 2: "c", 3: "</", 4: "s>", 5: "x", 6: "STOP"}


def _decode(ids):
    return "".join(PIECES[i] for i in ids)


def test_stop_strings_across_and_inside_token_boundaries():
    tokens = np.array(
        [
            [1, 5, 3, 4, 2, 0],  # "abx</s>c": "</s>" spans tokens 2-3
            [5, 1, 2, 5, 5, 0],  # "xabcxx": "bc" starts inside token 1
            [5, 5, 2, 2, 0, 0],  # no stop string
            [5, 6, 3, 4, 0, 0],  # "xSTOP</s>": the earlier of two stop strings wins
        ]
    )
    lengths = np.array([5, 5, 4, 4])
    out = truncate_at_stop_strings(tokens, lengths, _decode, ["</s>", "bc", "STOP"])
    np.testing.assert_array_equal(out.lengths, [4, 3, 4, 2])
    np.testing.assert_array_equal(out.stopped, [True, True, False, True])
    assert out.texts == ["abx", "xa", "xxcc", "x"]
    # Tokens past a row's length are ignored even when they would contain a stop string.
    late = truncate_at_stop_strings(tokens[:1], np.array([3]), _decode, ["</s>"])
    assert not late.stopped[0] and late.texts == ["abx</"]
    with pytest.raises(ValueError, match="non-empty"):
        truncate_at_stop_strings(tokens, lengths, _decode, [""])
