"""Attention masks and positions for padded batches.

Prompts are left-padded (so every row's last prompt token sits in the same column and decoding
writes one shared cache slot per step) and training sequences are right-padded. Both reduce to a
per-slot validity vector plus causality, and positions count only real tokens, so a padded row
computes exactly what the same row computes unpadded.
"""

from __future__ import annotations

import dataclasses

import jax
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


def packed_allowed(q_index, k_index, seg_q, seg_k):
    """Whether a query may read a key in a packed GRPO row (`memr1.rl.packing`): elementwise,
    broadcasting, from their column indices and segment ids (0 the shared prompt, j > 0 reply j,
    -1 padding).

    A real query reads a real key at or before it that belongs to the prompt or to its own
    reply, so every reply sees its prompt and itself, as in its own row. A padding query reads
    only its own column: no row of the mask is empty (a kernel's softmax never divides by 0)
    and padding reads nothing a real block must be computed for. This is the one definition of
    the packed mask: the dense mask, the kernels' in-block masks and (through `block_live`)
    their block skipping are all this function.
    """
    real = (seg_q >= 0) & (seg_k >= 0) & ((seg_k == 0) | (seg_k == seg_q)) & (k_index <= q_index)
    return real | ((seg_q < 0) & (k_index == q_index))


def packed_mask(segments_BT: jnp.ndarray) -> jnp.ndarray:
    """Boolean [B, T, T] of packed GRPO rows: `packed_allowed` of every query and key column."""
    t = segments_BT.shape[-1]
    cols = jnp.arange(t)
    return packed_allowed(
        cols[None, :, None], cols[None, None, :], segments_BT[:, :, None], segments_BT[:, None, :]
    )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PackedMask:
    """The mask of packed GRPO rows, kept as their segment ids [B, T] (see `packed_allowed`).

    The model passes it where it passes a dense [B, T, S] mask; an attention kernel that skips
    blocks reads the segments (`memr1.models.kernels`), the others call `dense()`.
    """

    segments_BT: jax.Array

    @property
    def shape(self) -> tuple[int, int, int]:
        b, t = self.segments_BT.shape
        return (b, t, t)

    def dense(self) -> jax.Array:
        return packed_mask(self.segments_BT)


def block_summaries(segments_BT, block: int) -> dict[str, jnp.ndarray]:
    """Per block of `block` columns [B, T / block]: the lowest and highest reply segment
    (> 0) in it (lo > hi when it holds none), and whether it holds prompt and real columns.

    T must be a multiple of `block`. Works on numpy and jax arrays alike.
    """
    b, t = segments_BT.shape
    if t % block:
        raise ValueError(f"block_summaries: {t} columns do not split into blocks of {block}")
    seg = segments_BT.reshape(b, t // block, block)
    big = jnp.iinfo(jnp.int32).max
    reply = seg > 0
    return {
        "lo": jnp.where(reply, seg, big).min(-1),
        "hi": jnp.where(reply, seg, -1).max(-1),
        "prompt": (seg == 0).any(-1),
        "real": (seg >= 0).any(-1),
    }


def block_live(segments_BT, block: int) -> jnp.ndarray:
    """Boolean [B, T/block, T/block]: whether query block i and key block j hold a pair that
    `packed_allowed` lets read, from per-block segment ranges (`block_summaries`), O(T) work.

    Exact for packed rows (segments never decrease along a row before the padding: a later
    block's reply range starts at or after an earlier one's end) and a superset of the live
    pairs for any segment ids, so a kernel that computes these blocks and masks inside them
    is always right. Every key block before a query block is wholly at or before it (causality
    holds for every pair); the diagonal block is live (a query reads at least itself).
    """
    s = block_summaries(segments_BT, block)
    n = s["lo"].shape[1]
    q = {k: v[:, :, None] for k, v in s.items()}
    k = {k: v[:, None, :] for k, v in s.items()}
    shares_reply = jnp.maximum(q["lo"], k["lo"]) <= jnp.minimum(q["hi"], k["hi"])
    reads_prompt = q["real"] & k["prompt"]
    below = jnp.arange(n)[None, :, None] > jnp.arange(n)[None, None, :]
    diagonal = jnp.eye(n, dtype=bool)[None]
    return (below & (shares_reply | reads_prompt)) | diagonal
