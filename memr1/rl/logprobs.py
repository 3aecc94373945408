"""Log-probabilities of taken tokens without materialising [B, T, V] logits.

For a 152k vocabulary a full logits tensor of a training batch costs more memory than the model,
so the unembedding, log-softmax and gather run over sequence chunks inside a `lax.scan`, and each
chunk is rematerialised in the backward pass (`jax.checkpoint`): peak memory is one [B, C, V]
chunk, not the whole sequence. Rows come whole (`sequence_logprobs`) or packed one GRPO group a
row (`packed_logprobs`, `memr1.rl.packing`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from memr1.models import masks
from memr1.models.transformer import forward, logits_fn


def chunked_token_logprobs(
    unembed: Callable[[jax.Array], jax.Array],
    h_BTD: jax.Array,
    targets_BT: jax.Array,
    *,
    temperature: float = 1.0,
    chunk: int = 128,
) -> tuple[jax.Array, jax.Array]:
    """Log-probs [B, T] of `targets_BT` under softmax(logits / temperature), and entropies [B, T].

    Args:
      unembed: maps hidden states [B, C, D] to float32 logits [B, C, V].
      h_BTD: final hidden states; position t predicts targets_BT[:, t].
    """
    b, t, d = h_BTD.shape
    c = min(chunk, t)
    pad = (-t) % c
    if pad:
        h_BTD = jnp.pad(h_BTD, ((0, 0), (0, pad), (0, 0)))
        targets_BT = jnp.pad(targets_BT, ((0, 0), (0, pad)))
    n = (t + pad) // c
    h_NBCD = h_BTD.reshape(b, n, c, d).swapaxes(0, 1)
    tgt_NBC = targets_BT.reshape(b, n, c).swapaxes(0, 1)

    @jax.checkpoint
    def one_chunk(h_BCD, tgt_BC):
        logits_BCV = unembed(h_BCD) / temperature
        logp_BCV = jax.nn.log_softmax(logits_BCV, axis=-1)
        taken = jnp.take_along_axis(logp_BCV, tgt_BC[..., None], axis=-1)[..., 0]
        entropy = -jnp.sum(jnp.exp(logp_BCV) * logp_BCV, axis=-1)
        return taken, entropy

    def body(carry, xs):
        return carry, one_chunk(*xs)

    _, (logp_NBC, ent_NBC) = jax.lax.scan(body, None, (h_NBCD, tgt_NBC))
    logp = logp_NBC.swapaxes(0, 1).reshape(b, n * c)[:, :t]
    ent = ent_NBC.swapaxes(0, 1).reshape(b, n * c)[:, :t]
    return logp, ent


def sequence_logprobs(
    graphdef,
    params,
    tokens_BT: jax.Array,
    valid_BT: jax.Array,
    *,
    temperature: float = 1.0,
    chunk: int = 128,
) -> tuple[jax.Array, jax.Array]:
    """Per-token log-probs of a padded batch of full sequences under the policy.

    Entry [b, t] is log p(tokens[b, t] | tokens[b, :t]); entry 0 (no context) and padded positions
    are 0. Padding may sit on either side: positions and the attention mask count real tokens only,
    so a padded row gives exactly the values of the same row unpadded.

    Returns:
      (logp_BT, entropy_BT), both zero where there is no real predicted token.
    """
    valid = valid_BT.astype(bool)
    positions = masks.positions_from_valid(valid)
    h_BTD, _ = forward(graphdef, params, tokens_BT, positions, masks.causal_mask(valid))
    logp, ent = chunked_token_logprobs(
        lambda h: logits_fn(graphdef, params, h),
        h_BTD[:, :-1],
        tokens_BT[:, 1:],
        temperature=temperature,
        chunk=chunk,
    )
    return _place_targets(logp, ent, valid, 1)


def _place_targets(logp, ent, valid_BT, first: int) -> tuple[jax.Array, jax.Array]:
    """Per-target values of columns `first`.. laid into [B, T] rows, 0 in the columns before.

    A target counts if it is real and some real token precedes it in the row.
    """
    has_context = jnp.cumsum(valid_BT.astype(jnp.int32), axis=-1)[:, first - 1 : -1] > 0
    target_mask = valid_BT[:, first:] & has_context
    zeros = jnp.zeros((logp.shape[0], first), logp.dtype)
    logp = jnp.concatenate([zeros, jnp.where(target_mask, logp, 0.0)], axis=1)
    ent = jnp.concatenate([zeros, jnp.where(target_mask, ent, 0.0)], axis=1)
    return logp, ent


def packed_logprobs(
    graphdef,
    params,
    mb,
    *,
    temperature: float = 1.0,
    chunk: int = 128,
) -> tuple[jax.Array, jax.Array]:
    """`sequence_logprobs` of the replies of packed GRPO rows (`memr1.rl.packing`), in reply
    columns [N, L]: the prompt runs once per group, no reply is padded to another's length.

    `mb` holds the packed fields tokens, segments, positions [N, W] and target_index,
    predictor_index, response_mask [N, L]. Attention gets the segments as a `masks.PackedMask`,
    so the block-skipping kernels run on GPU and TPU (`memr1.models.attention`). The hidden
    states that predict the replies are gathered before the head, so the unembedding runs on
    the L reply columns only.

    Returns:
      (logp_NL, entropy_NL), 0 where `response_mask` is False.
    """
    mask = masks.PackedMask(mb["segments"])  # its segments: the kernels skip dead blocks
    h_NWD, _ = forward(graphdef, params, mb["tokens"], mb["positions"], mask)
    h_NLD = jnp.take_along_axis(h_NWD, mb["predictor_index"][..., None], axis=1)
    targets_NL = jnp.take_along_axis(mb["tokens"], mb["target_index"], axis=1)
    logp, ent = chunked_token_logprobs(
        lambda h: logits_fn(graphdef, params, h),
        h_NLD,
        targets_NL,
        temperature=temperature,
        chunk=chunk,
    )
    real = mb["response_mask"]
    return jnp.where(real, logp, 0.0), jnp.where(real, ent, 0.0)
