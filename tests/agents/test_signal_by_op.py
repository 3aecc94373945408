"""Which operations carried the manager stage's gradient (memr1.env.manager_reward
.signal_by_op): per operation, the share of samples rewarded above or below their group's mean."""

from __future__ import annotations

import numpy as np

from memr1.env.manager_io import ADD, DELETE, NOOP, UPDATE, ManagerOp
from memr1.env.manager_reward import SIGNAL_KEYS, signal_by_op

A = [ManagerOp(ADD, None, "x")]
U = [ManagerOp(UPDATE, 1, "y")]
DA = [ManagerOp(DELETE, 1, ""), ManagerOp(ADD, None, "x")]
NONE = [ManagerOp(NOOP, 1, "y")]
BAD = [ManagerOp(NOOP, None, "", invalid="unknown_id")]


def test_samples_above_and_below_their_groups_mean_are_counted_per_operation():
    parsed = [[U, A, A, NONE], [DA, A, BAD, []]]
    rewards = np.array([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.5, 0.5]], np.float32)
    got = signal_by_op(parsed, rewards)
    assert set(got) == set(SIGNAL_KEYS)  # every key every step, zeros included
    # group 0: mean 0.25; the UPDATE is pushed up, both ADDs and the NONE down; group 1 ties.
    # Shares of the step's 8 samples.
    assert got["signal_update_up"] == 1 / 8 and got["signal_add_down"] == 2 / 8
    assert got["signal_none_down"] == 1 / 8
    assert sum(got.values()) == 4 / 8


def test_a_delete_and_add_counts_for_both_and_an_invalid_reply_as_none():
    parsed = [[DA, BAD, []]]
    rewards = np.array([[1.0, 0.0, 0.0]], np.float32)
    got = signal_by_op(parsed, rewards)
    assert got["signal_delete_up"] == got["signal_add_up"] == 1 / 3
    assert got["signal_none_down"] == 2 / 3 and sum(got.values()) == 4 / 3
