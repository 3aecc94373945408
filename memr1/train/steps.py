"""The jitted, donating RL updates: the losses of `memr1.rl` inside `update.make_step`.

GRPO is one call, `step(state, batch[, ref_params]) -> (state, metrics)`. PPO is two:
`prepare(state, batch) -> (batch', metrics)` fixes the old log-probs, the critic's values and
the whitened GAE advantages over the whole batch (it runs before the first update, without
gradients), then `step` runs as many epochs / mini-batches as wanted on `batch'`. A reference
argument exists only when the KL β is not zero, so β = 0 never traces a reference pass.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from memr1.rl import grpo, ppo
from memr1.sharding import use_mesh
from memr1.train.state import TrainSetup, TrainState
from memr1.train.update import (
    Batch,
    BeforeGuard,
    batch_sharding,
    check_batch,
    make_step,
    to_micro,
)


def make_grpo_step(
    setup: TrainSetup,
    cfg: grpo.GRPOConfig,
    *,
    grads_only: bool = False,
    before_guard: BeforeGuard | None = None,
) -> Callable[..., tuple[TrainState, dict[str, jax.Array]]]:
    """The jitted, donating GRPO update (metrics of `rl.grpo.grpo_loss` plus grad_norm, lr,
    update_refused). `grads_only=True` builds the non-updating gradient function instead;
    `before_guard` is for fault drills (both: `update.make_step`)."""
    return make_step(
        setup,
        name="GRPO",
        required=grpo.FIELDS,
        n_micro=cfg.n_micro,
        loss_factory=grpo.grpo_loss(setup.graphdef, cfg),
        grads_only=grads_only,
        with_ref=cfg.kl_beta != 0.0,
        micro_unit=cfg.prompt_group,
        before_guard=before_guard,
    )


def make_ppo_prepare(setup: TrainSetup, cfg: ppo.PPOConfig) -> Callable:
    """The jitted `prepare(state, batch) -> (batch with old_logp/old_values/advantages/returns,
    metrics)`; old values and log-probs run over micro-batches, GAE and whitening over the batch."""
    if setup.critic_graphdef is None:
        raise ValueError("PPO needs a critic: create the train state with critic_cfg")
    divisor = setup.mesh.shape["data"] * setup.mesh.shape["fsdp"]

    def prepare(state: TrainState, batch: Batch):
        with use_mesh(setup.mesh, setup.rules):
            check_batch(batch, ppo.PREPARE_FIELDS, cfg.n_micro, divisor, "PPO prepare")
            seq = {k: batch[k] for k in ("tokens", "valid")}

            def body(_, mb):
                return None, ppo.old_values_and_logprobs(
                    setup.graphdef,
                    setup.critic_graphdef,
                    cfg,
                    state.params,
                    state.critic_params,
                    mb,
                )

            _, out_M = jax.lax.scan(body, None, to_micro(seq, cfg.n_micro))
            # Undo the interleaved micro-batch split: [M, B/M, T] -> [B, T].
            values, logp = (jnp.swapaxes(x, 0, 1).reshape(batch["tokens"].shape) for x in out_M)
            return ppo.with_advantages(batch, values, logp, cfg)

    return jax.jit(
        prepare,
        in_shardings=(setup.state_shardings, batch_sharding(setup)),
        out_shardings=(batch_sharding(setup), setup.replicated),
    )


def make_ppo_step(
    setup: TrainSetup,
    cfg: ppo.PPOConfig,
    *,
    grads_only: bool = False,
    before_guard: BeforeGuard | None = None,
) -> Callable[..., tuple[TrainState, dict[str, jax.Array]]]:
    """The jitted, donating PPO actor + critic update on a prepared batch (metrics of
    `rl.ppo.ppo_loss` plus grad_norm, critic_grad_norm, lr, update_refused); `grads_only` and
    `before_guard` as for `make_grpo_step`."""
    return make_step(
        setup,
        name="PPO",
        required=ppo.STEP_FIELDS,
        n_micro=cfg.n_micro,
        loss_factory=ppo.ppo_loss(setup.graphdef, setup.critic_graphdef, cfg),
        grads_only=grads_only,
        with_ref=cfg.kl_beta != 0.0,
        with_critic=True,
        before_guard=before_guard,
    )
