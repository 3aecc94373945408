"""What an update logs beside its loss: token-weighted policy metrics, reply lengths, padding.

Every metric of a micro-batch is scaled so that the sum over the update's micro-batches (which
`memr1.train.update.accumulate` takes) is the full batch's value.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from memr1.rl.losses import masked_mean


def policy_metrics(
    logp_BT, ent_BT, mask_BT, pg_metrics: dict, mb: dict, n_tokens: jax.Array
) -> dict[str, jax.Array]:
    """Token-weighted metrics of one micro-batch, scaled so that summing micro-batches is exact:
    those of `losses.policy_loss`, the entropy and, with the batch's `sampler_logp`, the
    trainer-vs-sampler log-prob gap."""
    weight = mask_BT.astype(jnp.float32).sum() / jnp.maximum(n_tokens, 1.0)
    out = {k: v * weight for k, v in pg_metrics.items()}
    out["entropy"] = masked_mean(jax.lax.stop_gradient(ent_BT), mask_BT, n_tokens)
    if "sampler_logp" in mb:
        gap_BT = jax.lax.stop_gradient(logp_BT) - mb["sampler_logp"]
        out["logprob_gap_abs"] = masked_mean(jnp.abs(gap_BT), mask_BT, n_tokens)
        out["logprob_gap"] = masked_mean(gap_BT, mask_BT, n_tokens)
    return out


def response_metrics(lengths: Sequence[jax.Array]) -> dict[str, jax.Array]:
    """Mean and longest reply length over a batch's parts (`lengths`: each part's reply
    lengths, [replies] float32, e.g. `grpo_layout.Rows().reply_lengths(part)`)."""
    lengths = jnp.concatenate(list(lengths))
    return {"response_length": lengths.mean(), "response_length_max": lengths.max()}


def pad_frac(valids) -> jax.Array:
    """The share of the update's token positions that are padding, over every part (`valids`:
    one [rows, T] mask or a list; packed rows: of the packed positions, each group's prompt
    once)."""
    valids = valids if isinstance(valids, list | tuple) else [valids]
    real = sum(v.astype(jnp.float32).sum() for v in valids)
    return 1.0 - real / sum(v.size for v in valids)
