"""The jitted, donating RL updates: the losses of `memr1.rl` inside `update.make_step`.

GRPO is `step(state, batch) -> (state, metrics)`, and with a KL β > 0 first
`reference(ref_params, batch) -> ref_logp`, a forward-only program run once per rollout (verl's
`compute_ref_log_prob` before `update_actor`), so the update program never runs the reference.
PPO is `prepare(state, batch[, ref_params]) -> (batch', metrics)`, which fixes the old
log-probs, the critic's values, the whitened GAE advantages over the whole batch and (with
β > 0) the reference's log-probs, without gradients, then `step` runs as many epochs /
mini-batches as wanted on `batch'`. β = 0 traces no reference pass anywhere.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from memr1.rl import grpo, ppo
from memr1.sharding import use_mesh
from memr1.train.state import TrainSetup, TrainState
from memr1.train.update import (
    Batch,
    StepSpec,
    batch_sharding,
    check_batch,
    from_micro,
    make_logprob_fn,
    make_step,
    to_micro,
)


def grpo_spec(setup: TrainSetup, cfg: grpo.GRPOConfig) -> StepSpec:
    """The GRPO update as `update.make_step` builds it: `rl.grpo.grpo_loss` on the fields of
    the batch's layout."""
    loss = grpo.grpo_loss(setup.graphdef, cfg)
    return StepSpec("GRPO", cfg.required_fields(), cfg.n_micro, loss)


def make_grpo_step(
    setup: TrainSetup, cfg: grpo.GRPOConfig, *, grads_only: bool = False
) -> Callable[..., tuple[TrainState, dict[str, jax.Array]]]:
    """The jitted, donating GRPO update (metrics of `rl.grpo.grpo_loss` plus grad_norm, lr,
    update_refused). `grads_only=True` builds the non-updating gradient function instead
    (`update.make_step`)."""
    return make_step(setup, grpo_spec(setup, cfg), grads_only=grads_only)


def make_grpo_reference(setup: TrainSetup, cfg: grpo.GRPOConfig) -> Callable:
    """The jitted, forward-only `(ref_params, batch) -> ref_logp` of a GRPO batch: the update's
    own log-prob function (`GRPOConfig.logprobs`) on the reference weights, over the update's
    micro-batches; its output is the batch field `ref_logp` the loss reads."""
    return make_logprob_fn(
        setup,
        logprobs=lambda graphdef, params, mb: cfg.logprobs(graphdef, params, mb)[0],
        fields=cfg.logprob_fields(),
        n_micro=cfg.n_micro,
    )


def make_ppo_prepare(setup: TrainSetup, cfg: ppo.PPOConfig) -> Callable:
    """The jitted `prepare(state, batch[, ref_params]) -> (batch with old_logp/old_values/
    advantages/returns[/ref_logp], metrics)`; old values and log-probs (and, with β > 0, the
    reference's, so it takes `ref_params`) run over micro-batches, GAE and whitening over the
    batch."""
    if setup.critic_graphdef is None:
        raise ValueError("PPO needs a critic: create the train state with critic_cfg")
    divisor = setup.mesh.shape["data"] * setup.mesh.shape["fsdp"]

    def prepare(state: TrainState, batch: Batch, ref_params=None):
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
                    ref_params,
                )

            _, out_M = jax.lax.scan(body, None, to_micro(seq, cfg.n_micro))
            out = [from_micro(x) for x in out_M]
            return ppo.with_advantages(batch, *out[:2], cfg, *out[2:])

    shardings = (setup.state_shardings, batch_sharding(setup))
    out_shardings = (batch_sharding(setup), setup.replicated)
    if cfg.kl_beta != 0.0:
        shardings = (*shardings, setup.param_shardings)
        return jax.jit(prepare, in_shardings=shardings, out_shardings=out_shardings)
    return jax.jit(
        lambda state, batch: prepare(state, batch),
        in_shardings=shardings,
        out_shardings=out_shardings,
    )


def ppo_spec(setup: TrainSetup, cfg: ppo.PPOConfig) -> StepSpec:
    """The PPO actor + critic update on a prepared batch, as `update.make_step` builds it."""
    required = ppo.STEP_FIELDS + (("ref_logp",) if cfg.kl_beta != 0.0 else ())
    loss = ppo.ppo_loss(setup.graphdef, setup.critic_graphdef, cfg)
    return StepSpec("PPO", required, cfg.n_micro, loss, with_critic=True)


def make_ppo_step(
    setup: TrainSetup, cfg: ppo.PPOConfig, *, grads_only: bool = False
) -> Callable[..., tuple[TrainState, dict[str, jax.Array]]]:
    """The jitted, donating PPO actor + critic update on a prepared batch (metrics of
    `rl.ppo.ppo_loss` plus grad_norm, critic_grad_norm, lr, update_refused); `grads_only` as
    for `make_grpo_step`."""
    return make_step(setup, ppo_spec(setup, cfg), grads_only=grads_only)
