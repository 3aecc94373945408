"""The optimisers of a run: AdamW with linear warmup, then a constant or a cosine-decaying rate,
and global-norm clipping.

`memr1.train.state` builds the policy's and the PPO critic's optimiser states with these.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax

DECAYS = ("constant", "cosine")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup to `lr`, then `decay`, and global-norm clipping.

    `lr`, `warmup_steps` and `decay` come from the config's train section (`from_config`;
    `train.lr_decay`), `total_steps` from `train.steps`; the AdamW constants are not configured.
    `decay` "constant" holds `lr` after the warmup (the paper's RL setting); "cosine" takes it
    from `lr` at the warmup's end to 0 at `total_steps` (verl's and TRL's SFT trainers decay
    theirs: a constant rate leaves the last steps' updates as large as the first ones').
    """

    lr: float
    warmup_steps: int
    decay: str = "constant"
    total_steps: int = 0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.01
    clip_norm: float = 1.0

    def __post_init__(self):
        if self.decay not in DECAYS:
            raise ValueError(f"train.lr_decay must be one of {DECAYS}, got {self.decay!r}")
        if self.decay != "constant" and self.total_steps <= self.warmup_steps:
            raise ValueError(
                f"train.lr_decay {self.decay!r} needs train.steps ({self.total_steps}) above "
                f"train.warmup_steps ({self.warmup_steps})"
            )

    @classmethod
    def from_config(cls, config, *, critic: bool = False) -> OptimConfig:
        """The policy's optimiser (train.lr), or with `critic` the PPO critic's
        (train.critic_lr), both under train.lr_decay."""
        t = config.train
        return cls(
            lr=t.critic_lr if critic else t.lr,
            warmup_steps=t.warmup_steps,
            decay=t.lr_decay,
            total_steps=t.steps,
        )


def warmup_constant(lr: float, warmup_steps: int) -> optax.Schedule:
    """lr · min(1, (count + 1) / warmup_steps): the first update already moves the weights."""
    if warmup_steps <= 0:
        return optax.constant_schedule(lr)
    return lambda count: lr * jnp.minimum(1.0, (count + 1) / warmup_steps)


def lr_schedule(cfg: OptimConfig) -> optax.Schedule:
    """The rate of update ``count`` (0-based): `warmup_constant`, times under "cosine"
    0.5 · (1 + cos(π · min(1, (count + 1 − w) / (total − w)))) after the w warmup updates, so
    that the last of `total_steps` updates runs at 0."""
    warm = warmup_constant(cfg.lr, cfg.warmup_steps)
    if cfg.decay == "constant":
        return warm
    w = max(cfg.warmup_steps, 0)
    span = cfg.total_steps - w  # > 0: OptimConfig refuses a decay over no steps

    def schedule(count):
        done = jnp.clip((count + 1 - w) / span, 0.0, 1.0)
        return warm(count) * 0.5 * (1.0 + jnp.cos(jnp.pi * done))

    return schedule


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
            lr_schedule(cfg),
            b1=cfg.b1,
            b2=cfg.b2,
            eps=cfg.eps,
            weight_decay=cfg.weight_decay,
            mask=decay_mask,
        ),
    )
