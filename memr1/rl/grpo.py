"""The GRPO update: PPO-clipped surrogate on group-normalised advantages, plus a KL penalty.

For every response token t of a sample with advantage A, under the policy π being trained, the
policy that sampled π_old and a frozen reference π_ref:

    loss = -min(r·A, clip(r, 1 − ε, 1 + ε_high)·A)  (+ dual clip for A < 0)  + β·KL(π ‖ π_ref)
    r    = π(t) / π_old(t)

averaged over every response token of the whole batch (token mean; `grpo_loss` normalises each
micro-batch by the batch's token count, so the micro-batches' gradients sum to the batch's).
`memr1.rl.losses` holds the terms, `memr1.train.update.make_step` runs the loss over
micro-batches inside one jitted, guarded step (`memr1.train.steps.make_grpo_step`).

Advantages are computed OUTSIDE the step, with `memr1.rl.advantages.grpo_advantages` on the
[B, G] rewards (`memr1.train.batches.pack_rollout` turns a rollout into the batch): rewards come
from the host (exact-match scoring of decoded answers), the group statistics (the zero-signal
rate) belong to the rollout's metrics, and a step that takes per-sample advantages works for any
micro-batch split or shuffling of rows.

KL: β·KL(policy ‖ reference) with a named estimator (k3 by default), read off the batch's
`ref_logp`, which a forward-only program scores once per rollout. With β = 0 the batch needs no
`ref_logp` and no reference pass exists.

The batch comes in one of two layouts, one sample a row or one group a row with its prompt once
(`GRPOConfig.pack_group`); `memr1.rl.grpo_layout` holds their fields and what the loss reads of
each (log-probs, the loss's tokens, advantages per token, reply lengths).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from memr1.models.params import merge_params
from memr1.rl.grpo_layout import Layout, layout_of
from memr1.rl.losses import KL_ESTIMATORS, check_reference, kl_to_reference, policy_loss
from memr1.rl.update_metrics import pad_frac, policy_metrics, response_metrics


def grpo_loss(graphdef: Any, cfg: GRPOConfig) -> Callable:
    """GRPO's `loss_factory(parts, frozen) -> (loss_fn, batch_metrics)` for
    `memr1.train.update.make_step` (built into the jitted step by `memr1.train.steps`).

    `parts` is the step's batch as a tuple of width classes (one dict unless the packed groups
    come in several widths); `loss_fn(diff, mb)` is the clipped surrogate plus β·KL of one
    micro-batch, normalised over the response tokens of every part so that micro-batches sum to
    the batch's loss.
    Metrics: pg_loss, kl (β > 0), clip_frac, dual_clip_frac, ratio_mean, approx_kl, entropy,
    logprob_gap / logprob_gap_abs (with sampler_logp), response_length(_max), n_tokens, pad_frac
    (the share of the update's positions that are padding), width_classes.
    """
    layout = cfg.layout

    def loss_factory(parts, frozen):
        check_reference(parts, "GRPO", cfg.kl_beta, "steps.make_grpo_reference")
        n_tokens = sum(layout.loss_mask(b).astype(jnp.float32).sum() for b in parts)
        lengths = [layout.reply_lengths(b) for b in parts]
        n_seqs = jnp.asarray(sum(x.shape[0] for x in lengths), jnp.float32)

        def loss_fn(diff, mb):
            params = merge_params(diff[0], frozen)
            logp, ent = cfg.logprobs(graphdef, params, mb)
            mask = layout.loss_mask(mb)
            # Without the sampler's log-probs the ratio is 1 (the first update of a fresh batch)
            # and its gradient the policy gradient.
            old = mb["old_logp"] if "old_logp" in mb else jax.lax.stop_gradient(logp)
            pg, pg_metrics = policy_loss(
                logp,
                old,
                layout.token_advantages(mb),
                mask,
                clip_eps=cfg.clip_eps,
                clip_eps_high=cfg.clip_eps_high,
                dual_clip=cfg.dual_clip or None,
                aggregation=cfg.aggregation,
                num_tokens=n_tokens,
                num_sequences=n_seqs,
            )
            kl_loss, kl_metrics = kl_to_reference(
                mb,
                logp,
                mask,
                beta=cfg.kl_beta,
                estimator=cfg.kl_estimator,
                aggregation=cfg.aggregation,
                n_tokens=n_tokens,
                n_seqs=n_seqs,
            )
            metrics = policy_metrics(logp, ent, mask, pg_metrics, mb, n_tokens)
            metrics.update(kl_metrics, pg_loss=pg)
            return pg + kl_loss, metrics

        padding = pad_frac([b["valid"] for b in parts])
        counts = {"n_tokens": n_tokens, "pad_frac": padding, "width_classes": len(parts)}
        return loss_fn, {**counts, **response_metrics(lengths)}

    return loss_factory


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
    """The GRPO update. The fields without a default come from the config's train section
    (`from_config`); the others are variants the shipped configs do not set.

    `pack_group` G > 1: the batch is packed, one row per group of G samples
    (`memr1.rl.grpo_layout.Packed`): each group's prompt runs once and no reply is padded to
    another's length; 1: every sample is a row of its own. The widths are the batch's own
    (`memr1.train.batches.rollout_rows`, `memr1.train.loop.make_rl_update`), not a constant.
    `width_classes` K > 1 (packed only): the groups of a step are sorted by length into up to K
    classes of equal count (`classes`: as many as split `n_micro`), each packed at its own width
    and run as its share of the update's micro-batches (`memr1.train.batches.pack_step_classes`);
    the loss is unchanged.
    Packed rows support token_mean aggregation only (seq_mean_token_mean would need the
    per-reply sums of a segment: refused by name).
    """

    clip_eps: float
    kl_beta: float
    kl_estimator: str
    temperature: float  # the rollout temperature: log-probs are under logits / T
    n_micro: int
    pack_group: int
    dual_clip: float  # bound the loss for A < 0 at c·|A| (verl: c = 3, always on); 0 = off
    width_classes: int = 1  # packed groups in this many width classes (batches.pack_step_classes)
    clip_eps_high: float | None = None  # DAPO's asymmetric upper clip; None = clip_eps
    aggregation: str = "token_mean"  # or "seq_mean_token_mean" (row layout only)
    logprob_chunk: int = 128

    def __post_init__(self):
        check_kl_and_temperature("GRPO", self.kl_estimator, self.temperature)
        check_dual_clip("GRPO", self.dual_clip)
        k = self.width_classes
        if k < 1 or (k > 1 and not self.packed):
            raise ValueError(
                f"GRPO width_classes={k} (train.width_classes): needs >= 1, and packed groups "
                f"(train.shared_prompt; pack_group={self.pack_group}) when > 1"
            )
        if self.packed and self.aggregation != "token_mean":
            raise ValueError(
                f"GRPO aggregation={self.aggregation!r} on packed rows (train.shared_prompt, "
                f"pack_group={self.pack_group}): only 'token_mean' is supported there"
            )

    @classmethod
    def from_config(cls, config) -> GRPOConfig:
        """The GRPO update of a `configs/memr1.py` config (refuses bad settings)."""
        t = config.train
        return cls(
            clip_eps=t.clip_eps,
            kl_beta=t.kl_beta,
            kl_estimator=t.kl_estimator,
            temperature=t.temperature,
            n_micro=t.n_micro,
            pack_group=t.group_size if t.shared_prompt else 1,
            dual_clip=t.dual_clip,
            width_classes=t.width_classes,
        )

    @property
    def layout(self) -> Layout:
        """The batch's layout: `grpo_layout.Rows` or `grpo_layout.Packed`."""
        return layout_of(self.pack_group)

    @property
    def packed(self) -> bool:
        return self.pack_group > 1

    @property
    def classes(self) -> tuple[int, int]:
        """(group, width classes): how `batches.pack_step_classes` packs the update's rows.
        Each class is its own micro-batches, so the classes are the largest divisor of n_micro
        up to `width_classes` (1 when the update is one micro-batch); the update logs how many
        it ran as `width_classes`."""
        k = max(d for d in range(1, self.width_classes + 1) if self.n_micro % d == 0)
        return self.pack_group, k

    def required_fields(self) -> tuple[str, ...]:
        """The batch fields the update reads (`ref_logp` only with β > 0)."""
        return self.layout.fields + (("ref_logp",) if self.kl_beta != 0.0 else ())

    def logprob_fields(self) -> tuple[str, ...]:
        """The batch fields `logprobs` reads."""
        return self.layout.logprob_fields

    def logprobs(self, graphdef, params, mb) -> tuple[jax.Array, jax.Array]:
        """(logp, entropy) of a (micro-)batch's tokens under `params`, as the loss reads them:
        the policy's in the update, the reference's in `steps.make_grpo_reference`."""
        return self.layout.logprobs(
            graphdef, params, mb, temperature=self.temperature, chunk=self.logprob_chunk
        )


def check_kl_and_temperature(algo: str, kl_estimator: str, temperature: float) -> None:
    """Refuses a KL estimator or rollout temperature the update cannot use, naming the key."""
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(
            f"{algo} kl_estimator={kl_estimator!r} (train.kl_estimator): expected one of "
            f"{KL_ESTIMATORS}"
        )
    if not temperature > 0:
        raise ValueError(
            f"{algo} temperature={temperature!r} (train.temperature): must be > 0, the "
            "temperature the rollouts were sampled at"
        )


def check_dual_clip(algo: str, dual_clip: float) -> None:
    """Refuses a dual-clip constant that bounds nothing sensible (verl asserts c > 1)."""
    if not (dual_clip == 0.0 or dual_clip > 1.0):
        raise ValueError(
            f"{algo} dual_clip={dual_clip!r} (train.dual_clip): must be > 1 (verl: 3), or 0 for off"
        )
