"""The PPO update: actor and critic (a separate value model, see `memr1.rl.critic`).

A PPO iteration over one rollout batch is two jitted calls:

1. `prepare(state, batch) -> batch'` (no gradients, over micro-batches): the old policy's
   log-probs (unless the sampler's are given), the critic's values, the outcome reward placed on
   each row's final response token, GAE (γ, λ) over the response tokens (a reverse scan,
   `memr1.rl.advantages.gae`), and advantages whitened over all response tokens of the batch.
   This must see the whole batch (whitening is global) and must run before the first update
   (old values and log-probs belong to the policy that sampled), hence a separate function.
2. `step(state, batch') -> (state, metrics)`, as many epochs / mini-batches as
   wanted: the clipped surrogate on per-token advantages, optional β·KL to a reference (its
   log-probs `ref_logp` fixed by `prepare`, which then takes the reference weights), and the
   clipped value loss; the actor and the critic each step with their own optimiser (the paper's
   lr 1e-6 and 1e-5) behind one shared NaN/inf guard.

Batch fields: tokens, valid, response_mask as for GRPO; rewards [B] float32 (the outcome
reward of each row); optional old_logp / sampler_logp [B, T]. The config's β for PPO is 0
(`configs/base.py` train_section, verl's PPO default: no KL loss), so no reference pass is
traced unless asked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from memr1.models.params import merge_params, rebind
from memr1.rl import advantages as adv_lib
from memr1.rl.critic import critic_values
from memr1.rl.grpo import check_dual_clip, check_kl_and_temperature
from memr1.rl.grpo_layout import Rows
from memr1.rl.logprobs import sequence_logprobs
from memr1.rl.losses import check_reference, kl_to_reference, policy_loss, value_loss
from memr1.rl.update_metrics import pad_frac, policy_metrics, response_metrics

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
    """The PPO update. The fields without a default come from the config's train section
    (`from_config`); the others are variants the shipped configs do not set."""

    clip_eps: float
    gamma: float  # GAE discount and λ (verl: both 1.0)
    lam: float
    kl_beta: float
    kl_estimator: str
    temperature: float  # the rollout temperature: log-probs are under logits / T
    n_micro: int
    dual_clip: float  # bound the loss for A < 0 at c·|A| (verl: c = 3, always on); 0 = off
    clip_eps_high: float | None = None
    value_clip_eps: float = 0.5  # verl's cliprange_value
    vf_coef: float = 1.0  # the critic has its own optimiser, so this only scales its gradients
    logprob_chunk: int = 128

    def __post_init__(self):
        for name in ("gamma", "lam"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"PPO {name}={value!r} (train.{name}): must be in [0, 1]")
        check_kl_and_temperature("PPO", self.kl_estimator, self.temperature)
        check_dual_clip("PPO", self.dual_clip)

    @classmethod
    def from_config(cls, config) -> PPOConfig:
        """The PPO update of a `configs/memr1.py` config (refuses bad settings)."""
        t = config.train
        return cls(
            clip_eps=t.clip_eps,
            gamma=t.gamma,
            lam=t.lam,
            kl_beta=t.kl_beta,
            kl_estimator=t.kl_estimator,
            temperature=t.temperature,
            n_micro=t.n_micro,
            dual_clip=t.dual_clip,
        )


def final_token_rewards(rewards_B: jax.Array, mask_BT: jax.Array) -> jax.Array:
    """[B, T] zeros except the reward on each row's last masked token (none if the row is empty)."""
    t = mask_BT.shape[1]
    last = t - 1 - jnp.argmax(mask_BT[:, ::-1], axis=1)
    onehot = jax.nn.one_hot(last, t, dtype=jnp.float32) * mask_BT.any(axis=1, keepdims=True)
    return onehot * rewards_B.astype(jnp.float32)[:, None]


def old_values_and_logprobs(
    graphdef: Any,
    critic_graphdef: Any,
    cfg: PPOConfig,
    params: Any,
    critic_params: Any,
    mb: dict,
    ref_params: Any = None,
) -> tuple[jax.Array, ...]:
    """(values [b, T], log-probs [b, T][, reference log-probs [b, T]]) of a micro-batch under
    the critic, the policy that sampled it and (given `ref_params`) the KL reference: what
    `prepare` fixes before the first update."""
    values = critic_values(critic_graphdef, rebind(critic_params), mb["tokens"], mb["valid"])
    kw = dict(temperature=cfg.temperature, chunk=cfg.logprob_chunk)
    logp, _ = sequence_logprobs(graphdef, rebind(params), mb["tokens"], mb["valid"], **kw)
    if ref_params is None:
        return values, logp
    ref, _ = sequence_logprobs(graphdef, rebind(ref_params), mb["tokens"], mb["valid"], **kw)
    return values, logp, ref


def with_advantages(
    batch: dict, values_BT: jax.Array, logp_BT: jax.Array, cfg: PPOConfig, ref_logp_BT=None
) -> tuple[dict, dict[str, jax.Array]]:
    """The prepared batch: old_logp (the sampler's when given), old_values, GAE advantages
    whitened over all response tokens of the batch, returns, ref_logp (given one); and the
    prepare metrics."""
    mask = batch["response_mask"] & batch["valid"]
    values = values_BT * mask
    token_rewards = final_token_rewards(batch["rewards"], mask)
    adv, returns = adv_lib.gae(token_rewards, values, mask, gamma=cfg.gamma, lam=cfg.lam)
    out = dict(batch)
    out["old_logp"] = batch["old_logp"] if "old_logp" in batch else logp_BT * mask
    out["old_values"] = values
    out["advantages"] = adv_lib.whiten(adv, mask)
    out["returns"] = returns
    if ref_logp_BT is not None:
        out["ref_logp"] = ref_logp_BT * mask
    n = jnp.maximum(mask.sum(), 1)
    metrics = {
        "reward_mean": batch["rewards"].mean(),
        "value_mean": values.sum() / n,
        "return_mean": returns.sum() / n,
        "advantage_raw_mean": adv.sum() / n,
    }
    return out, metrics


def ppo_loss(graphdef: Any, critic_graphdef: Any, cfg: PPOConfig) -> Callable:
    """PPO's `loss_factory(parts, frozen)` for `memr1.train.update.make_step`:
    the clipped surrogate on per-token advantages, optional β·KL to a reference, and the
    clipped value loss (the critic's parameters are the second differentiated part).
    Metrics: those of GRPO (pad_frac over whole rows) plus value_loss and vf_clip_frac."""

    def loss_factory(parts, frozen):
        check_reference(parts, "PPO", cfg.kl_beta, "steps.make_ppo_prepare fixes it")
        masks = [b["response_mask"] & b["valid"] for b in parts]
        n_tokens = sum(m.astype(jnp.float32).sum() for m in masks)
        n_seqs = jnp.asarray(sum(m.shape[0] for m in masks), jnp.float32)

        def loss_fn(diff, mb):
            params = merge_params(diff[0], frozen)
            logp, ent = sequence_logprobs(
                graphdef,
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
                dual_clip=cfg.dual_clip or None,
                num_tokens=n_tokens,
            )
            kl_loss, kl_metrics = kl_to_reference(
                mb,
                logp,
                m,
                beta=cfg.kl_beta,
                estimator=cfg.kl_estimator,
                aggregation="token_mean",
                n_tokens=n_tokens,
                n_seqs=n_seqs,
            )
            values = critic_values(critic_graphdef, diff[1], mb["tokens"], mb["valid"])
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

        padding = pad_frac([b["valid"] for b in parts])
        lengths = response_metrics([Rows().reply_lengths(b) for b in parts])
        return loss_fn, {"n_tokens": n_tokens, "pad_frac": padding, **lengths}

    return loss_factory
