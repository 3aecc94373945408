"""Log-probabilities of taken tokens without materialising [B, T, V] logits.

For a 152k vocabulary a full logits tensor of a training batch costs more memory than the model,
so the unembedding, log-softmax and gather run over sequence chunks inside a `lax.scan`, and each
chunk is rematerialised in the backward pass (`jax.checkpoint`): peak memory is one [B, C, V]
chunk, not the whole sequence.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from memr1.models import masks
from memr1.models.transformer import forward, init_cache, logits_fn


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


def grouped_logprobs(
    graphdef,
    params,
    tokens_RT: jax.Array,
    valid_RT: jax.Array,
    *,
    group: int,
    prompt_width: int,
    temperature: float = 1.0,
    chunk: int = 128,
) -> tuple[jax.Array, jax.Array]:
    """`sequence_logprobs` of the responses of GRPO groups, the shared prompt run once per group.

    Rows come in groups of `group` consecutive rows (a rollout's G samples of one prompt) whose
    first `prompt_width` columns (the left-padded prompt) are identical within the group; the
    remaining columns are each row's response. The prompt goes through the model once per group,
    its keys and values (functions of `params`, so gradients flow through them) are repeated G
    times into a cache, and only the response tokens run per row. With a 256-token prompt and
    40-token responses that is ~5x fewer tokens than running every row whole.

    Returns:
      (logp_RT, entropy_RT) equal to `sequence_logprobs` on the response columns, 0 on the
      prompt columns (the GRPO loss only reads response tokens).
    """
    rows, width = tokens_RT.shape
    p, n = prompt_width, width - prompt_width
    if group < 1 or rows % group or not 0 < p < width:
        raise ValueError(
            f"grouped_logprobs: {rows} rows of width {width} do not split into groups of {group} "
            f"rows with a {p}-column prompt and a response"
        )
    valid = valid_RT.astype(bool)
    prompt_BP, pvalid_BP = tokens_RT[::group, :p], valid[::group, :p]
    cfg = nnx.merge(graphdef, params).cfg
    # One cache row per group, with room for the responses after the prompt.
    cache = init_cache(cfg, rows // group, width)
    key_valid_BS = jnp.pad(pvalid_BP, ((0, 0), (0, n)))
    h_BPD, cache = forward(
        graphdef,
        params,
        prompt_BP,
        masks.positions_from_valid(pvalid_BP),
        masks.causal_mask(key_valid_BS, jnp.arange(p)),
        cache,
        0,
    )
    cache = jax.tree.map(lambda x: jnp.repeat(x, group, axis=0), cache)
    h_RND, _ = forward(
        graphdef,
        params,
        tokens_RT[:, p:],
        masks.positions_from_valid(valid)[:, p:],
        masks.causal_mask(valid, p + jnp.arange(n)),
        cache,
        p,
    )
    # Response column j is predicted by column p + j - 1: the prompt's last for j = 0.
    last_R1D = jnp.repeat(h_BPD[:, -1:], group, axis=0)
    logp, ent = chunked_token_logprobs(
        lambda h: logits_fn(graphdef, params, h),
        jnp.concatenate([last_R1D, h_RND[:, :-1]], axis=1),
        tokens_RT[:, p:],
        temperature=temperature,
        chunk=chunk,
    )
    return _place_targets(logp, ent, valid, p)
