"""Advantage estimators: GRPO group z-scores, GAE for PPO, and masked whitening."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def has_reward_spread(rewards_BG):
    """[B] bool: True for the groups whose G rewards are not all equal (max - min > 0).

    The one test of "this group carries a learning signal", for jax and numpy arrays alike.
    It compares the rewards themselves, never their centred values: the float32 mean of G
    equal rewards such as 1/3 need not equal them, and z-scoring that rounding residue would
    turn a constant group into advantages of a few hundredths.
    """
    return (rewards_BG.max(axis=-1) - rewards_BG.min(axis=-1)) > 0


def grpo_advantages(
    rewards_BG: jax.Array, *, ddof: int = 1, eps: float = 1e-6
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Group-normalised advantages A_i = (r_i - mean r) / (std r + eps) per group of G samples.

    The std uses `ddof` (1 = sample std, as TRL and Tunix; 0 = population std). A group whose
    rewards are all equal (`has_reward_spread` False) carries no learning signal: its advantages
    are exactly zero (never NaN) and the share of such groups is returned as `zero_signal_frac`.

    Args:
      rewards_BG: scalar reward of each of G samples for B states.
    Returns:
      advantages [B, G] and a dict of statistics.
    """
    rewards_BG = rewards_BG.astype(jnp.float32)
    g = rewards_BG.shape[-1]
    mean_B1 = rewards_BG.mean(axis=-1, keepdims=True)
    centred = rewards_BG - mean_B1
    denom = max(g - ddof, 1)
    std_B1 = jnp.sqrt(jnp.sum(centred**2, axis=-1, keepdims=True) / denom)
    no_signal_B1 = ~has_reward_spread(rewards_BG)[:, None]
    adv = jnp.where(no_signal_B1, 0.0, centred / jnp.where(no_signal_B1, 1.0, std_B1 + eps))
    stats = {
        "zero_signal_frac": no_signal_B1.mean(),
        "reward_mean": rewards_BG.mean(),
        "reward_std_within_group": std_B1.mean(),
    }
    return adv, stats


def gae(
    rewards_BT: jax.Array,
    values_BT: jax.Array,
    mask_BT: jax.Array,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation over right-padded token sequences (a reverse scan).

    The step after a sequence's last real token is terminal (value 0), and padded positions get
    zero advantage, so padding never leaks value into real tokens.

    Returns:
      (advantages [B, T], returns [B, T]) with returns = advantages + values on real tokens.
    """
    mask = mask_BT.astype(jnp.float32)
    values = values_BT.astype(jnp.float32) * mask
    next_values = jnp.concatenate([values[:, 1:], jnp.zeros_like(values[:, :1])], axis=1)
    next_mask = jnp.concatenate([mask[:, 1:], jnp.zeros_like(mask[:, :1])], axis=1)
    deltas = rewards_BT.astype(jnp.float32) + gamma * next_values - values

    def step(carry_B, xs):
        delta_B, next_mask_B, mask_B = xs
        adv_B = (delta_B + gamma * lam * next_mask_B * carry_B) * mask_B
        return adv_B, adv_B

    xs = (deltas.T, next_mask.T, mask.T)  # scan over time, reversed
    _, adv_TB = jax.lax.scan(step, jnp.zeros(mask.shape[0]), xs, reverse=True)
    adv = adv_TB.T
    return adv, (adv + values) * mask


def whiten(x_BT: jax.Array, mask_BT: jax.Array, eps: float = 1e-8) -> jax.Array:
    """Zero-mean, unit-variance over the real (masked-in) entries; padded entries become 0."""
    mask = mask_BT.astype(jnp.float32)
    n = jnp.maximum(mask.sum(), 1.0)
    mean = (x_BT * mask).sum() / n
    var = (((x_BT - mean) * mask) ** 2).sum() / n
    return (x_BT - mean) * jax.lax.rsqrt(var + eps) * mask
