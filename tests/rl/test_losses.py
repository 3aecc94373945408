"""The clipped policy loss, KL estimators and value loss against hand computations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memr1.rl import losses

EPS = 0.2


def _loss_one_token(ratio, adv, **kw):
    logp = jnp.log(jnp.array([[ratio]]))
    old = jnp.zeros((1, 1))
    out, metrics = losses.policy_loss(
        logp, old, jnp.array([[adv]]), jnp.ones((1, 1)), clip_eps=EPS, **kw
    )
    return float(out), metrics


@pytest.mark.parametrize(
    "ratio,adv,expected",
    [
        # A > 0: the gain is capped at (1+eps)*A once the ratio exceeds 1+eps ...
        (1.5, 1.0, -1.2),
        # ... but a ratio below 1-eps is not clipped (min picks the unclipped, smaller product).
        (0.5, 1.0, -0.5),
        # A < 0: a ratio above 1+eps keeps the full (larger) penalty r*A: min(-1.5, -1.2) = -1.5.
        (1.5, -1.0, 1.5),
        # A < 0 and ratio below 1-eps: clipped to (1-eps)*A = -0.8 → loss 0.8.
        (0.5, -1.0, 0.8),
        # Inside the trust region nothing is clipped.
        (1.1, 2.0, -2.2),
    ],
)
def test_clip_signs(ratio, adv, expected):
    loss, _ = _loss_one_token(ratio, adv)
    assert loss == pytest.approx(expected, rel=1e-5)


def test_dual_clip_bounds_negative_advantage_loss():
    loss, _ = _loss_one_token(10.0, -1.0, dual_clip=3.0)
    assert loss == pytest.approx(3.0, rel=1e-5)  # min(10, 3) * |A|
    loss_pos, _ = _loss_one_token(10.0, 1.0, dual_clip=3.0)
    assert loss_pos == pytest.approx(-1.2, rel=1e-5)  # dual clip only touches A < 0


def test_clip_fraction_metric():
    logp = jnp.log(jnp.array([[1.5, 1.0, 0.5, 1.0]]))
    _, m = losses.policy_loss(
        logp, jnp.zeros((1, 4)), jnp.ones((1, 4)), jnp.ones((1, 4)), clip_eps=EPS
    )
    # Only the first token is actually clipped (A>0, r>1+eps); r<1-eps with A>0 is not.
    assert float(m["clip_frac"]) == pytest.approx(0.25)


def test_token_mean_vs_sequence_mean_aggregation():
    per_token = jnp.array([[1.0, 1.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0]])
    mask = jnp.array([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    # Token mean over the batch: (4 + 4) / 5.
    assert float(losses.aggregate(per_token, mask, "token_mean")) == pytest.approx(8 / 5)
    # Sequence mean of token means: (1 + 4) / 2.
    assert float(losses.aggregate(per_token, mask, "seq_mean_token_mean")) == pytest.approx(2.5)
    # An explicit global token count (gradient accumulation) replaces the local one.
    agg = losses.aggregate(per_token, mask, "token_mean", num_tokens=10.0)
    assert float(agg) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="aggregation"):
        losses.aggregate(per_token, mask, "nope")


def test_kl_estimators_hand_computed():
    logp = jnp.array([[np.log(0.5)]])
    ref = jnp.array([[np.log(0.25)]])
    d = np.log(0.25) - np.log(0.5)  # ref - logp
    assert float(losses.kl_penalty(logp, ref, "k1")[0, 0]) == pytest.approx(-d)
    assert float(losses.kl_penalty(logp, ref, "k2")[0, 0]) == pytest.approx(0.5 * d * d)
    assert float(losses.kl_penalty(logp, ref, "k3")[0, 0]) == pytest.approx(np.exp(d) - d - 1)
    with pytest.raises(ValueError, match="KL estimator"):
        losses.kl_penalty(logp, ref, "k9")


def test_k3_gradient_pulls_towards_reference():
    # The k3 penalty's gradient is non-zero on-policy, unlike k1's expectation.
    ref = jnp.log(jnp.array([[0.25]]))
    grad = jax.grad(lambda lp: losses.kl_penalty(lp, ref, "k3").sum())(jnp.log(jnp.array([[0.5]])))
    assert float(grad[0, 0]) > 0  # lowering logp towards ref lowers the penalty


def test_value_loss_clipped():
    values = jnp.array([[2.0]])
    old_values = jnp.array([[1.0]])
    returns = jnp.array([[3.0]])
    loss, m = losses.value_loss(values, old_values, returns, jnp.ones((1, 1)), clip_eps=0.2)
    # Unclipped error (2-3)^2 = 1; clipped value 1.2 → (1.2-3)^2 = 3.24; max → 3.24, times 0.5.
    assert float(loss) == pytest.approx(0.5 * 3.24)
    assert float(m["vf_clip_frac"]) == pytest.approx(1.0)


def test_approx_kl_is_k3_of_kl_old_to_new_on_old_samples():
    """r = p_new / p_old on tokens drawn from the old policy; KL(old‖new) = E_old[-log r] and
    its k3 estimate is (r - 1) - log r (E_old[r] = 1 makes it unbiased)."""
    # One token with r = 2: 2 - 1 - log 2.
    _, m = losses.policy_loss(
        jnp.log(jnp.array([[0.8]])), jnp.log(jnp.array([[0.4]])), jnp.ones((1, 1)), jnp.ones((1, 1))
    )
    assert float(m["approx_kl"]) == pytest.approx(1.0 - np.log(2.0), rel=1e-6)  # 0.306853
    # Old (½, ½), new (0.8, 0.2) over a 2-token vocabulary, each token drawn once (its exact
    # frequency under the old policy): the mean of k3 is exactly
    # KL(old‖new) = ½·log(0.5/0.8) + ½·log(0.5/0.2) = 0.223144.
    logp = jnp.log(jnp.array([[0.8, 0.2]]))
    old = jnp.log(jnp.array([[0.5, 0.5]]))
    _, m = losses.policy_loss(logp, old, jnp.ones((1, 2)), jnp.ones((1, 2)))
    kl_old_new = 0.5 * np.log(0.5 / 0.8) + 0.5 * np.log(0.5 / 0.2)
    assert kl_old_new == pytest.approx(0.223144, abs=1e-6)
    assert float(m["approx_kl"]) == pytest.approx(kl_old_new, rel=1e-5)


def test_k3_value_is_clamped_to_ten_as_verl_does():
    """At ref - logp = 3 the unclamped k3 is e³ - 3 - 1 = 16.09 (at 25: 4.85e8); verl clamps the
    value to [-10, 10], so one token the policy finds far less likely than the reference adds at
    most 10, and no gradient flows past the clamp."""
    logp = jnp.zeros((1, 3))
    ref = jnp.array([[3.0, 25.0, 0.5]])
    kl = losses.kl_penalty(logp, ref, "k3")
    np.testing.assert_allclose(np.asarray(kl[0]), [10.0, 10.0, np.exp(0.5) - 1.5], rtol=1e-6)
    # The other direction: logp - ref = 25 → exponent clamped at -20 → e^-20 + 19 → 10.
    assert float(losses.kl_penalty(jnp.array([[25.0]]), jnp.zeros((1, 1)), "k3")[0, 0]) == 10.0
    grad = jax.grad(lambda lp: losses.kl_penalty(lp, ref, "k3").sum())(logp)
    np.testing.assert_allclose(np.asarray(grad[0]), [0.0, 0.0, -(np.exp(0.5) - 1)], rtol=1e-6)


def test_log_ratio_is_clamped_to_twenty_before_exp():
    """A token whose log-ratio is 100 made exp overflow: loss and approx_kl were inf. Clamped to
    ±20 (verl) the ratio is at most e^20 and nothing is infinite, the gradient included."""
    logp, old = jnp.array([[100.0]]), jnp.zeros((1, 1))
    adv, mask = jnp.array([[-1.0]]), jnp.ones((1, 1))
    loss, m = losses.policy_loss(logp, old, adv, mask, clip_eps=EPS)
    assert float(loss) == pytest.approx(np.exp(20.0), rel=1e-5)  # -r·A with r = e^20
    assert np.isfinite(float(m["approx_kl"]))
    grad = jax.grad(lambda lp: losses.policy_loss(lp, old, adv, mask, clip_eps=EPS)[0])(logp)
    assert float(grad[0, 0]) == 0.0  # past the clamp
    # Below the clamp nothing changes: log-ratio 19 gives -r·A = e^19.
    loss19, _ = losses.policy_loss(jnp.array([[19.0]]), old, adv, mask, clip_eps=EPS)
    assert float(loss19) == pytest.approx(np.exp(19.0), rel=1e-5)


def test_dual_clip_metric_counts_bounded_tokens():
    # Ratios 10 (A<0: bounded at 3), 2 (A<0: loss 2 < 3, not bounded), 10 (A>0: untouched).
    logp = jnp.log(jnp.array([[10.0, 2.0, 10.0]]))
    adv = jnp.array([[-1.0, -1.0, 1.0]])
    loss, m = losses.policy_loss(
        logp, jnp.zeros((1, 3)), adv, jnp.ones((1, 3)), clip_eps=EPS, dual_clip=3.0
    )
    assert float(loss) == pytest.approx((3.0 + 2.0 - 1.2) / 3, rel=1e-5)
    assert float(m["dual_clip_frac"]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="dual_clip"):
        _loss_one_token(10.0, -1.0, dual_clip=0.5)


def test_value_clip_fraction_counts_only_values_the_band_moved():
    """V = -0.1350451 lies inside V_old ± 0.5 (V_old = -0.5474873), so clipping leaves it alone
    and vf_clip_frac must be 0. In float32 V_old + (V - V_old) is not V, and with the return
    1.011834 that rounding made the clipped error look larger (counted as clipped; random
    in-band values were over-counted by 1.4%). verl clips V itself."""
    v, old, ret = np.float32(-0.1350451), np.float32(-0.5474873), np.float32(1.011834)
    assert old + (v - old) != v  # the rounding the old form suffered from
    loss, m = losses.value_loss(
        jnp.array([[v]]), jnp.array([[old]]), jnp.array([[ret]]), jnp.ones((1, 1)), clip_eps=0.5
    )
    assert float(m["vf_clip_frac"]) == 0.0
    assert float(loss) == pytest.approx(0.5 * float(v - ret) ** 2, rel=1e-6)


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_dual_clip_is_a_config_setting_on_by_default_as_in_verl(algo):
    from configs import memr1 as memr1_config
    from memr1.rl import grpo, ppo

    settings = {"grpo": grpo.GRPOConfig, "ppo": ppo.PPOConfig}[algo]
    config = memr1_config.get_config(f"runlocal,algo={algo}")
    assert settings.from_config(config).dual_clip == 3.0  # verl's clip_ratio_c, always applied
    config.train.dual_clip = 0.0  # off
    assert settings.from_config(config).dual_clip == 0.0
    config.train.dual_clip = 0.9
    with pytest.raises(ValueError, match=r"train\.dual_clip"):
        settings.from_config(config)
