"""The SFT step: it learns, and gradient accumulation is exact."""

import jax
import numpy as np
import pytest

from memr1.train import sft
from tests.train import tiny


def test_three_sft_steps_lower_the_loss_on_a_fixed_batch(policy, sft_step):
    setup, s0 = policy
    batch = tiny.sft_batch()
    state = tiny.copy_tree(s0)
    history = []
    for _ in range(4):  # the 4th call reports the loss after 3 updates
        state, metrics = sft_step(state, batch)
        history.append(jax.device_get(metrics))
    losses = [float(m["loss"]) for m in history]
    assert losses[3] < losses[0] - 0.05, f"3 SFT updates did not lower the loss: {losses}"
    assert all(np.diff(losses) < 0), f"the loss on a fixed batch should fall each step: {losses}"
    assert [float(m["update_refused"]) for m in history] == [0.0] * 4
    # Warmup over 2 updates: the first one already moves at half the peak rate.
    np.testing.assert_allclose([float(m["lr"]) for m in history], [1.5e-3, 3e-3, 3e-3, 3e-3])
    assert float(history[0]["n_tokens"]) == batch["loss_mask"].sum()
    assert int(state.step) == 4 and int(state.n_refused) == 0
    # The first reported loss is the mean NLL of the initial model over the target tokens only.
    expected = float(sft.eval_sft_loss(setup, s0.params, batch, chunk=tiny.CHUNK))
    assert losses[0] == pytest.approx(expected, rel=1e-5)


def test_gradient_accumulation_equals_one_full_batch(policy):
    """4 micro-batches of unequal token counts give the full-batch token-mean loss and grads.

    A per-micro-batch normalisation (mean of means) would give a different loss here, because
    the synthetic targets have 3 to 10 tokens.
    """
    setup, s0 = policy
    batch = tiny.sft_batch(step=1)
    full = sft.make_sft_step(setup, tiny.sft_config(n_micro=1), grads_only=True)
    micro = sft.make_sft_step(setup, tiny.sft_config(n_micro=4), grads_only=True)
    loss_full, grads_full, _ = full(s0, batch)
    loss_micro, grads_micro, _ = micro(s0, batch)
    assert float(loss_micro) == pytest.approx(float(loss_full), rel=1e-6)
    for g_full, g_micro in zip(
        jax.tree.leaves(grads_full), jax.tree.leaves(grads_micro), strict=True
    ):
        np.testing.assert_allclose(np.asarray(g_micro), np.asarray(g_full), rtol=1e-4, atol=1e-7)
    assert max(float(np.abs(g).max()) for g in jax.tree.leaves(grads_full)) > 1e-3


def test_sft_batch_masks_only_the_target():
    b = sft.sft_batch([[5, 6, 7]], [[8, 9]], length=8)
    np.testing.assert_array_equal(b["tokens"][0], [5, 6, 7, 8, 9, 0, 0, 0])
    np.testing.assert_array_equal(b["valid"][0], [1, 1, 1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(b["loss_mask"][0], [0, 0, 0, 1, 1, 0, 0, 0])
    with pytest.raises(ValueError, match="SFT row 0"):
        sft.sft_batch([[1, 2, 3]], [[4, 5]], length=4)


def test_batch_that_does_not_split_into_micro_batches_fails_before_compute(policy, sft_step):
    setup, s0 = policy
    batch = {k: v[:6] for k, v in tiny.sft_batch().items()}  # 6 rows, 2 micro-batches of 3: ok
    bad = {k: v[:5] for k, v in tiny.sft_batch().items()}
    with pytest.raises(ValueError, match="5 rows cannot be split into 2 micro-batches"):
        sft_step.trace(s0, bad)
    with pytest.raises(ValueError, match="lacks fields"):
        sft_step.trace(s0, {"tokens": batch["tokens"], "valid": batch["valid"]})
