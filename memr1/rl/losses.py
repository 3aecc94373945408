"""Policy, KL and value losses, with an explicit choice of token aggregation.

Sign conventions follow the PPO paper: the surrogate is -min(r·A, clip(r)·A) for every sign of A
(one public JAX library used max for A < 0, which inverts the trust region).

Every term a single bad token could blow up is bounded as verl's `core_algos` bounds it: the
policy log-ratio is clamped to ±`LOG_RATIO_CLAMP` before `exp`, the loss of a token with A < 0
by `dual_clip`·|A|, the k3 exponent to ±`LOG_RATIO_CLAMP` and the k3 value to ±`K3_CLAMP`, and
the value clip clamps the new value itself into [old − ε, old + ε].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

AGGREGATIONS = ("token_mean", "seq_mean_token_mean")
KL_ESTIMATORS = ("k1", "k2", "k3")
# verl's bounds: e^20 ≈ 4.9e8 is the largest ratio a token can reach; a k3 token adds at most 10.
LOG_RATIO_CLAMP = 20.0
K3_CLAMP = 10.0


def aggregate(
    x_BT: jax.Array,
    mask_BT: jax.Array,
    mode: str = "token_mean",
    *,
    num_tokens: jax.Array | float | None = None,
    num_sequences: jax.Array | float | None = None,
) -> jax.Array:
    """Reduces a per-token quantity to a scalar.

    "token_mean" divides the masked sum by the token count (DAPO-style: every token weighs the
    same); under gradient accumulation pass the GLOBAL token count of the whole batch so the
    micro-batch losses add up to the full-batch loss. "seq_mean_token_mean" averages each
    sequence over its tokens, then averages sequences (pass the global sequence count likewise).
    """
    mask = mask_BT.astype(jnp.float32)
    if mode == "token_mean":
        denom = mask.sum() if num_tokens is None else num_tokens
        return (x_BT * mask).sum() / jnp.maximum(denom, 1.0)
    if mode == "seq_mean_token_mean":
        per_seq = (x_BT * mask).sum(-1) / jnp.maximum(mask.sum(-1), 1.0)
        denom = x_BT.shape[0] if num_sequences is None else num_sequences
        return per_seq.sum() / jnp.maximum(denom, 1.0)
    raise ValueError(f"unknown loss aggregation {mode!r}; expected one of {AGGREGATIONS}")


def policy_loss(
    logp_BT: jax.Array,
    old_logp_BT: jax.Array,
    adv_BT: jax.Array,
    mask_BT: jax.Array,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    dual_clip: float | None = None,
    aggregation: str = "token_mean",
    num_tokens: jax.Array | float | None = None,
    num_sequences: jax.Array | float | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PPO clipped surrogate loss per token, aggregated.

    Args:
      logp_BT: log-probs of the taken tokens under the policy being optimised.
      old_logp_BT: log-probs under the policy that sampled them (no gradient).
      adv_BT: advantages, per token or broadcastable ([B, 1] for sequence-level GRPO).
      clip_eps / clip_eps_high: the ratio is clipped to [1 - clip_eps, 1 + clip_eps_high].
      dual_clip: if set (c > 1; verl always applies c = 3), the loss for A < 0 is bounded by
        c·|A|: a ratio that ran far above 1 + ε on a token with A < 0 stops pushing it down.
    The log-ratio is clamped to ±LOG_RATIO_CLAMP before `exp` (no gradient flows past the
    clamp), so one token whose probability collapsed cannot make the loss overflow.
    """
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip={dual_clip!r} must be > 1 (or None: off)")
    adv = jnp.broadcast_to(adv_BT, logp_BT.shape).astype(jnp.float32)
    log_ratio = logp_BT.astype(jnp.float32) - jax.lax.stop_gradient(old_logp_BT).astype(jnp.float32)
    log_ratio = jnp.clip(log_ratio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = jnp.exp(log_ratio)
    unclipped = -ratio * adv
    clipped = -jnp.clip(ratio, 1.0 - clip_eps, 1.0 + eps_high) * adv
    per_token = jnp.maximum(unclipped, clipped)  # == -min(r·A, clip(r)·A)
    dual_clipped = jnp.zeros_like(per_token, dtype=bool)
    if dual_clip is not None:
        bound = -dual_clip * adv  # = c·|A| where A < 0
        dual_clipped = (adv < 0) & (per_token > bound)
        per_token = jnp.where(adv < 0, jnp.minimum(per_token, bound), per_token)
    loss = aggregate(
        per_token, mask_BT, aggregation, num_tokens=num_tokens, num_sequences=num_sequences
    )
    mask = mask_BT.astype(jnp.float32)
    n = jnp.maximum(mask.sum(), 1.0)
    metrics = {
        "clip_frac": ((clipped > unclipped).astype(jnp.float32) * mask).sum() / n,
        # verl's pg_clipfrac_lower: tokens whose A < 0 loss the dual clip bounded.
        "dual_clip_frac": (dual_clipped.astype(jnp.float32) * mask).sum() / n,
        "ratio_mean": (ratio * mask).sum() / n,
        # How far the update moved: KL(old || new) = E_old[-log r] on tokens sampled from the
        # old policy, estimated by k3 = (r - 1) - log r (unbiased since E_old[r] = 1).
        "approx_kl": ((jnp.expm1(log_ratio) - log_ratio) * mask).sum() / n,
    }
    return loss, metrics


def kl_penalty(logp_BT: jax.Array, ref_logp_BT: jax.Array, estimator: str = "k3") -> jax.Array:
    """Per-token estimate of KL(policy || reference) from sampled tokens.

    k1 = logp - ref (unbiased, but its expected gradient on-policy is zero, so as a loss it does
    almost nothing); k2 = ½(logp - ref)²; k3 = exp(ref - logp) - (ref - logp) - 1 (unbiased,
    non-negative, low variance: the default). k3 is bounded as verl bounds it (exponent clamped
    to ±LOG_RATIO_CLAMP, value to ±K3_CLAMP; no gradient flows past either clamp).
    """
    log_ratio = ref_logp_BT.astype(jnp.float32) - logp_BT.astype(jnp.float32)
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        # exp(ref - logp) overflows where the policy finds a token far LESS likely than the
        # reference does: clamp the exponent, then the value (at ref - logp = 3 a token would
        # already add 16.1; at 25, 4.85e8 with gradients up to 1.7e7).
        log_ratio = jnp.clip(log_ratio, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return jnp.clip(jnp.exp(log_ratio) - log_ratio - 1.0, -K3_CLAMP, K3_CLAMP)
    raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {KL_ESTIMATORS}")


def kl_to_reference(
    mb: dict,
    logp_BT: jax.Array,
    mask_BT: jax.Array,
    *,
    beta: float,
    estimator: str,
    aggregation: str,
    n_tokens: jax.Array,
    n_seqs: jax.Array,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """β·KL term of a micro-batch (globally normalised) and its metric; zero if β = 0.

    The reference's log-probs are the batch's `ref_logp`, scored once per rollout by the
    policy's own log-prob function on the reference weights (`memr1.train.steps`).
    """
    if beta == 0.0:
        return jnp.zeros((), jnp.float32), {}
    kl_BT = kl_penalty(logp_BT, jax.lax.stop_gradient(mb["ref_logp"]), estimator)
    kl = aggregate(kl_BT, mask_BT, aggregation, num_tokens=n_tokens, num_sequences=n_seqs)
    return beta * kl, {"kl": kl}


def check_reference(parts, algo: str, beta: float, source: str) -> None:
    """Refuses (at trace time) a batch part without the `ref_logp` a KL β > 0 reads."""
    for batch in parts:
        if beta != 0.0 and "ref_logp" not in batch:
            raise ValueError(
                f"{algo} with kl_beta={beta} (train.kl_beta) needs the batch field 'ref_logp' "
                f"({source}); the batch has {sorted(batch)}"
            )


def value_loss(
    values_BT: jax.Array,
    old_values_BT: jax.Array,
    returns_BT: jax.Array,
    mask_BT: jax.Array,
    *,
    clip_eps: float = 0.2,
    aggregation: str = "token_mean",
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Clipped value loss ½·max((V - R)², (clip(V, V_old ± ε) - R)²), aggregated.

    V itself is clipped into [V_old − ε, V_old + ε] (verl's convention): inside the band the
    clipped value is exactly V, so `vf_clip_frac` counts only values the band moved (the form
    V_old + clip(V − V_old, ±ε) rounds inside the band and over-counts).
    """
    values = values_BT.astype(jnp.float32)
    old = jax.lax.stop_gradient(old_values_BT).astype(jnp.float32)
    clipped_values = jnp.clip(values, old - clip_eps, old + clip_eps)
    err = (values - returns_BT) ** 2
    err_clipped = (clipped_values - returns_BT) ** 2
    per_token = 0.5 * jnp.maximum(err, err_clipped)
    mask = mask_BT.astype(jnp.float32)
    n = jnp.maximum(mask.sum(), 1.0)
    metrics = {"vf_clip_frac": ((err_clipped > err).astype(jnp.float32) * mask).sum() / n}
    return aggregate(per_token, mask_BT, aggregation), metrics


def masked_mean(x_BT: jax.Array, mask_BT: jax.Array, denom: jax.Array) -> jax.Array:
    """sum(x · mask) / denom, the building block of globally normalised metrics."""
    return (x_BT * mask_BT.astype(jnp.float32)).sum() / jnp.maximum(denom, 1.0)
