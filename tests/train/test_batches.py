"""A rollout's RL rows (`pack_rollout`) and dropping zero-signal GRPO groups: which rows stay, in
what order, and how many."""

import numpy as np
import pytest

from memr1.env.policy import Completion
from memr1.train.batches import keep_signal_groups, pack_rollout, signal_first_groups


def _batch(advantages_BG, rewards_BG=None):
    """Rows numbered in order; the rewards are the advantages unless given."""
    adv = np.asarray(advantages_BG, np.float32)
    b, g = adv.shape
    rows = np.arange(b * g)
    rewards = adv if rewards_BG is None else np.asarray(rewards_BG, np.float32)
    return {
        "tokens": np.stack([rows, rows], 1),
        "advantages": adv.reshape(-1),
        "rewards": rewards.reshape(-1),
    }


def test_constant_fractional_reward_groups_count_as_zero_signal():
    """Groups of one reward such as 1/3 (a mean over linked questions) carry no signal, whatever
    rounding residue their advantages hold: the groups are judged on their rewards."""
    g = 7
    rewards = [[1 / 3] * g, [1 / 3] * (g - 1) + [1.0], [0.2] * g, [0.75] * g]
    residue = [[0.0289] * g, [-0.4] * (g - 1) + [2.4], [0.0147] * g, [0.0] * g]
    out, stats = keep_signal_groups(_batch(residue, rewards), group=g, quantum=1)
    np.testing.assert_array_equal(out["tokens"][:, 0], np.arange(g, 2 * g))
    assert stats == {"kept_groups_frac": 0.25}
    out, stats = signal_first_groups(_batch(residue, rewards), group=g, keep=2)
    np.testing.assert_array_equal(out["tokens"][:, 0], np.arange(2 * g))  # group 1, then 0
    assert stats == {"signal_groups_frac": 0.5}


@pytest.mark.parametrize("value, g", [(1 / 3, 7), (1 / 5, 8), (3 / 4, 12), (2 / 3, 12)])
def test_pack_rollout_gives_constant_groups_zero_advantages_and_no_signal(value, g):
    rows = [
        Completion("", np.array([5, 6], np.int32), np.array([7], np.int32), np.zeros(1), True)
        for _ in range(2 * g)
    ]
    groups = [rows[:g], rows[g:]]
    rewards = np.array([[value] * g, [value] * (g - 1) + [1.0]], np.float32)
    batch, stats = pack_rollout(groups, rewards, response_width=2, pad_id=0)
    np.testing.assert_array_equal(batch["advantages"][:g], 0.0)
    assert np.all(batch["advantages"][g:] != 0)
    assert stats["zero_signal_frac"] == 0.5
    _, kept = keep_signal_groups(batch, group=g, quantum=1)
    assert kept == {"kept_groups_frac": 0.5}


def test_pack_rollout_lines_up_tokens_masks_logprobs_and_advantages():
    # B = 1 prompt, G = 2 samples, prompt width 3 (left-padded), 3 reply columns (right-padded).
    logps = ([-0.5, -1.0], [-2.0])
    groups = [
        [
            Completion("", np.array([7, 8], np.int32), np.array(ids, np.int32),
                       np.array(logp, np.float32), True)
            for ids, logp in zip(([4, 5], [6]), logps, strict=True)
        ]
    ]  # fmt: skip
    batch, stats = pack_rollout(
        groups, np.array([[1.0, 0.0]]), response_width=3, pad_id=0, prompt_width=3
    )
    np.testing.assert_array_equal(batch["tokens"], [[0, 7, 8, 4, 5, 0], [0, 7, 8, 6, 0, 0]])
    np.testing.assert_array_equal(batch["valid"][1], [0, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(batch["prompt_mask"][0], [0, 1, 1])
    np.testing.assert_array_equal(batch["response_mask"][0], [0, 0, 0, 1, 1, 0])
    np.testing.assert_array_equal(batch["old_logp"][0], [0, 0, 0, -0.5, -1.0, 0])
    np.testing.assert_array_equal(batch["sampler_logp"][1], [0, 0, 0, -2.0, 0, 0])
    np.testing.assert_allclose(batch["advantages"], [0.7071, -0.7071], atol=1e-4)
    assert stats["zero_signal_frac"] == 0.0


def test_a_batch_without_rewards_is_refused():
    batch = _batch([[1, -1]])
    del batch["rewards"]
    with pytest.raises(ValueError, match="'rewards'"):
        keep_signal_groups(batch, group=2, quantum=1)


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
    # Packed GRPO: a group is one row, so kept groups split over micro-batches and devices.
    assert signal_quantum(12, 2, 1, 8, packed=True) == 8
    assert signal_quantum(128, 8, 16, 8, packed=True) == 128


def test_update_tokens_count_a_packed_group_s_prompt_once():
    import types

    from memr1.train.batches import update_tokens

    valid = np.array([[0, 1, 1, 1, 0], [0, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    batch = {"valid": valid, "prompt_mask": valid[:, :3]}
    rows = types.SimpleNamespace(packed=False, group_size=2)
    assert update_tokens(batch, rows) == 15
    packed = types.SimpleNamespace(packed=True, group_size=2)
    assert update_tokens(batch, packed) == 15 - 2 - 3  # the second row of each group's prompt


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
