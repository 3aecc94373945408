"""The PPO critic: a separate value model (a transformer trunk and a scalar head).

Why a separate model rather than a value head on the policy trunk: it is verl's default (the
framework the paper trained with); the paper gives the critic its own learning rate (1e-5 against
the actor's 1e-6), which a separate model with its own optimiser expresses directly; value-loss
gradients never disturb the policy's representation; and the critic may be a smaller backbone
than the actor. The cost is a second set of weights and optimiser state, sharded like the
policy's.

Values are aligned with the log-prob convention of `memr1.rl.logprobs`: entry t is the value of
the state *before* token t is emitted, V(tokens[:t]), read from the hidden state at t - 1; entry 0
has no state and is 0. So `values[:, t]`, `logp[:, t]` and the advantage of token t line up.
"""

from __future__ import annotations

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
