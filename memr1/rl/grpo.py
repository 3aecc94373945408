"""The GRPO update: PPO-clipped surrogate on group-normalised advantages, plus a KL penalty.

Two layouts of the same rows. Packed (`train.shared_prompt`, `GRPOConfig.pack_group` = G): one
row per group, the prompt once and the G replies after it (`memr1.rl.packing`, its fields), the
per-token fields in reply columns; `memr1.rl.logprobs.packed_logprobs` scores it. Row layout
(pack_group 1), batch fields (rows = B prompts × G samples, prompt-major like the sampler's
output):
  tokens         [BG, T] int32  prompt (left-padded) then response (right-padded).
  valid          [BG, T] bool   real tokens.
  prompt_mask    [BG, P] bool   real prompt tokens (what `memr1.rl.packing.pack_groups` packs
                 the rows by; the row-layout update does not read it).
  response_mask  [BG, T] bool   response tokens: the loss is on these only.
  advantages     [BG]  float32  one advantage per sequence.
  old_logp       [BG, T] optional: log-probs of the policy that sampled (from the sampler, or
                 recomputed with `update.make_logprob_fn` before several epochs). Absent, the
                 ratio's denominator is the current log-prob under stop_gradient, which is exact
                 for the first (or only) update of a fresh batch: the ratio is 1, its gradient is
                 the policy gradient.
  sampler_logp   [BG, T] optional: the sampler's log-probs, only to log the sampler-vs-trainer gap
                 (pass the same array as old_logp when the sampler's values are the ratio's
                 denominator).
  ref_logp       [BG, T] with β > 0: the KL reference's log-probs, computed once per rollout by
                 a forward-only program (`memr1.train.steps.make_grpo_reference`, the loss's own
                 log-prob function on the reference weights), as verl's `compute_ref_log_prob`
                 runs before `update_actor`: the update program never runs the reference.

Advantages are computed OUTSIDE the step, with `memr1.rl.advantages.grpo_advantages` on the
[B, G] rewards (see `grpo_batch_from_rollout`): rewards come from the host (exact-match scoring
of decoded answers), the group statistics (the zero-signal rate) belong to the rollout's metrics,
and a step that takes per-row advantages works for any micro-batch split or shuffling of rows.

KL: β·KL(policy ‖ reference) with a named estimator (k3 by default), read off `ref_logp`. With
β = 0 the batch needs no `ref_logp` and no reference pass exists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from memr1.models.params import merge_params
from memr1.rl import advantages as adv_lib
from memr1.rl import packing
from memr1.rl.logprobs import packed_logprobs, sequence_logprobs
from memr1.rl.losses import KL_ESTIMATORS, aggregate, kl_penalty, masked_mean, policy_loss

FIELDS = ("tokens", "valid", "response_mask", "advantages")


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


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
    """The GRPO update. The fields without a default come from the config's train section
    (`from_config`); the others are variants the shipped configs do not set.

    `pack_group` G > 1: the batch is packed, one row per group of G samples
    (`memr1.rl.packing`): each group's prompt runs once and no reply is padded to another's
    length; 1: every sample is a row of its own. The widths are the batch's own
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
        if self.pack_group > 1 and self.aggregation != "token_mean":
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
        fields = packing.PACKED_FIELDS if self.packed else FIELDS
        return fields + (("ref_logp",) if self.kl_beta != 0.0 else ())

    def logprob_fields(self) -> tuple[str, ...]:
        """The batch fields `logprobs` reads."""
        if self.packed:
            return ("tokens", "segments", "positions", "target_index", "predictor_index",
                    "response_mask")  # fmt: skip
        return ("tokens", "valid")

    def logprobs(self, graphdef, params, mb) -> tuple[jax.Array, jax.Array]:
        """(logp, entropy) of a (micro-)batch's tokens under `params`, as the loss reads them:
        the policy's in the update, the reference's in `make_grpo_reference`."""
        kw = dict(temperature=self.temperature, chunk=self.logprob_chunk)
        if self.packed:
            return packed_logprobs(graphdef, params, mb, **kw)
        return sequence_logprobs(graphdef, params, mb["tokens"], mb["valid"], **kw)

    def loss_mask(self, mb) -> jax.Array:
        """The tokens the loss is on: the replies' (reply columns when packed)."""
        return mb["response_mask"] if self.packed else mb["response_mask"] & mb["valid"]

    def token_advantages(self, mb) -> jax.Array:
        """Advantages broadcastable to the log-probs: per reply column, or one per row."""
        return mb["advantages"] if self.packed else mb["advantages"][:, None]

    def replies(self, batch) -> int:
        """How many replies (GRPO samples) the batch holds."""
        return batch["response_mask"].shape[0] * self.pack_group


def check_reference(parts, algo: str, beta: float, source: str) -> None:
    """Refuses (at trace time) a batch part without the `ref_logp` a KL β > 0 reads."""
    for batch in parts:
        if beta != 0.0 and "ref_logp" not in batch:
            raise ValueError(
                f"{algo} with kl_beta={beta} (train.kl_beta) needs the batch field 'ref_logp' "
                f"({source}); the batch has {sorted(batch)}"
            )


def kl_to_reference(
    mb: dict,
    logp_BT: jax.Array,
    mask_BT: jax.Array,
    *,
    beta: float,
    estimator: str,
    aggregation: str,
    n_tokens: jax.Array,
    n_seqs: jax.Array,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """β·KL term of a micro-batch (globally normalised) and its metric; zero if β = 0.

    The reference's log-probs are the batch's `ref_logp`, scored once per rollout by the
    policy's own log-prob function on the reference weights (see the module docstring).
    """
    if beta == 0.0:
        return jnp.zeros((), jnp.float32), {}
    kl_BT = kl_penalty(logp_BT, jax.lax.stop_gradient(mb["ref_logp"]), estimator)
    kl = aggregate(kl_BT, mask_BT, aggregation, num_tokens=n_tokens, num_sequences=n_seqs)
    return beta * kl, {"kl": kl}


def policy_metrics(
    logp_BT, ent_BT, mask_BT, pg_metrics: dict, mb: dict, n_tokens: jax.Array
) -> dict[str, jax.Array]:
    """Token-weighted metrics of one micro-batch, scaled so that summing micro-batches is exact."""
    weight = mask_BT.astype(jnp.float32).sum() / jnp.maximum(n_tokens, 1.0)
    out = {k: v * weight for k, v in pg_metrics.items()}
    out["entropy"] = masked_mean(jax.lax.stop_gradient(ent_BT), mask_BT, n_tokens)
    if "sampler_logp" in mb:
        gap_BT = jax.lax.stop_gradient(logp_BT) - mb["sampler_logp"]
        out["logprob_gap_abs"] = masked_mean(jnp.abs(gap_BT), mask_BT, n_tokens)
        out["logprob_gap"] = masked_mean(gap_BT, mask_BT, n_tokens)
    return out


def response_metrics(masks, reply_segments=None, group: int = 1) -> dict:
    """Mean and longest reply length over a batch's parts (`masks`: one [rows, T] mask or a
    list, one a width class); on packed rows, per reply (`reply_segments`, 1..G)."""
    masks = masks if isinstance(masks, list | tuple) else [masks]
    if reply_segments is None:
        lengths = [m.astype(jnp.float32).sum(-1) for m in masks]
    else:
        segs = reply_segments if isinstance(reply_segments, list | tuple) else [reply_segments]
        lengths = []
        for mask_BT, seg in zip(masks, segs, strict=True):
            one_hot = seg[..., None] == jnp.arange(1, group + 1)
            lengths.append((one_hot & mask_BT[..., None]).astype(jnp.float32).sum(1).reshape(-1))
    lengths = jnp.concatenate(lengths)
    return {"response_length": lengths.mean(), "response_length_max": lengths.max()}


def pad_frac(valids) -> jax.Array:
    """The share of the update's token positions that are padding, over every part (`valids`:
    one [rows, T] mask or a list; packed rows: of the packed positions, each group's prompt
    once)."""
    valids = valids if isinstance(valids, list | tuple) else [valids]
    real = sum(v.astype(jnp.float32).sum() for v in valids)
    return 1.0 - real / sum(v.size for v in valids)


def grpo_loss(graphdef: Any, cfg: GRPOConfig) -> Callable:
    """GRPO's `loss_factory(parts, frozen) -> (loss_fn, batch_metrics)` for
    `memr1.train.update.make_step` (built into the jitted step by `memr1.train.steps`).

    `loss_fn(diff, mb)` is the clipped surrogate on per-sequence advantages plus β·KL to the
    reference, normalised over the whole batch's response tokens (every width class's, `parts`)
    so that micro-batches sum to it.
    Metrics: pg_loss, kl (β > 0), clip_frac, dual_clip_frac, ratio_mean, approx_kl, entropy,
    logprob_gap / logprob_gap_abs (with sampler_logp), response_length(_max), n_tokens, pad_frac
    (the share of the update's positions that are padding).
    """

    def loss_factory(parts, frozen):
        check_reference(parts, "GRPO", cfg.kl_beta, "steps.make_grpo_reference")
        masks = [cfg.loss_mask(b) for b in parts]
        n_tokens = sum(m.astype(jnp.float32).sum() for m in masks)
        n_seqs = jnp.asarray(sum(cfg.replies(b) for b in parts), jnp.float32)

        def loss_fn(diff, mb):
            params = merge_params(diff[0], frozen)
            logp, ent = cfg.logprobs(graphdef, params, mb)
            m = cfg.loss_mask(mb)
            old = mb["old_logp"] if "old_logp" in mb else jax.lax.stop_gradient(logp)
            pg, pg_metrics = policy_loss(
                logp,
                old,
                cfg.token_advantages(mb),
                m,
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
                m,
                beta=cfg.kl_beta,
                estimator=cfg.kl_estimator,
                aggregation=cfg.aggregation,
                n_tokens=n_tokens,
                n_seqs=n_seqs,
            )
            metrics = policy_metrics(logp, ent, m, pg_metrics, mb, n_tokens)
            metrics.update(kl_metrics, pg_loss=pg)
            return pg + kl_loss, metrics

        segments = [b["reply_segment"] for b in parts] if cfg.packed else None
        lengths = response_metrics(masks, segments, cfg.pack_group)
        padding = pad_frac([b["valid"] for b in parts])
        counts = {"n_tokens": n_tokens, "pad_frac": padding, "width_classes": len(parts)}
        return loss_fn, {**counts, **lengths}

    return loss_factory


def grpo_batch_from_rollout(rollout: Any, rewards_BG: jax.Array, *, ddof: int = 1) -> tuple:
    """Turns a sampler output (`memr1.sampling.SampleOutput`) and rewards into a GRPO batch.

    Row r of the rollout is sample r % G of prompt r // G, so the [B, G] advantages flatten
    row-major onto the rows. The sampler's log-probs (under the full temperature-scaled
    distribution) become both `old_logp` and `sampler_logp`.

    Returns:
      (batch dict, group statistics of `grpo_advantages`, e.g. zero_signal_frac).
    """
    adv_BG, stats = adv_lib.grpo_advantages(rewards_BG, ddof=ddof)
    prompt_mask = rollout.prompt_mask.astype(bool)
    resp_mask = rollout.mask.astype(bool)
    zeros = jnp.zeros(rollout.prompt_tokens.shape, jnp.float32)
    logp = jnp.concatenate([zeros, rollout.logprobs.astype(jnp.float32)], axis=1)
    batch = {
        "tokens": jnp.concatenate([rollout.prompt_tokens, rollout.tokens], axis=1),
        "valid": jnp.concatenate([prompt_mask, resp_mask], axis=1),
        "prompt_mask": prompt_mask,
        "response_mask": jnp.concatenate([jnp.zeros_like(prompt_mask), resp_mask], axis=1),
        "advantages": adv_BG.reshape(-1),
        "old_logp": logp,
        "sampler_logp": logp,
    }
    return batch, stats
