"""Width classes (`train.width_classes`): a packed GRPO step's groups sorted by the columns they
need into K classes of equal count, each packed at its own width; the update over the classes
is the update over one width (values, gradients, metrics), on fewer padded positions."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import optax
import pytest

from memr1.env.policy import Completion
from memr1.rl import grpo_layout, packing
from memr1.train import batches, loop, steps
from tests.train import tiny

# Groups of 2 whose packed needs (prompt + both replies) are 62, 9, 16 and 11 columns.
PROMPTS = [20, 3, 9, 5]
REPLIES = [[30, 12], [2, 4], [6, 1], [3, 3]]


def _rows(seed: int = 0) -> dict[str, np.ndarray]:
    """The row-layout batch the loop hands the update (`batches.rollout_rows`)."""
    rng = np.random.default_rng(seed)
    groups = []
    for p, lengths in zip(PROMPTS, REPLIES, strict=True):
        prompt = rng.integers(2, tiny.CFG.vocab_size, p).astype(np.int32)
        groups.append(
            [
                Completion(
                    "",
                    prompt,
                    rng.integers(2, tiny.CFG.vocab_size, r).astype(np.int32),
                    rng.normal(-3.0, 0.3, r).astype(np.float32),
                    True,
                )
                for r in lengths
            ]
        )
    rewards = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], np.float32)
    batch, _ = batches.rollout_rows(groups, rewards, {}, response_width=64, pad_id=0, group=2)
    return {
        k: batch[k] for k in grpo_layout.ROW_FIELDS + ("prompt_mask", "old_logp", "sampler_logp")
    }


def test_groups_are_sorted_into_classes_each_at_its_own_width():
    rows = _rows()
    np.testing.assert_array_equal(
        packing.group_needs(rows, 2), [[62, 42], [9, 6], [16, 7], [11, 6]]
    )
    (one,) = batches.pack_step_classes(rows, 2, 1)
    short, long = batches.pack_step_classes(rows, 2, 2)
    # One class: every group at the longest's bucket (62 -> 64 columns, 42 reply -> 48).
    assert one["tokens"].shape == (4, 64) and one["response_mask"].shape == (4, 48)
    # Two: the shorter half (needs 9 and 11, in that order) at 16, the longer half at 64.
    assert short["tokens"].shape == (2, 16) and short["response_mask"].shape == (2, 16)
    assert long["tokens"].shape == (2, 64) and long["response_mask"].shape == (2, 48)
    for part, groups, width, reply in ((short, [1, 3], 16, 16), (long, [2, 0], 64, 48)):
        want = packing.pack_groups(rows, 2, width, reply, groups=groups)
        assert set(part) == set(want)
        for k in want:
            np.testing.assert_array_equal(part[k], want[k], err_msg=k)
    # The same tokens on 160 positions instead of 256.
    assert short["valid"].sum() + long["valid"].sum() == one["valid"].sum()
    assert short["response_mask"].sum() + long["response_mask"].sum() == sum(map(sum, REPLIES))
    with pytest.raises(ValueError, match=r"train.width_classes=3: .* 4 groups"):
        batches.pack_step_classes(rows, 2, 3)


def test_every_process_packs_class_k_at_one_width(monkeypatch):
    """Each process sorts its own groups; class k's widths are the widest over the processes
    (`multihost.gather`), so every process's class k has one shape."""
    rows = _rows()
    mine = batches.pack_step_classes(rows, 2, 2)
    seen = []

    def gather(value):  # another process whose short class needs 40 columns (30 of replies)
        seen.append(value)
        return [value, [[40, 30], [20, 10]]]

    monkeypatch.setattr(batches.multihost, "gather", gather)
    short, long = batches.pack_step_classes(rows, 2, 2)
    assert seen == [[[11, 6], [62, 42]]]  # this process's needs, a class each
    assert short["tokens"].shape == (2, 48) and short["response_mask"].shape == (2, 32)
    assert long["tokens"].shape == mine[1]["tokens"].shape  # its own need was the widest
    np.testing.assert_array_equal(short["tokens"][:, :16], mine[0]["tokens"])


def test_the_classes_are_as_many_as_split_the_micro_batches():
    packed = dict(shared_prompt=True, group_size=2)
    for k, n_micro, classes in ((2, 2, 2), (2, 16, 2), (2, 1, 1), (2, 3, 1), (4, 6, 3), (1, 4, 1)):
        cfg = tiny.grpo_config(width_classes=k, n_micro=n_micro, **packed)
        assert cfg.classes == (2, classes), (k, n_micro)
    for bad in (
        dict(width_classes=2, n_micro=2, group_size=2),  # rows layout: nothing to class
        dict(width_classes=0, **packed),
    ):
        with pytest.raises(ValueError, match=r"train\.width_classes"):
            tiny.grpo_config(**bad)


@pytest.mark.slow
def test_a_step_in_width_classes_is_the_one_width_step(policy, reference):
    """Loss, gradients and metrics of the update (KL β > 0, the reference scored per class by
    its one program) equal the one-width step's, pad_frac counts the classes' own positions,
    and the loop's update (`make_rl_update`) packs, scores and steps the same way."""
    setup, s0 = policy
    reference = jax.tree.map(lambda x: x * 1.05, reference)  # a KL that is not 0
    rows = _rows()
    one_cfg = tiny.grpo_config(shared_prompt=True, group_size=2, n_micro=2, kl_beta=0.05)
    two_cfg = dataclasses.replace(one_cfg, width_classes=2)
    one = batches.pack_step_groups(rows, 2)
    one["ref_logp"] = steps.make_grpo_reference(setup, one_cfg)(reference, one)
    two = batches.pack_step_classes(rows, 2, 2)
    for part, ref_logp in zip(
        two, steps.make_grpo_reference(setup, two_cfg)(reference, two), strict=True
    ):
        part["ref_logp"] = ref_logp
    l1, g1, m1 = steps.make_grpo_step(setup, one_cfg, grads_only=True)(s0, one)
    l2, g2, m2 = steps.make_grpo_step(setup, two_cfg, grads_only=True)(s0, two)
    assert float(l1) != 0.0 and float(m1["clip_frac"]) > 0 and float(m1["kl"]) > 0
    assert float(l2) == pytest.approx(float(l1), abs=1e-6)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    same = ("entropy", "n_tokens", "clip_frac", "kl", "pg_loss", "ratio_mean", "approx_kl",
            "logprob_gap", "logprob_gap_abs", "response_length", "response_length_max")  # fmt: skip
    for key in same:
        assert float(m2[key]) == pytest.approx(float(m1[key]), abs=1e-6), key
    real = one["valid"].sum()
    assert float(m1["pad_frac"]) == pytest.approx(1 - real / 256)
    assert float(m2["pad_frac"]) == pytest.approx(1 - real / 160)

    update = loop.make_rl_update(setup, "grpo", grpo_cfg=two_cfg, ref_params=reference)
    s1, metrics = update(tiny.copy_tree(s0), rows)
    assert float(metrics["loss"]) == pytest.approx(float(l1), abs=1e-6)
    assert float(metrics["grad_norm"]) == pytest.approx(float(optax.tree.norm(g1)), rel=1e-5)
    assert float(metrics["pad_frac"]) == pytest.approx(float(m2["pad_frac"]))
    assert float(metrics["update_refused"]) == 0.0 and int(s1.step) == int(s0.step) + 1
    assert float(metrics["width_classes"]) == float(m2["width_classes"]) == 2
    assert float(m1["width_classes"]) == 1
