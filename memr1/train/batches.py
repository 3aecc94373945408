"""Host-side packing of sampled completions into fixed-shape GRPO batches.

A batch row is a prompt (left-padded to a bucket width) followed by its response (right-padded
to a bucket width). Both widths follow the step's own data, the longest prompt and the longest
response on any process, not the rollout's budget: Answer Agent replies of ~50–300 tokens under
a 2,048-token budget would otherwise make most of the update's positions padding. They come from
`width_bucket`'s ladder (four widths an octave), so the jitted step compiles a bounded handful of
programs over a run, not one per batch. The GRPO update packs these rows one group a row
(`pack_step_classes`, `memr1.rl.packing`) when `train.shared_prompt` is on, in
`train.width_classes` classes of groups of similar lengths, each at its own width.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from memr1.env.policy import Completion
from memr1.rl import packing
from memr1.rl.advantages import grpo_advantages, has_reward_spread
from memr1.train import multihost


def width_bucket(need: int, cap: int | None = None, minimum: int = 16) -> int:
    """The padded width of a batch whose longest row part needs `need` columns.

    The ladder has four widths an octave, 2^k · (5/4, 6/4, 7/4, 2) rounded up to multiples of
    16 (16, 32, 48, 64, 80, 96, 112, 128, 160, ..., 2048): at most a quarter of the columns of
    a width above 64 are padding beyond the longest row, and a run compiles at most
    4 · log2(cap / minimum) + 1 widths. `cap` (the budget the rows were cut at) is the widest.
    """
    if need < 1:
        raise ValueError(f"width_bucket: need={need}, expected at least one column")
    width = minimum
    if need > minimum:
        octave = 1 << (need - 1).bit_length()  # the power of two >= need
        steps = [-(-octave * q // 8 // 16) * 16 for q in (5, 6, 7, 8)]
        width = min(w for w in steps if w >= need)
    return width if cap is None else min(width, cap)


def pack_rollout(
    groups: Sequence[Sequence[Completion]],
    rewards_BG: np.ndarray,
    *,
    response_width: int,
    pad_id: int,
    ddof: int = 1,
    prompt_width: int | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """RL batch fields from B groups of G completions and their rewards: GRPO's (see
    memr1.rl.grpo, group advantages included) plus `rewards` [B*G] for PPO's prepare.

    Prompts are left-padded to `prompt_width` (default: the bucket of the longest prompt; the
    processes of a multi-host step pass a common one, see `rollout_rows`), responses
    right-padded to exactly `response_width` columns (longer ones are cut there). `prompt_mask`
    [B*G, prompt_width] marks the real prompt tokens; its width is how packing finds where the
    responses start (`memr1.rl.packing.pack_groups`).

    The sampler's per-token log-probs become `old_logp` (and `sampler_logp`, for the
    sampler-vs-trainer gap metric): the rollout policy's own probabilities under the full
    temperature-scaled distribution.
    """
    rows = [c for group in groups for c in group]
    g = len(groups[0])
    if any(len(group) != g for group in groups):
        raise ValueError("every group needs the same number of samples")
    longest = max(len(c.prompt_ids) for c in rows)
    prompt_width = width_bucket(longest) if prompt_width is None else prompt_width
    if longest > prompt_width:
        raise ValueError(f"a prompt of {longest} tokens does not fit prompt_width={prompt_width}")
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
        "prompt_mask": valid[:, :prompt_width].copy(),
        "response_mask": response,
        "advantages": np.asarray(adv_BG, np.float32).reshape(-1),
        "rewards": np.asarray(rewards_BG, np.float32).reshape(-1),
        "old_logp": logp,
        "sampler_logp": logp,
    }
    return batch, {k: float(v) for k, v in stats.items()}


def rollout_rows(
    groups: Sequence[Sequence[Completion]],
    rewards_BG: np.ndarray,
    rollout_stats: dict[str, float],
    *,
    response_width: int,
    pad_id: int,
    group: int,
    keep: int = 0,
    quantum: int = 0,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """This process's rows of an RL step's batch, and the step's metrics over all processes.

    `groups` and `rewards_BG` [B/P, G] are this process's share of the step's states
    (`multihost.process_slice`), `rollout_stats` its rollout's metrics. `response_width` is the
    rollout's budget (`agents.<stage>_max_new_tokens`): replies are cut there. Rows are packed at
    the `width_bucket` of the step's longest prompt and of its longest reply on any process, so that
    every process's rows have one shape and the update runs as many columns as the data needs
    (the widths are those of every rolled-out group, before any choice below). Advantages are
    per group and a group never spans processes, so they are computed here; PPO's whitening runs
    on the global batch inside its jitted prepare. Choosing groups (`keep` > 0:
    `signal_first_groups`; `quantum` > 0: `keep_signal_groups`) is done on the whole step's
    batch, gathered from every process, exactly as one process holding every row would do it;
    each process then takes its own slice of the kept rows, so every process still feeds as many
    rows as the others, and the choice does not depend on how the signal groups happen to fall
    among the processes.

    Returns:
      (the batch fields of `pack_rollout` for this process's rows, the metrics: the rollout's
      and `pack_rollout`'s over every process, plus the choices' own fractions).
    """
    rows = [c for g in groups for c in g]
    reply = max(min(len(c.ids), response_width) for c in rows)
    mine = [max(len(c.prompt_ids) for c in rows), reply]
    prompt_need, reply_need = np.max(np.asarray(multihost.gather(mine)), axis=0).tolist()
    batch, stats = pack_rollout(
        groups,
        rewards_BG,
        response_width=width_bucket(max(reply_need, 1), cap=response_width),
        pad_id=pad_id,
        prompt_width=width_bucket(prompt_need),
    )
    stats = multihost.mean_over_processes({**rollout_stats, **stats})
    if keep or quantum:
        full = multihost.gather_rows(batch)
        if keep:
            full, picked = signal_first_groups(full, group, keep)
            stats.update(picked)
        if quantum:
            full, kept = keep_signal_groups(full, group, quantum)
            stats.update(kept)
        mine = multihost.process_slice(len(full["advantages"]), "kept rows")
        batch = {k: v[mine] for k, v in full.items()}
    return batch, stats


def pack_step_groups(batch: dict[str, np.ndarray], group: int) -> dict[str, np.ndarray]:
    """This process's rows of a GRPO step packed one group a row, every group at the step's
    one width: `pack_step_classes` with one class."""
    return pack_step_classes(batch, group, 1)[0]


def pack_step_classes(
    batch: dict[str, np.ndarray], group: int, classes: int
) -> tuple[dict[str, np.ndarray], ...]:
    """This process's rows of a GRPO step packed one group a row (`memr1.rl.packing`), in
    `classes` width classes (`train.width_classes`): the groups sorted by the columns they need
    and cut into `classes` runs of equal count, each packed at the `width_bucket` of its own
    longest group and of its own longest run of replies on any process. Every process's class k
    then has one shape, and a step's padding follows its groups' spread of lengths instead of
    padding every group to the step's longest: the update (`memr1.train.update.make_step`)
    runs each class's micro-batches at that class's width, in one program.

    The classes hold whole groups, so the advantages, the loss and its normalisation (over every
    class's tokens) are those of one class; only the order of the groups changes.
    """
    needs = packing.group_needs(batch, group)
    n = len(needs)
    if classes < 1 or n % classes:
        raise ValueError(
            f"train.width_classes={classes}: this process's {n} groups do not split into "
            f"{classes} classes of equal count"
        )
    order = np.argsort(needs[:, 0], kind="stable").reshape(classes, n // classes)
    mine = [[int(needs[c, 0].max()), max(int(needs[c, 1].max()), 1)] for c in order]
    widest = np.max(np.asarray(multihost.gather(mine)), axis=0).tolist()
    out = []
    for c, (need, reply_need) in zip(order, widest, strict=True):
        width = width_bucket(need)
        out.append(
            packing.pack_groups(batch, group, width, min(width_bucket(reply_need), width), c)
        )
    return tuple(out)


def update_tokens(batch: dict[str, np.ndarray], cfg) -> int:
    """The real tokens the update runs for this process's row-layout `batch`: every row's, or
    under packing (`cfg.packed`, a `loop.LoopConfig`) each group's prompt once."""
    real = int(np.sum(batch["valid"]))
    if not cfg.packed:
        return real
    prompts = batch["prompt_mask"]
    return real - int(np.sum(prompts)) + int(np.sum(prompts[:: cfg.group_size]))


def keep_signal_groups(
    batch: dict[str, np.ndarray], group: int, quantum: int
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Drops GRPO groups whose samples all earned the same reward (DAPO's dynamic sampling).

    `batch` is `pack_rollout`'s: the groups are judged on its `rewards` field.

    Such a group's advantages are all zero, so its rows add nothing to the policy gradient but
    cost a full forward and backward pass. The groups with signal are kept (in order) and the
    batch is filled up with zero-signal groups to the next multiple of `quantum` groups, so the
    jitted update sees at most B / quantum shapes and rows still split over devices and
    micro-batches. What changes: the token-mean loss is normalised over the kept tokens only
    (a larger step per signal-carrying token), and a KL penalty covers the kept rows only.

    Returns:
      (the smaller batch, {"kept_groups_frac": ...}); `batch` unchanged if nothing can be dropped.
    """
    if quantum < 1:
        raise ValueError(f"quantum {quantum}: expected at least one group")
    n, signal = _group_signal(batch, group)
    keep = max(quantum, -(-int(signal.sum()) // quantum) * quantum)
    if keep >= n:
        return batch, {"kept_groups_frac": 1.0}
    return _take_signal_first(batch, group, signal, keep), {"kept_groups_frac": keep / n}


def signal_first_groups(
    batch: dict[str, np.ndarray], group: int, keep: int
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """`keep` whole groups of an over-sampled GRPO batch: those with a reward spread first.

    DAPO's dynamic sampling with a fixed cost: a step rolls out more states than it updates on
    (`LoopConfig.oversample`) and keeps `keep` groups, every group whose G rewards differ before
    any all-equal one (each kind in rollout order), so the update's shape never changes and
    fewer of its rows carry zero advantages. The advantages are the per-group ones computed
    before the choice, so choosing groups leaves each kept group's advantages as they were.

    Returns:
      (the batch of `keep` groups, {"signal_groups_frac": share of the kept groups with signal}).
    """
    n, signal = _group_signal(batch, group)
    if not 1 <= keep <= n:
        raise ValueError(f"cannot keep {keep} groups of a batch of {n}")
    out = _take_signal_first(batch, group, signal, keep)
    return out, {"signal_groups_frac": min(int(signal.sum()), keep) / keep}


def _group_signal(batch, group: int) -> tuple[int, np.ndarray]:
    """(number of groups, which groups' rewards differ: `advantages.has_reward_spread`).

    Judged on the rewards, by the same test that zeroes a constant group's advantages.
    """
    if "rewards" not in batch:
        raise ValueError(f"the batch needs its per-row 'rewards' field; it has {sorted(batch)}")
    rows = len(batch["rewards"])
    if group < 1 or rows % group:
        raise ValueError(f"{rows} rows do not split into groups of {group}")
    n = rows // group
    return n, np.asarray(has_reward_spread(np.asarray(batch["rewards"]).reshape(n, group)))


def _take_signal_first(batch, group: int, signal: np.ndarray, keep: int):
    order = np.concatenate([np.flatnonzero(signal), np.flatnonzero(~signal)])[:keep]
    order.sort()  # the rollout's own order among the kept groups
    idx = (order[:, None] * group + np.arange(group)[None, :]).reshape(-1)
    return {k: v[idx] for k, v in batch.items()}


def signal_quantum(
    batch_size: int, group: int, n_micro: int, devices: int, *, packed: bool = False
) -> int:
    """The group multiple `keep_signal_groups` keeps: kept rows still split into `n_micro`
    micro-batches of whole groups over `devices` data×fsdp shards (`packed`: a group is one
    row), and at most 4 batch shapes are compiled (a quantum of at least a quarter of the
    batch)."""
    base = n_micro * devices if packed else math.lcm(n_micro, devices // math.gcd(devices, group))
    return base * max(1, -(-batch_size // (4 * base)))
