"""Supervised fine-tuning: next-token cross-entropy on the target tokens of (prompt, target) pairs.

Batch fields (rows over data × fsdp, B divisible by n_micro × data × fsdp):
  tokens     [B, T] int32  prompt then target, padded on either side.
  valid      [B, T] bool   real (non-padding) tokens.
  loss_mask  [B, T] bool   tokens whose prediction is trained (the target, usually with its EOS);
                           entry t means "predict tokens[:, t] from tokens[:, :t]".

The loss is the token mean over every target token of the whole batch (the global count, also
under gradient accumulation), so long targets weigh more than short ones, as in TRL's default.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from memr1.models.params import merge_params
from memr1.rl.grpo import pad_frac
from memr1.rl.logprobs import sequence_logprobs
from memr1.rl.losses import masked_mean
from memr1.train.state import TrainSetup, TrainState
from memr1.train.update import Batch, BeforeGuard, make_step

FIELDS = ("tokens", "valid", "loss_mask")


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    n_micro: int  # micro-batches per step (gradient accumulation): train.n_micro
    logprob_chunk: int = 128  # sequence chunk of the vocabulary projection

    @classmethod
    def from_config(cls, config) -> SFTConfig:
        """The SFT update of a `configs/memr1.py` config."""
        return cls(n_micro=config.train.n_micro)


def make_sft_step(
    setup: TrainSetup,
    cfg: SFTConfig,
    *,
    grads_only: bool = False,
    before_guard: BeforeGuard | None = None,
) -> Callable[[TrainState, Batch], tuple[TrainState, dict[str, jax.Array]]]:
    """The jitted, donating SFT update `step(state, batch) -> (state, metrics)`.

    Metrics: loss (mean NLL per target token), n_tokens, pad_frac (the share of the batch's
    token positions that are padding), grad_norm, lr, update_refused.
    `grads_only=True` builds the non-updating gradient function instead; `before_guard` is for
    fault drills (both: `update.make_step`).
    """

    def loss_factory(parts, frozen):
        n_tokens = sum(p["loss_mask"].astype(jnp.float32).sum() for p in parts)

        def loss_fn(diff, mb):
            params = merge_params(diff[0], frozen)
            logp, _ = sequence_logprobs(
                setup.graphdef, params, mb["tokens"], mb["valid"], chunk=cfg.logprob_chunk
            )
            mask = mb["loss_mask"] & mb["valid"]
            return masked_mean(-logp, mask, n_tokens), {}

        return loss_fn, {"n_tokens": n_tokens, "pad_frac": pad_frac([p["valid"] for p in parts])}

    return make_step(
        setup,
        name="SFT",
        required=FIELDS,
        n_micro=cfg.n_micro,
        loss_factory=loss_factory,
        grads_only=grads_only,
        before_guard=before_guard,
    )


def sft_batch(
    prompts: list[list[int]], targets: list[list[int]], length: int, pad_id: int = 0
) -> dict[str, np.ndarray]:
    """Right-padded SFT batch from token lists: prompt + target, the loss on the target only.

    Raises:
      ValueError: if a prompt + target pair is longer than `length` (naming the row).
    """
    b = len(prompts)
    tokens = np.full((b, length), pad_id, np.int32)
    valid = np.zeros((b, length), bool)
    loss_mask = np.zeros((b, length), bool)
    for i, (p, t) in enumerate(zip(prompts, targets, strict=True)):
        n = len(p) + len(t)
        if n > length:
            raise ValueError(f"SFT row {i}: prompt {len(p)} + target {len(t)} > length {length}")
        tokens[i, :n] = list(p) + list(t)
        valid[i, :n] = True
        loss_mask[i, len(p) : n] = True
    return {"tokens": tokens, "valid": valid, "loss_mask": loss_mask}


def eval_sft_loss(
    setup: TrainSetup, params: Any, batch: Mapping[str, Any], chunk: int = 128
) -> jax.Array:
    """Mean NLL per target token of a batch under `params` (no update), e.g. for validation."""
    logp, _ = sequence_logprobs(
        setup.graphdef,
        params,
        jnp.asarray(batch["tokens"]),
        jnp.asarray(batch["valid"]),
        chunk=chunk,
    )
    mask = jnp.asarray(batch["loss_mask"]) & jnp.asarray(batch["valid"])
    return masked_mean(-logp, mask, mask.astype(jnp.float32).sum())


def read_sft_pairs(path: str, policy) -> list[tuple[list[int], list[int]]]:
    """Tokenised (prompt, target + EOS) pairs from a JSONL file of {messages, target}."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                row = json.loads(line)
                messages, target = row["messages"], row["target"]
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                msg = f"{path}: line {n}: not a {{messages, target}} object ({err})"
                raise ValueError(msg) from err
            try:
                prompt, _ = policy.encode(policy.render(messages))
            except ValueError as err:  # over agents.max_prompt_tokens: never cut at its head
                raise ValueError(f"{path}: line {n}: {err}") from err
            ids = policy.tokenizer.encode(target, add_special_tokens=False)
            pairs.append((prompt.tolist(), list(ids) + [policy.eos_ids[0]]))
    if not pairs:
        raise ValueError(f"{path}: no SFT pairs")
    return pairs
