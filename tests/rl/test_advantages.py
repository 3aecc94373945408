"""GRPO group advantages and GAE against hand-computed values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memr1.rl import advantages


def test_grpo_advantages_hand_computed_ddof1():
    rewards_BG = jnp.array([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    adv, stats = advantages.grpo_advantages(rewards_BG, ddof=1, eps=0.0)
    # Group 0: mean 0.5, sample std (ddof=1) = sqrt(1/3) = 0.57735.
    expected0 = np.array([0.5, -0.5, -0.5, 0.5]) / np.sqrt(1 / 3)
    np.testing.assert_allclose(adv[0], expected0, rtol=1e-6)
    # Group 1 has no signal: all-equal rewards give exactly zero advantage, never NaN.
    np.testing.assert_array_equal(adv[1], np.zeros(4))
    assert float(stats["zero_signal_frac"]) == pytest.approx(0.5)


# Constant groups whose float32 mean is not exactly the common value (the reward is a mean over
# linked questions, e.g. 1/3), so centring leaves rounding residue of about 1e-8 that a z-score
# blows up to advantages of 0.01-0.06.
CONSTANT_GROUPS = [(v, g) for v in (1 / 3, 1 / 5, 3 / 4, 2 / 3, 0.3, 0.7) for g in (7, 8, 12)]


# As `batches.pack_rollout` calls it (numpy rewards, eager) and inside a jitted program.
@pytest.mark.parametrize("as_numpy, jitted", [(True, False), (False, True)])
def test_constant_groups_of_fractional_rewards_carry_no_signal(as_numpy, jitted):
    fn = jax.jit(advantages.grpo_advantages) if jitted else advantages.grpo_advantages
    for value, g in CONSTANT_GROUPS:
        # Two groups: the constant one and one with a spread (which must keep its signal).
        rewards = np.array([[value] * g, [value] * (g - 1) + [1.0]], np.float32)
        adv, stats = fn(rewards if as_numpy else jnp.asarray(rewards))
        np.testing.assert_array_equal(np.asarray(adv[0]), np.zeros(g), err_msg=f"{value} x {g}")
        assert float(stats["zero_signal_frac"]) == 0.5, (value, g)
        assert np.all(np.asarray(adv[1]) != 0)


def test_reward_spread_is_max_minus_min_for_numpy_and_jax():
    for value, g in CONSTANT_GROUPS:
        rewards = np.array([[value] * g, [value] * (g - 1) + [1.0]], np.float32)
        for x in (rewards, jnp.asarray(rewards)):
            np.testing.assert_array_equal(advantages.has_reward_spread(x), [False, True])


def test_grpo_advantages_ddof0_differs_from_ddof1():
    rewards_BG = jnp.array([[1.0, 0.0]])
    adv0, _ = advantages.grpo_advantages(rewards_BG, ddof=0, eps=0.0)
    adv1, _ = advantages.grpo_advantages(rewards_BG, ddof=1, eps=0.0)
    np.testing.assert_allclose(adv0[0], [1.0, -1.0], rtol=1e-6)  # population std 0.5
    np.testing.assert_allclose(adv1[0], [0.5 / np.sqrt(0.5), -0.5 / np.sqrt(0.5)], rtol=1e-6)


def test_grpo_eps_keeps_near_constant_groups_finite():
    rewards_BG = jnp.array([[1.0, 1.0, 1.0 + 1e-9]])
    adv, _ = advantages.grpo_advantages(rewards_BG, ddof=1, eps=1e-6)
    assert np.all(np.isfinite(np.asarray(adv)))


def test_gae_hand_computed():
    # One sequence of 3 tokens, reward only at the end, gamma=1, lambda=0.5.
    rewards = jnp.array([[0.0, 0.0, 1.0]])
    values = jnp.array([[0.2, 0.4, 0.6]])
    mask = jnp.ones((1, 3))
    adv, ret = advantages.gae(rewards, values, mask, gamma=1.0, lam=0.5)
    # deltas: d2 = 1 - 0.6 = 0.4 ; d1 = 0 + 0.6 - 0.4 = 0.2 ; d0 = 0 + 0.4 - 0.2 = 0.2
    # A2 = 0.4 ; A1 = 0.2 + 0.5*0.4 = 0.4 ; A0 = 0.2 + 0.5*0.4 = 0.4
    np.testing.assert_allclose(adv[0], [0.4, 0.4, 0.4], rtol=1e-6)
    np.testing.assert_allclose(ret[0], [0.6, 0.8, 1.0], rtol=1e-6)


def test_gae_respects_padding_and_gamma():
    # Second row is right-padded after 2 tokens: padding must not leak value into real tokens.
    rewards = jnp.array([[0.0, 1.0, 0.0], [0.0, 2.0, 0.0]])
    values = jnp.array([[0.5, 0.5, 9.0], [0.5, 0.5, 9.0]])
    mask = jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    adv, _ = advantages.gae(rewards, values, mask, gamma=0.9, lam=1.0)
    # Row 0: d1 = 1 - 0.5 = 0.5 ; d0 = 0.9*0.5 - 0.5 = -0.05 ; A0 = -0.05 + 0.9*0.5 = 0.4
    np.testing.assert_allclose(adv[0, :2], [0.4, 0.5], rtol=1e-6)
    np.testing.assert_allclose(adv[1, :2], [0.4 + 0.9, 1.5], rtol=1e-6)
    np.testing.assert_array_equal(adv[:, 2], [0.0, 0.0])


def test_whiten_masked():
    x = jnp.array([[1.0, 2.0, 3.0, 100.0]])
    mask = jnp.array([[1.0, 1.0, 1.0, 0.0]])
    w = advantages.whiten(x, mask)
    real = np.asarray(w[0, :3])
    assert abs(real.mean()) < 1e-6
    np.testing.assert_allclose(real.std(), 1.0, rtol=1e-4)
    assert float(w[0, 3]) == 0.0
