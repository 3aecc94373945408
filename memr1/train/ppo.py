"""The PPO update: actor and critic (a separate value model, see `memr1.train.critic`).

A PPO iteration over one rollout batch is two jitted calls:

1. `prepare(state, batch) -> batch'` (no gradients, over micro-batches): the old policy's
   log-probs (unless the sampler's are given), the critic's values, the outcome reward placed on
   each row's final response token, GAE (γ, λ) over the response tokens (a reverse scan,
   `memr1.rl.advantages.gae`), and advantages whitened over all response tokens of the batch.
   This must see the whole batch (whitening is global) and must run before the first update
   (old values and log-probs belong to the policy that sampled), hence a separate function.
2. `step(state, batch'[, ref_params]) -> (state, metrics)`, as many epochs / mini-batches as
   wanted: the clipped surrogate on per-token advantages, optional β·KL to a reference, and the
   clipped value loss; the actor and the critic each step with their own optimiser (the paper's
   lr 1e-6 and 1e-5) behind one shared NaN/inf guard.

Batch fields: tokens, valid, response_mask as for GRPO; rewards [B] float32 (the outcome
reward of each row); optional old_logp / sampler_logp [B, T]. β defaults to 0 here (verl's PPO
default: no KL loss), so no reference pass is traced unless asked for.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from memr1.rl import advantages as adv_lib
from memr1.rl.logprobs import sequence_logprobs
from memr1.rl.losses import KL_ESTIMATORS, policy_loss, value_loss
from memr1.sharding import use_mesh
from memr1.train.critic import critic_values
from memr1.train.grpo import kl_to_reference, policy_metrics, response_metrics
from memr1.train.state import TrainSetup, TrainState, merge_params, rebind
from memr1.train.update import Batch, batch_sharding, check_batch, make_step, to_micro

PREPARE_FIELDS = ("tokens", "valid", "response_mask", "rewards")
STEP_FIELDS = (
    "tokens",
    "valid",
    "response_mask",
    "old_logp",
    "old_values",
    "advantages",
    "returns",
)


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    clip_eps: float = 0.2
    clip_eps_high: float | None = None
    dual_clip: float | None = None
    value_clip_eps: float = 0.5  # verl's cliprange_value
    vf_coef: float = 1.0  # the critic has its own optimiser, so this only scales its gradients
    gamma: float = 1.0  # GAE discount and λ: both 1.0 by default, as verl
    lam: float = 1.0
    kl_beta: float = 0.0
    kl_estimator: str = "k3"
    temperature: float = 1.0  # the rollout temperature: log-probs are under logits / T
    n_micro: int = 1
    logprob_chunk: int = 128

    def __post_init__(self):
        for name in ("gamma", "lam"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"PPO {name}={value!r} (train.{name}): must be in [0, 1]")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"PPO kl_estimator={self.kl_estimator!r} (train.kl_estimator): expected one of "
                f"{KL_ESTIMATORS}"
            )
        if not self.temperature > 0:
            raise ValueError(
                f"PPO temperature={self.temperature!r} (train.temperature): must be > 0, the "
                "temperature the rollouts were sampled at"
            )

    @classmethod
    def from_train_config(cls, t) -> PPOConfig:
        """The PPO update of a `configs/base.py` train section (refuses bad settings)."""
        return cls(
            clip_eps=t.clip_eps,
            gamma=t.gamma,
            lam=t.lam,
            kl_beta=t.kl_beta,
            kl_estimator=t.kl_estimator,
            temperature=t.temperature,
            n_micro=t.n_micro,
        )


def final_token_rewards(rewards_B: jax.Array, mask_BT: jax.Array) -> jax.Array:
    """[B, T] zeros except the reward on each row's last masked token (none if the row is empty)."""
    t = mask_BT.shape[1]
    last = t - 1 - jnp.argmax(mask_BT[:, ::-1], axis=1)
    onehot = jax.nn.one_hot(last, t, dtype=jnp.float32) * mask_BT.any(axis=1, keepdims=True)
    return onehot * rewards_B.astype(jnp.float32)[:, None]


def make_ppo_prepare(setup: TrainSetup, cfg: PPOConfig = PPOConfig()) -> Callable:
    """The jitted `prepare(state, batch) -> (batch with old_logp/old_values/advantages/returns,
    metrics)`; see the module docstring."""
    if setup.critic_graphdef is None:
        raise ValueError("PPO needs a critic: create the train state with critic_cfg")
    divisor = setup.mesh.shape["data"] * setup.mesh.shape["fsdp"]

    def prepare(state: TrainState, batch: Batch):
        with use_mesh(setup.mesh, setup.rules):
            check_batch(batch, PREPARE_FIELDS, cfg.n_micro, divisor, "PPO prepare")
            seq = {k: batch[k] for k in ("tokens", "valid")}

            def body(_, mb):
                values = critic_values(
                    setup.critic_graphdef, rebind(state.critic_params), mb["tokens"], mb["valid"]
                )
                logp, _ = sequence_logprobs(
                    setup.graphdef,
                    rebind(state.params),
                    mb["tokens"],
                    mb["valid"],
                    temperature=cfg.temperature,
                    chunk=cfg.logprob_chunk,
                )
                return None, (values, logp)

            _, out_M = jax.lax.scan(body, None, to_micro(seq, cfg.n_micro))
            # Undo the interleaved micro-batch split: [M, B/M, T] -> [B, T].
            values, logp = (jnp.swapaxes(x, 0, 1).reshape(batch["tokens"].shape) for x in out_M)
            mask = batch["response_mask"] & batch["valid"]
            values = values * mask
            token_rewards = final_token_rewards(batch["rewards"], mask)
            adv, returns = adv_lib.gae(token_rewards, values, mask, gamma=cfg.gamma, lam=cfg.lam)
            out = dict(batch)
            out["old_logp"] = batch["old_logp"] if "old_logp" in batch else logp * mask
            out["old_values"] = values
            out["advantages"] = adv_lib.whiten(adv, mask)
            out["returns"] = returns
            n = jnp.maximum(mask.sum(), 1)
            metrics = {
                "reward_mean": batch["rewards"].mean(),
                "value_mean": values.sum() / n,
                "return_mean": returns.sum() / n,
                "advantage_raw_mean": adv.sum() / n,
            }
            return out, metrics

    return jax.jit(
        prepare,
        in_shardings=(setup.state_shardings, batch_sharding(setup)),
        out_shardings=(batch_sharding(setup), setup.replicated),
    )


def make_ppo_step(
    setup: TrainSetup, cfg: PPOConfig = PPOConfig(), *, grads_only: bool = False
) -> Callable[..., tuple[TrainState, dict[str, jax.Array]]]:
    """The jitted, donating PPO actor + critic update on a prepared batch.

    `step(state, batch, ref_params)` if cfg.kl_beta > 0, else `step(state, batch)`.
    Metrics: those of GRPO plus value_loss, vf_clip_frac, critic_grad_norm.
    `grads_only=True` builds the non-updating gradient function instead (`update.make_step`).
    """

    def loss_factory(batch, frozen, ref_params):
        mask = batch["response_mask"] & batch["valid"]
        n_tokens = mask.astype(jnp.float32).sum()
        n_seqs = jnp.asarray(mask.shape[0], jnp.float32)

        def loss_fn(diff, mb):
            params = merge_params(diff[0], frozen)
            logp, ent = sequence_logprobs(
                setup.graphdef,
                params,
                mb["tokens"],
                mb["valid"],
                temperature=cfg.temperature,
                chunk=cfg.logprob_chunk,
            )
            m = mb["response_mask"] & mb["valid"]
            pg, pg_metrics = policy_loss(
                logp,
                mb["old_logp"],
                mb["advantages"],
                m,
                clip_eps=cfg.clip_eps,
                clip_eps_high=cfg.clip_eps_high,
                dual_clip=cfg.dual_clip,
                num_tokens=n_tokens,
            )
            kl_loss, kl_metrics = kl_to_reference(
                setup,
                ref_params,
                mb,
                logp,
                m,
                logprobs=functools.partial(
                    sequence_logprobs, temperature=cfg.temperature, chunk=cfg.logprob_chunk
                ),
                beta=cfg.kl_beta,
                estimator=cfg.kl_estimator,
                aggregation="token_mean",
                n_tokens=n_tokens,
                n_seqs=n_seqs,
            )
            values = critic_values(setup.critic_graphdef, diff[1], mb["tokens"], mb["valid"])
            v_loss, v_metrics = value_loss(
                values, mb["old_values"], mb["returns"], m, clip_eps=cfg.value_clip_eps
            )
            # value_loss is a micro-batch token mean; rescaling by this micro-batch's share of
            # the tokens makes the sum over micro-batches the full-batch token mean.
            share = m.astype(jnp.float32).sum() / jnp.maximum(n_tokens, 1.0)
            v_loss = v_loss * share
            metrics = policy_metrics(logp, ent, m, pg_metrics, mb, n_tokens)
            metrics.update(kl_metrics, pg_loss=pg, value_loss=v_loss)
            metrics["vf_clip_frac"] = v_metrics["vf_clip_frac"] * share
            return pg + kl_loss + cfg.vf_coef * v_loss, metrics

        return loss_fn, {"n_tokens": n_tokens, **response_metrics(mask)}

    return make_step(
        setup,
        name="PPO",
        required=STEP_FIELDS,
        n_micro=cfg.n_micro,
        loss_factory=loss_factory,
        grads_only=grads_only,
        with_ref=cfg.kl_beta != 0.0,
        with_critic=True,
    )
