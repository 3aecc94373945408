"""How a GRPO batch lays out its samples, and what the loss (`memr1.rl.grpo`) reads of each.

The loss needs four things of a (micro-)batch, whatever its layout: the log-probs of its tokens,
the mask of the tokens it is on, advantages broadcastable to those log-probs, and (for its
metrics) each reply's length. Each layout gives them.

Rows (`Rows`, `GRPOConfig.pack_group` 1): every sample is a row of its own, B prompts × G
samples, prompt-major like the sampler's output:
  tokens         [BG, T] int32  prompt (left-padded) then response (right-padded).
  valid          [BG, T] bool   real tokens.
  prompt_mask    [BG, P] bool   real prompt tokens (what `memr1.rl.packing.pack_groups` packs
                 the rows by; the row-layout update does not read it).
  response_mask  [BG, T] bool   response tokens: the loss is on these only.
  advantages     [BG]  float32  one advantage per sequence.
  old_logp       [BG, T] optional: log-probs of the policy that sampled (from the sampler, or
                 recomputed with `memr1.train.update.make_logprob_fn` before several epochs).
                 Absent, the ratio's denominator is the current log-prob under stop_gradient,
                 which is exact for the first (or only) update of a fresh batch: the ratio is 1,
                 its gradient is the policy gradient.
  sampler_logp   [BG, T] optional: the sampler's log-probs, only to log the sampler-vs-trainer
                 gap (pass the same array as old_logp when the sampler's values are the ratio's
                 denominator).
  ref_logp       [BG, T] with β > 0: the KL reference's log-probs, computed once per rollout by a
                 forward-only program (`memr1.train.steps.make_grpo_reference`, the loss's own
                 log-prob function on the reference weights), as verl's `compute_ref_log_prob`
                 runs before `update_actor`: the update program never runs the reference.

Packed (`Packed`, pack_group G > 1, `train.shared_prompt`): one row per group, the prompt once
and the G replies after it (`memr1.rl.packing`, which lists its fields); the per-token fields
(response_mask, advantages, old_logp, sampler_logp, ref_logp) are in reply columns [N, L], and
`memr1.rl.logprobs.packed_logprobs` scores them. The log-probs are the row layout's, without
running a group's prompt G times or padding a reply to another's length.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from memr1.rl import packing
from memr1.rl.logprobs import packed_logprobs, sequence_logprobs

ROW_FIELDS = ("tokens", "valid", "response_mask", "advantages")


@dataclasses.dataclass(frozen=True)
class Rows:
    """One sample a row (see the module docstring)."""

    group: ClassVar[int] = 1  # replies a row
    fields: ClassVar[tuple[str, ...]] = ROW_FIELDS  # what the update reads (`ref_logp` apart)
    logprob_fields: ClassVar[tuple[str, ...]] = ("tokens", "valid")  # what `logprobs` reads

    def logprobs(self, graphdef: Any, params: Any, mb, *, temperature: float, chunk: int):
        """(logp_BT, entropy_BT) of the rows' tokens under `params`."""
        kw = dict(temperature=temperature, chunk=chunk)
        return sequence_logprobs(graphdef, params, mb["tokens"], mb["valid"], **kw)

    def loss_mask(self, mb) -> jax.Array:
        """[B, T]: the response's real tokens."""
        return mb["response_mask"] & mb["valid"]

    def token_advantages(self, mb) -> jax.Array:
        """[B, 1]: each row's advantage, for every one of its tokens."""
        return mb["advantages"][:, None]

    def reply_lengths(self, part) -> jax.Array:
        """[replies] float32: the length of each reply of a batch (part)."""
        return self.loss_mask(part).astype(jnp.float32).sum(-1)


@dataclasses.dataclass(frozen=True)
class Packed:
    """One group of `group` replies a row, in reply columns (see the module docstring)."""

    group: int
    fields: ClassVar[tuple[str, ...]] = packing.PACKED_FIELDS
    logprob_fields: ClassVar[tuple[str, ...]] = (
        "tokens", "segments", "positions", "target_index", "predictor_index", "response_mask",
    )  # fmt: skip

    def logprobs(self, graphdef: Any, params: Any, mb, *, temperature: float, chunk: int):
        """(logp_NL, entropy_NL) of the replies' tokens under `params`, in reply columns."""
        return packed_logprobs(graphdef, params, mb, temperature=temperature, chunk=chunk)

    def loss_mask(self, mb) -> jax.Array:
        """[N, L]: the reply columns that hold a token."""
        return mb["response_mask"]

    def token_advantages(self, mb) -> jax.Array:
        """[N, L]: each reply column's advantage (its reply's)."""
        return mb["advantages"]

    def reply_lengths(self, part) -> jax.Array:
        """[N * group] float32: the length of each reply, by its segment 1..group."""
        one_hot = part["reply_segment"][..., None] == jnp.arange(1, self.group + 1)
        mask = part["response_mask"][..., None]
        return (one_hot & mask).astype(jnp.float32).sum(1).reshape(-1)


Layout = Rows | Packed


def layout_of(pack_group: int) -> Layout:
    """The layout of a GRPO batch whose rows hold `pack_group` replies each (1: rows)."""
    return Packed(pack_group) if pack_group > 1 else Rows()
