"""Attention masks and positions for padded batches.

Prompts are left-padded (so every row's last prompt token sits in the same column and decoding
writes one shared cache slot per step) and training sequences are right-padded. Both reduce to a
per-slot validity vector plus causality, and positions count only real tokens, so a padded row
computes exactly what the same row computes unpadded.
"""

from __future__ import annotations

import jax.numpy as jnp


def positions_from_valid(valid_BT: jnp.ndarray) -> jnp.ndarray:
    """Positions 0, 1, 2, ... over the real tokens of each row (padding gets the last position)."""
    return jnp.maximum(jnp.cumsum(valid_BT.astype(jnp.int32), axis=-1) - 1, 0)


def causal_mask(valid_BS: jnp.ndarray, query_slots_T: jnp.ndarray | None = None) -> jnp.ndarray:
    """Boolean [B, T, S]: query at slot q may read key slot s iff s <= q and s holds a real token.

    Args:
      valid_BS: which key slots hold real tokens.
      query_slots_T: the slot index of each query; defaults to all S slots (full-sequence pass).
    """
    s = valid_BS.shape[-1]
    if query_slots_T is None:
        query_slots_T = jnp.arange(s)
    causal_TS = jnp.arange(s)[None, :] <= query_slots_T[:, None]
    return causal_TS[None, :, :] & valid_BS[:, None, :].astype(bool)


def packed_mask(segments_BT: jnp.ndarray) -> jnp.ndarray:
    """Boolean [B, T, T] of packed GRPO rows (`memr1.rl.packing`): segment 0 is a shared
    prompt, j > 0 reply j, -1 padding. A query reads a real key at or before it that belongs to
    the prompt or to its own reply, so every reply sees its prompt and itself, as in its own row.
    """
    t = segments_BT.shape[-1]
    seg_q, seg_k = segments_BT[:, :, None], segments_BT[:, None, :]
    causal_TT = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None]
    return causal_TT[None] & (seg_k >= 0) & ((seg_k == 0) | (seg_k == seg_q))
