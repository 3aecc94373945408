"""The GRPO step: it follows the advantages, logs the sampler gap, skips the reference at β = 0,
and refuses a poisoned update."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memr1.rl import grpo, grpo_layout
from memr1.train import batches, steps, update
from tests.train import tiny
from tests.train.conftest import GRPO_CFG

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow


def _sequence_logp(logp_fn, params, batch):
    logp = np.asarray(logp_fn(params, batch))
    return (logp * batch["response_mask"]).sum(-1)


def test_grpo_epochs_on_sampler_logprobs_follow_the_advantages(policy, reference):
    """3 updates on one batch whose old log-probs come from a "sampler".

    The old log-probs are the trainer's own (so the first ratio is exactly 1) and the sampler's
    are made 0.05 lower per token, which the gap metric must report.
    """
    setup, s0 = policy
    batch = tiny.grpo_batch()
    logp_fn = update.make_logprob_fn(setup, chunk=tiny.CHUNK)
    old = np.asarray(logp_fn(s0.params, batch))
    batch["old_logp"] = old
    batch["sampler_logp"] = (old - 0.05 * batch["response_mask"]).astype(np.float32)
    step = tiny.with_reference_step(setup, GRPO_CFG, steps.make_grpo_step(setup, GRPO_CFG))
    state = tiny.copy_tree(s0)
    history = []
    for _ in range(3):
        state, metrics = step(state, batch, reference)
        history.append(jax.device_get(metrics))

    first = history[0]
    assert float(first["ratio_mean"]) == pytest.approx(1.0, abs=1e-6)
    assert float(first["approx_kl"]) == pytest.approx(0.0, abs=1e-7)
    assert float(first["kl"]) == pytest.approx(0.0, abs=1e-7)  # the policy still is the reference
    assert float(first["logprob_gap"]) == pytest.approx(0.05, rel=1e-4)
    assert float(first["logprob_gap_abs"]) == pytest.approx(0.05, rel=1e-4)
    lengths = batch["response_mask"].sum(-1)
    assert float(first["response_length"]) == pytest.approx(lengths.mean())
    assert float(first["response_length_max"]) == lengths.max()
    assert float(history[-1]["approx_kl"]) > 0 and float(history[-1]["kl"]) > 0
    for m in history:
        assert np.isfinite(float(m["entropy"])) and float(m["entropy"]) > 0
        assert float(m["update_refused"]) == 0.0

    before = _sequence_logp(logp_fn, s0.params, batch)
    after = _sequence_logp(logp_fn, state.params, batch)
    adv = batch["advantages"]
    assert (adv > 0).any() and (adv < 0).any()
    gain = after - before
    assert gain[adv > 0].mean() > 0.05, f"positively advantaged rows lost log-prob: {gain}"
    assert gain[adv < 0].mean() < -0.05, f"negatively advantaged rows gained log-prob: {gain}"
    assert not tiny.leaves_equal(state.params, s0.params)


def test_the_update_never_runs_the_reference(policy, reference, monkeypatch):
    """The update program traces one forward pass (the policy's) whatever β; with β > 0 it
    reads the reference's log-probs off the batch, which one forward-only program scores."""
    setup, s0 = policy
    calls = []
    real = grpo_layout.sequence_logprobs
    monkeypatch.setattr(
        grpo_layout, "sequence_logprobs", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    batch = tiny.grpo_batch()
    steps.make_grpo_step(setup, tiny.grpo_config(kl_beta=0.0)).trace(s0, batch)
    without_ref = len(calls)
    calls.clear()
    cfg = tiny.grpo_config(kl_beta=0.1)
    ref_logp = steps.make_grpo_reference(setup, cfg)(reference, batch)
    reference_pass = len(calls)
    calls.clear()
    steps.make_grpo_step(setup, cfg).trace(s0, {**batch, "ref_logp": ref_logp})
    assert (without_ref, reference_pass, len(calls)) == (1, 1, 1)
    # The reference pass gives the policy's own log-prob function on the reference weights.
    want = update.make_logprob_fn(setup, chunk=tiny.CHUNK)(reference, batch)
    np.testing.assert_array_equal(np.asarray(ref_logp), np.asarray(want))
    # A β > 0 step without the reference's log-probs is a named error, before any compute.
    with pytest.raises(ValueError, match="'ref_logp'"):
        steps.make_grpo_step(setup, cfg).trace(s0, batch)


def test_nan_guard_refuses_a_poisoned_update(policy, reference, grpo_step):
    setup, s0 = policy
    poisoned = tiny.grpo_batch()
    poisoned["advantages"][3] = np.nan
    before = tiny.copy_tree(s0)
    state, metrics = grpo_step(tiny.copy_tree(s0), poisoned, reference)
    assert float(metrics["update_refused"]) == 1.0
    assert not np.isfinite(float(metrics["loss"]))
    assert tiny.leaves_equal(state.params, before.params), "a refused update changed the weights"
    assert tiny.leaves_equal(state.opt_state, before.opt_state)
    assert int(state.step) == 1 and int(state.n_refused) == 1
    # The next clean batch trains normally, with the warmup schedule not advanced by the refusal.
    state, metrics = grpo_step(state, tiny.grpo_batch(step=1), reference)
    assert float(metrics["update_refused"]) == 0.0
    assert float(metrics["lr"]) == pytest.approx(1.5e-3)
    assert int(state.step) == 2 and int(state.n_refused) == 1
    assert not tiny.leaves_equal(state.params, before.params)


def _grouped(g: int) -> dict:
    """tiny.grpo_batch as rollout rows: the G samples of a prompt share its columns."""
    batch = tiny.grpo_batch(group=g)
    for k in ("tokens", "valid"):
        batch[k][:, : tiny.PROMPT] = np.repeat(batch[k][::g, : tiny.PROMPT], g, axis=0)
    batch["prompt_mask"] = batch["valid"][:, : tiny.PROMPT].copy()
    rng = np.random.default_rng(7)  # sampler log-probs near the policy's: the ratio is not 1
    batch["old_logp"] = np.where(batch["response_mask"], -4.2 + 0.1 * rng.normal(size=(8, 16)), 0)
    batch["old_logp"] = batch["old_logp"].astype(np.float32)
    return batch


@pytest.mark.parametrize("n_micro", [1, 2])
def test_packed_step_equals_whole_rows(policy, reference, n_micro):
    """One packed row a group (pack_group=G, `rl.packing`) gives the loss, gradients and
    metrics of running every row whole, with and without micro-batches; pad_frac counts the
    packed positions."""
    setup, s0 = policy
    g = 2
    rows = _grouped(g)
    cfg = dict(n_micro=n_micro, kl_beta=0.05, group_size=g)
    whole_cfg, packed_cfg = tiny.grpo_config(**cfg), tiny.grpo_config(shared_prompt=True, **cfg)
    assert packed_cfg.pack_group == g
    packed = batches.pack_step_groups(rows, g)
    l1, g1, m1 = steps.make_grpo_step(setup, whole_cfg, grads_only=True)(
        s0, tiny.with_reference(setup, whole_cfg, rows, reference)
    )
    l2, g2, m2 = steps.make_grpo_step(setup, packed_cfg, grads_only=True)(
        s0, tiny.with_reference(setup, packed_cfg, packed, reference)
    )
    assert float(l1) != 0.0 and float(m1["clip_frac"]) > 0
    assert float(l2) == pytest.approx(float(l1), abs=1e-6)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    same = ("entropy", "n_tokens", "clip_frac", "kl", "pg_loss", "ratio_mean", "approx_kl")
    for key in same + ("dual_clip_frac", "response_length", "response_length_max"):
        assert float(m2[key]) == pytest.approx(float(m1[key]), abs=1e-6), key
    real = rows["valid"][::g, : tiny.PROMPT].sum() + rows["response_mask"].sum()
    assert float(m2["pad_frac"]) == pytest.approx(1 - real / packed["valid"].size)


def test_to_micro_interleaves_rows_and_from_micro_undoes_it():
    rows = jnp.arange(12).reshape(12, 1)
    micro = update.to_micro({"x": rows}, 3)["x"]
    np.testing.assert_array_equal(micro[..., 0], [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]])
    np.testing.assert_array_equal(update.from_micro(micro), rows)


def test_packed_update_refuses_row_layout_and_sequence_means(policy):
    setup, s0 = policy
    # A packed update on row-layout rows: a named error before any compute.
    cfg = tiny.grpo_config(shared_prompt=True, group_size=2, kl_beta=0.0)
    with pytest.raises(ValueError, match="lacks fields"):
        steps.make_grpo_step(setup, cfg).trace(s0, tiny.grpo_batch())
    with pytest.raises(ValueError, match="only 'token_mean'"):
        dataclasses.replace(cfg, aggregation="seq_mean_token_mean")


def test_grpo_config_reads_the_train_section():
    config = tiny.config("runlocal,algo=grpo")
    config.train.update(clip_eps=0.3, kl_beta=0.01, kl_estimator="k2", temperature=0.7)
    config.train.update(n_micro=2, group_size=3)
    cfg = grpo.GRPOConfig.from_config(config)
    got = {k: getattr(cfg, k) for k in ("clip_eps", "kl_beta", "kl_estimator", "temperature")}
    assert got == {"clip_eps": 0.3, "kl_beta": 0.01, "kl_estimator": "k2", "temperature": 0.7}
    assert (cfg.n_micro, cfg.pack_group) == (2, 3)
    config.train.shared_prompt = False
    assert grpo.GRPOConfig.from_config(config).pack_group == 1
    for key, bad in (("kl_estimator", "k4"), ("temperature", 0.0)):
        broken = tiny.config("runlocal,algo=grpo", **{key: bad})
        with pytest.raises(ValueError, match=rf"train\.{key}"):
            grpo.GRPOConfig.from_config(broken)
