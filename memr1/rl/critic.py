"""The PPO critic: a separate value model (a transformer trunk and a scalar head).

Why a separate model rather than a value head on the policy trunk: it is verl's default (the
framework the paper trained with); the paper gives the critic its own learning rate (1e-5 against
the actor's 1e-6), which a separate model with its own optimiser expresses directly; value-loss
gradients never disturb the policy's representation; and the critic may be a smaller backbone
than the actor. The cost is a second set of weights and optimiser state, sharded like the
policy's.

Start weights: the trunk starts as a copy of the policy's transformer (`trunk_from_policy`), as
verl starts its critic from the actor's checkpoint: a pretrained representation to read values
from, where a random trunk would have to learn the language first. It has no LM head (the critic
never unembeds; an untied head would be dead weight with AdamW moments, ~6.5 GB at 7B).

Values are aligned with the log-prob convention of `memr1.rl.logprobs`: entry t is the value of
the state *before* token t is emitted, V(tokens[:t]), read from the hidden state at t - 1; entry 0
has no state and is 0. So `values[:, t]`, `logp[:, t]` and the advantage of token t line up.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from memr1.models import masks
from memr1.models.config import ModelConfig
from memr1.models.transformer import Transformer


class ValueModel(nnx.Module):
    """A transformer trunk with a linear scalar head on its final hidden states."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        self.trunk = Transformer(cfg, rngs)
        if not cfg.tie_embeddings:
            del self.trunk.lm_head  # never used: values are read from the hidden states
        # A zero head starts every value at 0, so the first advantages are the plain returns and
        # the early value loss cannot push large gradients into a pretrained trunk.
        zeros = lambda shape: jnp.zeros(shape, cfg.jnp_param_dtype)
        self.head = nnx.Param(zeros((cfg.d_model,)), out_sharding=("embed",), eager_sharding=False)
        self.bias = nnx.Param(zeros(()), out_sharding=(), eager_sharding=False)

    def __call__(self, tokens_BT: jax.Array, valid_BT: jax.Array) -> jax.Array:
        """Values [B, T] (float32); entry t = V(tokens[:t]), 0 at t = 0 and on padding."""
        valid = valid_BT.astype(bool)
        h_BTD, _ = self.trunk(
            tokens_BT, masks.positions_from_valid(valid), masks.causal_mask(valid)
        )
        v_BT = jnp.einsum(
            "btd,d->bt", h_BTD.astype(jnp.float32), self.head[...].astype(jnp.float32)
        )
        v_BT = v_BT + self.bias[...].astype(jnp.float32)
        has_context = jnp.cumsum(valid.astype(jnp.int32), axis=-1)[:, :-1] > 0
        shifted = jnp.where(valid[:, 1:] & has_context, v_BT[:, :-1], 0.0)
        return jnp.concatenate([jnp.zeros_like(v_BT[:, :1]), shifted], axis=1)


def critic_values(graphdef, params, tokens_BT: jax.Array, valid_BT: jax.Array) -> jax.Array:
    """`ValueModel.__call__` as a pure function of its parameter state; returns [B, T]."""
    return nnx.merge(graphdef, params)(tokens_BT, valid_BT)


def trunk_from_policy(policy_params: nnx.State, abstract: nnx.State, shardings: Any) -> nnx.State:
    """The critic's `trunk` parameters as a copy of the policy's transformer weights.

    Args:
      policy_params: the policy's parameter state, placed on the mesh. Its LM head is not taken
        (the trunk has none) and neither are LoRA adapters (not trunk parameters): a LoRA
        policy's critic starts from the base weights.
      abstract / shardings: the critic's abstract parameter state and its NamedShardings.
    Returns:
      The `trunk` part of a critic parameter state, cast to the critic's parameter dtypes. One
      jitted copy from the policy's shards into the critic's: nothing is gathered on one device,
      and every array is a new buffer (the train state is donated to each step, so the critic
      must not share the policy's buffers).
    Raises:
      ValueError naming the parameters the policy lacks or has in another shape (a critic of
      another size cannot start from this policy).
    """
    policy = {path: _value(var) for path, var in nnx.to_flat_state(policy_params)}
    flat_shardings = {path: _value(s) for path, s in nnx.to_flat_state(shardings)}
    want = [(path, var) for path, var in nnx.to_flat_state(abstract) if path[0] == "trunk"]
    problems = [
        "/".join(map(str, path[1:]))
        for path, var in want
        if path[1:] not in policy or policy[path[1:]].shape != var.shape
    ]
    if problems:
        raise ValueError(
            "the critic cannot start from the policy's weights: the policy lacks these trunk "
            f"parameters or has them in another shape: {problems[:4]} (a critic of another size "
            "starts at random: create_train_state(critic_from_policy=False))"
        )
    paths = [path for path, _ in want]
    dtypes = [var.dtype for _, var in want]

    def copy(arrays):
        # jnp.copy: jit would return an unchanged input as the same buffer.
        return [jnp.copy(x.astype(dtype)) for x, dtype in zip(arrays, dtypes, strict=True)]

    out_shardings = [flat_shardings[path] for path in paths]
    copies = jax.jit(copy, out_shardings=out_shardings)([policy[path[1:]] for path in paths])
    # The abstract Variables carry the metadata (logical axes) the shardings derive from.
    variables = [var.replace(value=x) for (_, var), x in zip(want, copies, strict=True)]
    return nnx.from_flat_state(list(zip(paths, variables, strict=True)))


def _value(leaf):
    return leaf.get_value() if isinstance(leaf, nnx.Variable) else leaf
