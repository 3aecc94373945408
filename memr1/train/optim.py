"""The optimisers of a run: AdamW with linear warmup to a constant rate and global-norm clipping.

`memr1.train.state` builds the policy's and the PPO critic's optimiser states with these.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup to a constant learning rate and global-norm clipping.

    `lr` and `warmup_steps` come from the config's train section (`from_config`); the AdamW
    constants are not configured.
    """

    lr: float
    warmup_steps: int
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.01
    clip_norm: float = 1.0

    @classmethod
    def from_config(cls, config, *, critic: bool = False) -> OptimConfig:
        """The policy's optimiser (train.lr), or with `critic` the PPO critic's
        (train.critic_lr)."""
        t = config.train
        return cls(lr=t.critic_lr if critic else t.lr, warmup_steps=t.warmup_steps)


def warmup_constant(lr: float, warmup_steps: int) -> optax.Schedule:
    """lr · min(1, (count + 1) / warmup_steps): the first update already moves the weights."""
    if warmup_steps <= 0:
        return optax.constant_schedule(lr)
    return lambda count: lr * jnp.minimum(1.0, (count + 1) / warmup_steps)


# Parameters never decayed: norm scales and the attention biases. The q/k/v biases are stored
# per head as 2-D [heads, head_dim], so a rank test alone would decay them.
NO_DECAY = frozenset({"scale", "bq", "bk", "bv"})


def _param_name(path) -> str:
    names = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
    return str(names[-1]) if names else ""


def decay_mask(params: Any) -> Any:
    """True for the weight matrices AdamW decays; False for norms and biases."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: x.ndim >= 2 and _param_name(path) not in NO_DECAY, params
    )


def make_optimizer(cfg: OptimConfig) -> optax.GradientTransformation:
    """Clip by global norm, then AdamW; norm scales and biases are not decayed."""
    return optax.chain(
        optax.clip_by_global_norm(cfg.clip_norm),
        optax.adamw(
            warmup_constant(cfg.lr, cfg.warmup_steps),
            b1=cfg.b1,
            b2=cfg.b2,
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            mask=decay_mask,
        ),
    )
