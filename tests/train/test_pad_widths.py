"""The RL update runs the data's widths, not the budget's: rows are as wide as the step's longest
prompt and reply (bucketed), the shared-prompt update finds the replies from the batch itself,
the share of padding is logged as pad_frac, and a run compiles one program per width bucket."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memr1.env.policy import Completion
from memr1.rl import grpo, grpo_layout, ppo, update_metrics
from memr1.train import batches, loop, steps
from memr1.train.metrics_log import MetricsWriter, read_jsonl
from memr1.train.update import make_step
from tests.train import tiny


def _completion(rng, prompt_ids, reply: int) -> Completion:
    ids = rng.integers(2, tiny.CFG.vocab_size, reply).astype(np.int32)
    return Completion("", prompt_ids, ids, rng.normal(-1.0, 0.3, reply).astype(np.float32), True)


def _groups(seed: int, replies: list[list[int]], prompts: list[int]) -> list[list[Completion]]:
    """One group per prompt length; group b's replies have the lengths replies[b]."""
    rng = np.random.default_rng(seed)
    out = []
    for p, lengths in zip(prompts, replies, strict=True):
        prompt = rng.integers(2, tiny.CFG.vocab_size, p).astype(np.int32)
        out.append([_completion(rng, prompt, r) for r in lengths])
    return out


def test_width_bucket_has_four_widths_an_octave_capped_at_the_budget():
    got = [batches.width_bucket(n) for n in (1, 16, 17, 48, 49, 65, 161, 300, 2049, 3500)]
    assert got == [16, 16, 32, 48, 64, 80, 192, 320, 2560, 3584]
    widths = {batches.width_bucket(n, cap=2048) for n in range(1, 2049)}
    assert max(widths) == 2048 and len(widths) == 24  # <= 4 * log2(2048 / 16) + 1
    for n in range(65, 2049):
        assert n <= batches.width_bucket(n) <= 1.25 * n + 16
    assert batches.width_bucket(2000, cap=1000) == 1000
    with pytest.raises(ValueError, match="need=0"):
        batches.width_bucket(0)


def test_rollout_rows_are_as_wide_as_the_longest_prompt_and_reply():
    rewards = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    short = _groups(0, [[3, 5], [2, 4]], prompts=[7, 20])
    batch, _ = batches.rollout_rows(short, rewards, {}, response_width=2048, pad_id=0, group=2)
    # prompt 20 -> 32 columns, replies of at most 5 -> 16 columns: not 20 + 2048.
    assert batch["tokens"].shape == (4, 32 + 16)
    assert batch["prompt_mask"].shape == (4, 32)
    np.testing.assert_array_equal(batch["prompt_mask"].sum(1), [7, 7, 20, 20])
    np.testing.assert_array_equal(batch["response_mask"].sum(1), [3, 5, 2, 4])
    np.testing.assert_array_equal(batch["tokens"][1, 32:37], short[0][1].ids)
    # A longer reply widens the batch to its bucket; one over the budget is cut at the budget.
    long = _groups(1, [[3, 70], [2, 4]], prompts=[7, 20])
    batch, _ = batches.rollout_rows(long, rewards, {}, response_width=2048, pad_id=0, group=2)
    assert batch["tokens"].shape == (4, 32 + 80)
    batch, _ = batches.rollout_rows(long, rewards, {}, response_width=60, pad_id=0, group=2)
    assert batch["tokens"].shape == (4, 32 + 60)
    assert batch["response_mask"].sum(1).max() == 60


def test_pad_frac_counts_the_positions_the_update_runs():
    # 2 groups of 2 rows, a 4-column prompt and 3 reply columns.
    valid = np.array(
        [
            [0, 1, 1, 1, 1, 1, 0],
            [0, 1, 1, 1, 1, 0, 0],
            [1, 1, 1, 1, 1, 1, 1],
            [1, 1, 1, 1, 0, 0, 0],
        ],
        bool,
    )
    # Whole rows: 28 positions, 20 real.
    assert float(update_metrics.pad_frac(jnp.asarray(valid))) == pytest.approx(8 / 28)
    # What the updates log: GRPO by its layout, PPO (every row whole) over whole rows.
    batch = {
        "valid": jnp.asarray(valid),
        "response_mask": jnp.asarray(valid).at[:, :4].set(False),
        "prompt_mask": jnp.asarray(valid[:, :4]),
        "ref_logp": jnp.zeros(valid.shape, jnp.float32),
    }
    whole = grpo.grpo_loss(None, tiny.grpo_config(group_size=2))
    assert float(whole((batch,), None)[1]["pad_frac"]) == pytest.approx(8 / 28)
    actor_critic = ppo.ppo_loss(None, None, tiny.ppo_config())
    assert float(actor_critic((batch,), None)[1]["pad_frac"]) == pytest.approx(8 / 28)
    # Packed, one row a group: each prompt once (3 + 4 real) and the replies back to back
    # (2 + 1 + 3 + 0): 13 real of 2 rows x 16 columns (the bucket of the longest group, 7).
    rows = {k: np.asarray(v) for k, v in batch.items() if k != "ref_logp"}
    rows.update(tokens=np.ones(valid.shape, np.int32), advantages=np.zeros(4, np.float32))
    packed = batches.pack_step_groups(rows, 2)
    assert packed["tokens"].shape == (2, 16) and packed["response_mask"].shape == (2, 16)
    packed["ref_logp"] = np.zeros((2, 16), np.float32)
    shared = grpo.grpo_loss(None, tiny.grpo_config(shared_prompt=True, group_size=2))
    assert float(shared((packed,), None)[1]["pad_frac"]) == pytest.approx(1 - 13 / 32)


@pytest.mark.slow
def test_packed_loss_on_a_bucketed_batch_equals_whole_rows(policy, reference):
    """On rows packed as the loop packs them (widths from the data, 16 + 16 columns here under
    a 48-token budget, then one row a group) the packed update gives the loss, gradients and
    metrics of running every row whole; pad_frac is each layout's own share of padding."""
    setup, s0 = policy
    g = 2
    groups = _groups(3, [[3, 9], [5, 1], [7, 2], [4, 6]], prompts=[5, 11, 3, 8])
    rewards = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 1.0]], np.float32)
    batch, _ = batches.rollout_rows(groups, rewards, {}, response_width=48, pad_id=0, group=g)
    assert batch["tokens"].shape == (8, 32)
    fields = grpo_layout.ROW_FIELDS + ("prompt_mask", "old_logp")
    batch = {k: batch[k] for k in fields}
    packed = batches.pack_step_groups(batch, g)
    # The longest group: 5 prompt + 3 + 9 reply tokens (17: a 32 bucket); the most reply
    # tokens: 3 + 9 (16).
    assert packed["tokens"].shape == (4, 32)
    assert packed["response_mask"].shape == (4, 16)
    cfg = dict(n_micro=2, kl_beta=0.05, group_size=g)
    whole_cfg, shared = tiny.grpo_config(**cfg), tiny.grpo_config(shared_prompt=True, **cfg)
    l1, g1, m1 = steps.make_grpo_step(setup, whole_cfg, grads_only=True)(
        s0, tiny.with_reference(setup, whole_cfg, batch, reference)
    )
    l2, g2, m2 = steps.make_grpo_step(setup, shared, grads_only=True)(
        s0, tiny.with_reference(setup, shared, packed, reference)
    )
    assert float(l1) != 0.0
    assert float(l2) == pytest.approx(float(l1), abs=1e-6)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    for key in ("entropy", "n_tokens", "clip_frac", "kl", "response_length"):
        assert float(m2[key]) == pytest.approx(float(m1[key]), abs=1e-6), key
    real_prompt, real_reply = 5 + 11 + 3 + 8, 3 + 9 + 5 + 1 + 7 + 2 + 4 + 6
    whole = 1 - (g * real_prompt + real_reply) / (8 * 32)
    once = 1 - (real_prompt + real_reply) / packed["valid"].size
    assert float(m1["pad_frac"]) == pytest.approx(whole)
    assert float(m2["pad_frac"]) == pytest.approx(once)


@pytest.mark.slow
def test_steps_with_different_reply_lengths_compile_one_program_per_width(policy, tmp_path):
    """Three GRPO steps whose replies are 4, 40 and 6 tokens long under a 48-token budget: the
    update compiles two programs (packed widths 16 and 48), and each step logs its own pad_frac."""
    setup, s0 = policy
    built = []

    def spy(setup, spec):  # the loop's step builder, keeping what it built
        built.append(make_step(setup, spec))
        return built[-1]

    cfg = tiny.grpo_config(shared_prompt=True, group_size=2, kl_beta=0.0)
    update = loop.make_rl_update(setup, "grpo", grpo_cfg=cfg, build_step=spy)
    lengths = {0: 4, 1: 40, 2: 6}
    calls = []

    def rollout(params, states, key):
        step = len(calls)
        groups = _groups(step, [[lengths[step], 2]] * len(states), prompts=[6] * len(states))
        calls.append(groups)
        return groups, np.array([[1.0, 0.0]] * len(states), np.float32), {"reward": 0.5}

    with MetricsWriter(tmp_path / "logs") as w:
        loop.run_rl(
            setup,
            tiny.copy_tree(s0),
            update,
            list(range(4)),
            rollout,
            cfg=tiny.loop_config(steps=3, batch_size=2, group_size=2, shared_prompt=True),
            response_width=48,
            pad_id=0,
            writer=w,
        )
    assert len(built) == 1 and built[0]._cache_size() == 2
    records = read_jsonl(tmp_path / "logs" / "metrics.jsonl")
    for r, step in zip(records, range(3), strict=True):
        width = {0: 16, 1: 48, 2: 16}[step]  # one packed row a group: 6 + reply + 2 tokens
        real = 2 * (6 + lengths[step] + 2)
        assert r["train/pad_frac"] == pytest.approx(1 - real / (2 * width), abs=1e-6), step
