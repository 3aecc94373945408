"""Turning next-token logits into a token and the log-probability the RL update needs.

The order follows HF transformers' warpers: divide by the temperature, keep the top-k logits, then
keep the nucleus (the smallest highest-probability set whose mass reaches `top_p`, measured on the
distribution left after top-k). Tokens are drawn from that filtered distribution, but the returned
log-probability is always taken under the full temperature-scaled distribution
``log_softmax(logits / T)``: that is what the trainer recomputes, so the PPO/GRPO ratio of an
unchanged policy is exactly one. For greedy decoding (T = 0) it is ``log_softmax(logits)``.

`top_k` is a static Python int (changing it recompiles); the temperature and `top_p` are traced
scalars, so changing them between calls does not.

Everything here runs once per decode step on [B, V] logits, so it avoids sorts and [B, V] random
draws. On XLA:CPU at [32, 4096], a sort or `lax.top_k` took ~35 ms where the bisections below
take ~1 ms, `jax.random.categorical` ~2.5 ms where the two-level inverse CDF takes ~0.1 ms, and
`jnp.argmax` ~0.6 ms where a max and a min take ~0.1 ms.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

_SEARCH_STEPS = 32  # bisection steps over a 32-bit key: enough to pin down one exact value


def _first_true(x_BN: jax.Array) -> jax.Array:
    """Index [B] of the first True of each row, or N where there is none."""
    n = x_BN.shape[-1]
    return jnp.min(jnp.where(x_BN, jnp.arange(n, dtype=jnp.int32), n), axis=-1)


def _last_true(x_BN: jax.Array) -> jax.Array:
    """Index [B] of the last True of each row (0 where there is none)."""
    return jnp.max(jnp.where(x_BN, jnp.arange(x_BN.shape[-1], dtype=jnp.int32), 0), axis=-1)


def _sortable_key(x_BV: jax.Array) -> jax.Array:
    """uint32 keys ordered like the float32 values (IEEE bits, negatives flipped)."""
    bits = jax.lax.bitcast_convert_type(x_BV.astype(jnp.float32), jnp.uint32)
    return jnp.where(bits >> 31 == 1, ~bits, bits | jnp.uint32(0x80000000))


def _largest_key_reaching(keys_BV: jax.Array, weights_BV: jax.Array, target) -> jax.Array:
    """The largest key t [B, 1] with sum(weights where keys >= t) >= target, by bisection.

    This finds the k-th largest value (weights 1, target k) or the nucleus boundary (weights =
    probabilities, target p) in 32 passes of compare-and-sum instead of a sort of the vocabulary.
    Requires sum(weights) >= target, which holds at t = 0.
    """

    def step(_, bounds):
        lo_B1, hi_B1 = bounds  # invariant: lo reaches the target, hi does not
        mid_B1 = lo_B1 + (hi_B1 - lo_B1) // 2
        mass_B1 = jnp.sum(jnp.where(keys_BV >= mid_B1, weights_BV, 0.0), axis=-1, keepdims=True)
        ok_B1 = mass_B1 >= target
        return jnp.where(ok_B1, mid_B1, lo_B1), jnp.where(ok_B1, hi_B1, mid_B1)

    lo_B1 = jnp.zeros(keys_BV.shape[:-1] + (1,), jnp.uint32)
    hi_B1 = jnp.max(keys_BV, axis=-1, keepdims=True) + 1
    return jax.lax.fori_loop(0, _SEARCH_STEPS, step, (lo_B1, hi_B1))[0]


def top_k_mask(logits_BV: jax.Array, top_k: int) -> jax.Array:
    """Which tokens [B, V] bool are among the k largest logits of their row.

    Ties with the k-th value are kept, as HF does, so a row may keep more than k tokens.
    """
    keys_BV = _sortable_key(logits_BV)
    kth_B1 = _largest_key_reaching(keys_BV, jnp.ones(keys_BV.shape, jnp.float32), top_k)
    return keys_BV >= kth_B1


def top_p_mask(probs_BV: jax.Array, top_p: jax.Array | float) -> jax.Array:
    """Which tokens [B, V] bool are in the nucleus of mass `top_p` (0 < top_p <= 1).

    The nucleus is the shortest run of most likely tokens whose probability reaches `top_p` (so
    the most likely token is always in it); tokens tied with its least likely member are kept.

    Args:
      probs_BV: normalised probabilities (zero for tokens already filtered out).
      top_p: the nucleus mass, a traced or Python scalar.
    """
    top_p = jnp.asarray(top_p, jnp.float32)
    # Non-negative float32 values are ordered like their bit patterns.
    keys_BV = jax.lax.bitcast_convert_type(probs_BV.astype(jnp.float32), jnp.uint32)
    boundary_B1 = _largest_key_reaching(keys_BV, probs_BV, top_p)
    # At top_p >= 1 everything is kept, even where float32 rounding leaves the total below 1.
    return (keys_BV >= boundary_B1) | (top_p >= 1.0)


def filter_logits(
    scaled_BV: jax.Array, top_k: int | None, top_p: jax.Array | float | None
) -> jax.Array:
    """Sets logits outside the top-k, then outside the nucleus of what is left, to -inf."""
    if top_k is not None:
        scaled_BV = jnp.where(top_k_mask(scaled_BV, top_k), scaled_BV, -jnp.inf)
    if top_p is not None:
        probs_BV = jax.nn.softmax(scaled_BV.astype(jnp.float32), axis=-1)
        scaled_BV = jnp.where(top_p_mask(probs_BV, top_p), scaled_BV, -jnp.inf)
    return scaled_BV


def uniforms(key: jax.Array, b: int) -> jax.Array:
    """One uniform number in [0, 1) per row [B, 1]: from one key (drawn together), or from a
    [B] batch of keys, one each, so that a row's draw depends on its own key only."""
    if key.ndim == 0:
        return jax.random.uniform(key, (b, 1))
    if key.shape != (b,):
        raise ValueError(f"expected one PRNG key or {b} of them, got keys of shape {key.shape}")
    return jax.vmap(lambda k: jax.random.uniform(k, ()))(key)[:, None]


def sample_from_weights(key: jax.Array, weights_BV: jax.Array) -> jax.Array:
    """Draws one token [B] int32 per row with probability proportional to `weights_BV` (>= 0).

    `key` is one PRNG key, or [B] keys (one per row: `uniforms`).

    Inverts the CDF in two levels: pick a block of ~sqrt(V) tokens from the block totals, then a
    token inside it. One uniform number per row and two short cumulative sums replace both the
    [B, V] Gumbel noise of `jax.random.categorical` and a flat cumsum over V; the block totals
    also keep float32 rounding small. Zero-weight tokens are never drawn.
    """
    b, v = weights_BV.shape
    width = 1 << math.ceil(math.log2(math.sqrt(v)))
    blocks = -(-v // width)
    w_BNC = jnp.pad(weights_BV, ((0, 0), (0, blocks * width - v))).reshape(b, blocks, width)
    total_BN = jnp.sum(w_BNC, axis=-1)
    upto_BN = jnp.cumsum(total_BN, axis=-1)
    u_B1 = uniforms(key, b) * upto_BN[:, -1:]
    # Requiring a positive weight guards against sums creeping past u over empty stretches.
    block_B = _first_true((upto_BN > u_B1) & (total_BN > 0))
    block_B = jnp.where(block_B == blocks, _last_true(total_BN > 0), block_B)
    inner_BC = jnp.take_along_axis(w_BNC, block_B[:, None, None], axis=1)[:, 0]
    before_B1 = jnp.take_along_axis(upto_BN - total_BN, block_B[:, None], axis=1)
    inner_cdf_BC = jnp.cumsum(inner_BC, axis=-1)
    slot_B = _first_true((inner_cdf_BC > u_B1 - before_B1) & (inner_BC > 0))
    slot_B = jnp.where(slot_B == width, _last_true(inner_BC > 0), slot_B)
    return block_B * width + slot_B


def choose_tokens(
    logits_BV: jax.Array,
    key: jax.Array,
    *,
    greedy: bool,
    temperature: jax.Array | float = 1.0,
    top_k: int | None = None,
    top_p: jax.Array | float | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Picks the next token of every row and its log-probability.

    Args:
      logits_BV: float32 logits [B, V] of the next position.
      key: PRNG key for this step, or [B] keys, one per row (unused when greedy).
      greedy: argmax decoding (static); temperature, top_k and top_p are then ignored.
      temperature: T > 0 (traced scalar allowed).
      top_k: static number of candidates kept, or None.
      top_p: nucleus mass (traced scalar allowed), or None for no nucleus filtering.
    Returns:
      tokens [B] int32 and their log-probabilities [B] float32 under log_softmax(logits / T)
      (log_softmax(logits) when greedy).
    """
    scaled_BV = logits_BV.astype(jnp.float32)
    if not greedy:
        scaled_BV = scaled_BV / jnp.asarray(temperature, jnp.float32)
    # One max and one exp pass serve the argmax, the sampling weights and the log-normaliser
    # (top-k and top-p always keep the maximum, so the filtered weights share it).
    max_B1 = jnp.max(scaled_BV, axis=-1, keepdims=True)
    exp_BV = jnp.exp(scaled_BV - max_B1)
    log_norm_B = max_B1[:, 0] + jnp.log(jnp.sum(exp_BV, axis=-1))
    if greedy:
        token_B = _first_true(scaled_BV == max_B1)
    else:
        keep_BV = None if top_k is None else top_k_mask(scaled_BV, top_k)
        if top_p is not None:
            kept_BV = exp_BV if keep_BV is None else jnp.where(keep_BV, exp_BV, 0.0)
            probs_BV = kept_BV / jnp.sum(kept_BV, axis=-1, keepdims=True)
            nucleus_BV = top_p_mask(probs_BV, top_p)
            keep_BV = nucleus_BV if keep_BV is None else keep_BV & nucleus_BV
        weights_BV = exp_BV if keep_BV is None else jnp.where(keep_BV, exp_BV, 0.0)
        token_B = sample_from_weights(key, weights_BV)
    taken_B = jnp.take_along_axis(scaled_BV, token_B[:, None], axis=-1)[:, 0]
    return token_B, taken_B - log_norm_B
