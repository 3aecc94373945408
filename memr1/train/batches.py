"""Host-side packing of sampled completions into fixed-shape GRPO batches.

A batch row is a prompt (left-padded to a bucket width) followed by its response (right-padded
to the rollout's `max_new_tokens`). Widths come from a small set of buckets so the jitted step
compiles a handful of programs over a run, not one per batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memr1.pipeline.policy import Completion
from memr1.rl.advantages import grpo_advantages
from memr1.sampling.sampler import default_bucket


def pack_rollout(
    groups: Sequence[Sequence[Completion]],
    rewards_BG: np.ndarray,
    *,
    response_width: int,
    pad_id: int,
    ddof: int = 1,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """RL batch fields from B groups of G completions and their rewards: GRPO's (see
    memr1.train.grpo, group advantages included) plus `rewards` [B*G] for PPO's prepare.

    The sampler's per-token log-probs become `old_logp` (and `sampler_logp`, for the
    sampler-vs-trainer gap metric): the rollout policy's own probabilities under the full
    temperature-scaled distribution.
    """
    rows = [c for group in groups for c in group]
    g = len(groups[0])
    if any(len(group) != g for group in groups):
        raise ValueError("every group needs the same number of samples")
    prompt_width = default_bucket(max(len(c.prompt_ids) for c in rows))
    width = prompt_width + response_width
    n = len(rows)
    tokens = np.full((n, width), pad_id, np.int32)
    valid = np.zeros((n, width), bool)
    response = np.zeros((n, width), bool)
    logp = np.zeros((n, width), np.float32)
    for i, c in enumerate(rows):
        p, r = len(c.prompt_ids), min(len(c.ids), response_width)
        tokens[i, prompt_width - p : prompt_width] = c.prompt_ids
        valid[i, prompt_width - p : prompt_width] = True
        tokens[i, prompt_width : prompt_width + r] = c.ids[:r]
        valid[i, prompt_width : prompt_width + r] = True
        response[i, prompt_width : prompt_width + r] = True
        logp[i, prompt_width : prompt_width + r] = c.logprobs[:r]
    adv_BG, stats = grpo_advantages(np.asarray(rewards_BG, np.float32).reshape(-1, g), ddof=ddof)
    batch = {
        "tokens": tokens,
        "valid": valid,
        "response_mask": response,
        "advantages": np.asarray(adv_BG, np.float32).reshape(-1),
        "rewards": np.asarray(rewards_BG, np.float32).reshape(-1),
        "old_logp": logp,
        "sampler_logp": logp,
    }
    return batch, {k: float(v) for k, v in stats.items()}
