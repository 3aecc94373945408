"""What a sampler call returns, and how its rows are split over the devices that decode them."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class SampleOutput(NamedTuple):
    """What one rollout returns (device arrays; rows are prompt-major: row = b * G + g).

    tokens: [B*G, max_new] int32 generated tokens, `pad_id` after each row's end.
    logprobs: [B*G, max_new] float32 log-probs of the taken tokens under log_softmax(logits / T)
      (log_softmax(logits) for greedy), 0 after each row's end.
    lengths: [B*G] int32 generated tokens per row, including the EOS / stop tokens.
    mask: [B*G, max_new] bool, True on the first `lengths` columns.
    done: [B*G] bool, True where the row stopped on EOS or a stop sequence, False where it ran
      out of `max_new_tokens`.
    prompt_tokens: [B*G, P] int32 the left-padded prompts (P is the bucket width), repeated G times.
    prompt_mask: [B*G, P] bool, True on real prompt tokens.
    steps: [] int32 columns the call generated: its longest live row's length (the decode loop
      stops when every live row has), or max_new.
    """

    tokens: jax.Array
    logprobs: jax.Array
    lengths: jax.Array
    mask: jax.Array
    done: jax.Array
    prompt_tokens: jax.Array
    prompt_mask: jax.Array
    steps: jax.Array


def sample_output(state, steps, prompt_BP, valid_BP, g: int, new: int, row_split) -> SampleOutput:
    """The decode loop's final state as a SampleOutput, gathered whole under a row split."""
    tokens_RT, logps_RT, done_R, _, count_R = state
    out = SampleOutput(
        tokens=tokens_RT,
        logprobs=logps_RT,
        lengths=count_R,
        mask=jnp.arange(new)[None, :] < count_R[:, None],
        done=done_R,
        prompt_tokens=jnp.repeat(prompt_BP, g, axis=0),
        prompt_mask=jnp.repeat(valid_BP, g, axis=0),
        steps=steps,
    )
    if row_split is None:
        return out
    # Small outputs, gathered once: every process can read every row.
    whole = jax.sharding.NamedSharding(row_split.mesh, jax.sharding.PartitionSpec())
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, whole), out)


def splitter(row_split: jax.sharding.NamedSharding | None):
    """Constrains an array's leading (row) axis to `row_split`, its other axes left free."""
    if row_split is None:
        return lambda x: x
    spec = row_split.spec[0]

    def split(x):
        rest = (jax.sharding.PartitionSpec.UNCONSTRAINED,) * (x.ndim - 1)
        sharding = jax.sharding.NamedSharding(
            row_split.mesh, jax.sharding.PartitionSpec(spec, *rest)
        )
        return jax.lax.with_sharding_constraint(x, sharding)

    return split
