"""Supervised fine-tuning: next-token cross-entropy on the target tokens of (prompt, target) pairs.

Batch fields (rows over data × fsdp, B divisible by n_micro × data × fsdp):
  tokens     [B, T] int32  prompt then target, padded on either side.
  valid      [B, T] bool   real (non-padding) tokens.
  loss_mask  [B, T] bool   tokens whose prediction is trained (the target, usually with its EOS);
                           entry t means "predict tokens[:, t] from tokens[:, :t]".
  loss_weight [B, T] float optional: each trained token's weight (1 where a row names none).

The loss is the token mean over every target token of the whole batch (the global count, also
under gradient accumulation), so long targets weigh more than short ones, as in TRL's default.
With ``loss_weight`` it is the weighted mean, sum(w · NLL) / sum(w) over the batch's trained
tokens: a row's ``target_weights`` (character spans of its target, `read_sft_pairs`) make a
few decisive tokens, such as a manager reply's operation word, a larger share of the loss
without changing what the rest of the reply is trained to be. Validation's loss stays the
unweighted NLL per token.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from memr1.models.params import merge_params
from memr1.rl.logprobs import sequence_logprobs
from memr1.rl.losses import masked_mean
from memr1.rl.update_metrics import pad_frac
from memr1.train.state import TrainSetup, TrainState
from memr1.train.update import Batch, StepSpec, make_step

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
    setup: TrainSetup, cfg: SFTConfig, *, grads_only: bool = False
) -> Callable[[TrainState, Batch], tuple[TrainState, dict[str, jax.Array]]]:
    """The jitted, donating SFT update `step(state, batch) -> (state, metrics)`.

    Metrics: loss (mean NLL per target token), n_tokens, pad_frac (the share of the batch's
    token positions that are padding), grad_norm, lr, update_refused.
    `grads_only=True` builds the non-updating gradient function instead (`update.make_step`).
    """
    return make_step(setup, sft_spec(setup, cfg), grads_only=grads_only)


def sft_spec(setup: TrainSetup, cfg: SFTConfig) -> StepSpec:
    """The SFT update as `update.make_step` builds it: the token-mean NLL of the trained
    tokens (weighted by `loss_weight` where the batch has it)."""

    def loss_factory(parts, frozen):
        n_tokens = sum(p["loss_mask"].astype(jnp.float32).sum() for p in parts)
        denom = sum(_weights(p).sum() for p in parts)

        def loss_fn(diff, mb):
            params = merge_params(diff[0], frozen)
            logp, _ = sequence_logprobs(
                setup.graphdef, params, mb["tokens"], mb["valid"], chunk=cfg.logprob_chunk
            )
            return masked_mean(-logp, _weights(mb), denom), {}

        return loss_fn, {"n_tokens": n_tokens, "pad_frac": pad_frac([p["valid"] for p in parts])}

    return StepSpec("SFT", FIELDS, cfg.n_micro, loss_factory)


def _weights(mb) -> jax.Array:
    """Each position's weight in the loss: the trained tokens' (loss_weight where given)."""
    mask = (mb["loss_mask"] & mb["valid"]).astype(jnp.float32)
    return mask * mb["loss_weight"] if "loss_weight" in mb else mask


def sft_batch(
    prompts: list[list[int]],
    targets: list[list[int]],
    length: int,
    pad_id: int = 0,
    weights: Sequence[Sequence[float] | None] | None = None,
) -> dict[str, np.ndarray]:
    """Right-padded SFT batch from token lists: prompt + target, the loss on the target only.

    ``weights``: per row, one weight per target token, or None for 1 on each; given (even all
    None), the batch has ``loss_weight``; without (None), it has none and trains as before.

    Raises:
      ValueError: if a prompt + target pair is longer than `length` (naming the row), or a
        row's weights do not match its target.
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
    batch = {"tokens": tokens, "valid": valid, "loss_mask": loss_mask}
    if weights is not None:
        loss_weight = loss_mask.astype(np.float32)
        for i, (p, t, w) in enumerate(zip(prompts, targets, weights, strict=True)):
            if w is None:
                continue
            if len(w) != len(t):
                raise ValueError(f"SFT row {i}: {len(w)} weights for {len(t)} target tokens")
            loss_weight[i, len(p) : len(p) + len(t)] = w
        batch["loss_weight"] = loss_weight
    return batch


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


def read_sft_pairs(path: str, policy) -> list[tuple[list[int], list[int], list[float] | None]]:
    """Tokenised (prompt, target + EOS, weights) triples from a JSONL file of {messages, target}
    rows, each with optional ``target_weights``: ``[[start, end, weight], ...]``, character
    spans of the target whose tokens (any token overlapping the span) get that weight in the
    loss instead of 1 (the EOS keeps 1). Weights are None for a row without spans.

    A row may instead be {prompt_ids, target_ids}: token ids taken as they are (no chat
    template, no EOS), for a task that is not a conversation, such as rehearsing a
    pretraining task in the same batches (experiments/cpu_demo: the copy task).

    Raises:
      ValueError: naming the file and line, for a row that is not such an object, a prompt over
        agents.max_prompt_tokens, a span outside its target or with a weight that is not a
        finite number >= 0, or an id row with no target or an id outside the tokenizer's.
    """
    pairs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                row = json.loads(line)
                if isinstance(row, dict) and "prompt_ids" in row:
                    pairs.append((*_id_row(row, policy, f"{path}: line {n}"), None))
                    continue
                messages, target = row["messages"], row["target"]
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                msg = f"{path}: line {n}: not a {{messages, target}} object ({err})"
                raise ValueError(msg) from err
            try:
                prompt, _ = policy.encode(policy.render(messages))
            except ValueError as err:  # over agents.max_prompt_tokens: never cut at its head
                raise ValueError(f"{path}: line {n}: {err}") from err
            spans = row.get("target_weights")
            if spans is None:
                ids, weights = policy.tokenizer.encode(target, add_special_tokens=False), None
            else:
                ids, weights = _weighted_ids(policy.tokenizer, target, spans, f"{path}: line {n}")
                weights.append(1.0)  # the EOS
            pairs.append((prompt.tolist(), list(ids) + [policy.eos_ids[0]], weights))
    if not pairs:
        raise ValueError(f"{path}: no SFT pairs")
    return pairs


def _id_row(row: Mapping, policy, where: str) -> tuple[list[int], list[int]]:
    """The (prompt, target) ids of a {prompt_ids, target_ids} row, checked."""
    prompt, target = row["prompt_ids"], row["target_ids"]  # KeyError: not such an object
    if not all(
        isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
        for ids in (prompt, target)
    ):
        raise ValueError(f"{where}: prompt_ids and target_ids must be lists of token ids")
    if not target:
        raise ValueError(f"{where}: no target ids")
    vocab = len(policy.tokenizer)
    bad = [i for i in prompt + target if not 0 <= i < vocab]
    if bad:
        raise ValueError(f"{where}: token id {bad[0]} is outside the tokenizer's 0..{vocab - 1}")
    limit = policy.max_prompt_tokens
    if len(prompt) > limit:
        raise ValueError(
            f"{where}: {len(prompt)} prompt ids, over agents.max_prompt_tokens={limit}"
        )
    return list(prompt), list(target)


def _weighted_ids(tokenizer, target: str, spans, where: str) -> tuple[list[int], list[float]]:
    """The target's token ids and each one's weight from character ``spans``."""
    try:
        enc = tokenizer(target, add_special_tokens=False, return_offsets_mapping=True)
    except NotImplementedError as err:  # a slow tokenizer keeps no character offsets
        raise ValueError(f"{where}: target_weights need a fast tokenizer ({err})") from err
    ids, offsets = list(enc["input_ids"]), enc["offset_mapping"]
    weights = [1.0] * len(ids)
    try:
        spans = [(int(a), int(b), float(w)) for a, b, w in spans]
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: target_weights: expected [start, end, weight] spans") from err
    for start, end, weight in spans:
        if not 0 <= start < end <= len(target) or not math.isfinite(weight) or weight < 0:
            raise ValueError(
                f"{where}: target_weights span {[start, end, weight]} is not inside the "
                f"{len(target)}-character target with a finite weight >= 0"
            )
        for i, (a, b) in enumerate(offsets):
            if a < end and start < b:
                weights[i] = weight
    return ids, weights
