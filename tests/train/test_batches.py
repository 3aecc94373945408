"""Dropping zero-signal GRPO groups: which rows stay, in what order, and how many."""

import numpy as np
import pytest

from memr1.train.batches import keep_signal_groups


def _batch(advantages_BG):
    adv = np.asarray(advantages_BG, np.float32)
    b, g = adv.shape
    rows = np.arange(b * g)
    return {"tokens": np.stack([rows, rows], 1), "advantages": adv.reshape(-1)}


def test_keeps_signal_groups_and_fills_to_the_quantum_in_rollout_order():
    adv = [[0, 0], [1, -1], [0, 0], [0, 0], [-1, 1], [0, 0], [1, -1], [0, 0]]
    out, stats = keep_signal_groups(_batch(adv), group=2, quantum=2)
    # 3 signal groups (1, 4, 6) -> 4 groups: the first zero-signal group (0) fills up.
    np.testing.assert_array_equal(out["tokens"][:, 0], [0, 1, 2, 3, 8, 9, 12, 13])
    np.testing.assert_array_equal(out["advantages"], [0, 0, 1, -1, -1, 1, 1, -1])
    assert stats == {"kept_groups_frac": 0.5}


def test_nothing_dropped_when_the_quantum_covers_the_batch():
    batch = _batch([[1, -1], [0, 0], [0, 0], [0, 0]])
    out, stats = keep_signal_groups(batch, group=2, quantum=4)
    assert out is batch and stats["kept_groups_frac"] == 1.0
    out, _ = keep_signal_groups(_batch([[1, -1]] * 4), group=2, quantum=1)
    assert len(out["advantages"]) == 8


def test_no_signal_at_all_keeps_one_quantum():
    out, stats = keep_signal_groups(_batch([[0, 0, 0]] * 4), group=3, quantum=1)
    np.testing.assert_array_equal(out["tokens"][:, 0], [0, 1, 2])
    assert stats["kept_groups_frac"] == 0.25


def test_rows_that_are_not_whole_groups_are_refused():
    with pytest.raises(ValueError, match="groups of 4"):
        keep_signal_groups(_batch([[1, -1, 0]] * 2), group=4, quantum=1)


def test_signal_quantum_keeps_rows_divisible_and_shapes_few():
    from memr1.train.batches import signal_quantum

    assert signal_quantum(16, 8, 1, 1) == 4  # shapes of 4, 8, 12, 16 groups
    assert signal_quantum(4, 8, 1, 1) == 1
    assert signal_quantum(16, 8, 8, 1) == 8  # 8 micro-batches of whole groups
    q = signal_quantum(12, 2, 1, 8)  # 8 devices, 2 rows a group: 4 groups at a time
    assert q == 4 and (q * 2) % 8 == 0


def test_signal_first_keeps_signal_groups_then_fills_in_rollout_order():
    from memr1.train.batches import signal_first_groups

    adv = [[0, 0], [1, -1], [0, 0], [0, 0], [-1, 1], [0, 0]]
    out, stats = signal_first_groups(_batch(adv), group=2, keep=3)
    # signal groups 1 and 4, then the first all-equal group (0), in rollout order
    np.testing.assert_array_equal(out["tokens"][:, 0], [0, 1, 2, 3, 8, 9])
    np.testing.assert_array_equal(out["advantages"], [0, 0, 1, -1, -1, 1])
    assert stats == {"signal_groups_frac": 2 / 3}
    # more signal groups than kept: the first ones, every kept group with signal
    out, stats = signal_first_groups(_batch(adv), group=2, keep=1)
    np.testing.assert_array_equal(out["tokens"][:, 0], [2, 3])
    assert stats == {"signal_groups_frac": 1.0}


def test_signal_first_refuses_more_groups_than_rolled_out():
    from memr1.train.batches import signal_first_groups

    with pytest.raises(ValueError, match="cannot keep 3 groups of a batch of 2"):
        signal_first_groups(_batch([[1, -1], [0, 0]]), group=2, keep=3)
