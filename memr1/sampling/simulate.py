"""A rollout engine run without a model: the scheduler driven by known reply lengths.

`simulate` runs `Scheduler.run` (the engine's own host loop) with a decode round that follows
the compiled round step by step (every active row gains a token a step; a row ends at its reply
length or the budget; the round ends after `round_steps` steps, when no row is active, or once
`refill_at` rows have ended), so a run's schedule (rounds, slot-steps, live slot-steps, pages,
preemptions) is the engine's for the same lengths. Benchmarks size slots and pools with it; the
tests check it against real runs.
"""

from __future__ import annotations

import numpy as np

from memr1.sampling.device_schedule import RunPlan
from memr1.sampling.scheduler import Scheduler


def simulate(prompt_lengths, reply_lengths, plan: RunPlan) -> tuple[dict, Scheduler]:
    """The counts of a run whose row (b, g) generates `reply_lengths[b][g]` tokens (reaching
    `plan.max_new` means cut at the budget, fewer means stopped), and its scheduler at the end.

    Besides `Scheduler.run`'s counts: `held_token_steps` and `live_token_steps`, the KV tokens
    the devices' pages could hold (pages held × page size) and those that held a token (each
    resident prompt once, each running row's reply), summed over every decode step;
    `attended_token_steps`, the tokens live rows attend (prompt and reply so far, summed over
    the live row-steps: rows that end within a round are counted to its end);
    `peak_held_tokens` (one device's most); and `rounds_by_shape`, the decode steps run at each
    (slots, reply table pages) a device.
    """
    target = np.asarray(reply_lengths, np.int64)
    if target.shape != (len(prompt_lengths), plan.num_samples):
        raise ValueError(f"reply_lengths must be [B, G], got {target.shape}")
    target = np.clip(target, 1, plan.max_new)
    scheduler = Scheduler(prompt_lengths, plan)

    def prefill(new):
        for device in new:
            for prompt in device:
                g = plan.num_samples
                prompt.first_tokens = np.zeros(g, np.int32)
                prompt.first_logps = np.zeros(g, np.float32)
                prompt.first_stops = (target[prompt.index] == 1) & (plan.max_new > 1)
        return 1

    held = {"held_token_steps": 0, "live_token_steps": 0, "attended_token_steps": 0,
            "peak_held_tokens": 0}  # fmt: skip
    shapes: dict[tuple[int, int], int] = {}

    def decode(rows, refill_at):
        tokens, logps, length, active, stopped, steps, live = run_round(rows, refill_at)
        page = plan.page_size
        used = [dev.used_pages * page for dev in scheduler.devices]
        # Replies grow within the round: count each row's KV at the round's middle.
        grown = (length - rows["length"]).sum() / 2
        live_tokens = sum(p.length for dev in scheduler.devices for p in dev.resident)
        live_tokens += int(rows["length"][rows["active"]].sum()) + grown
        # What each live row attends a step: its prompt and its reply so far.
        attended = (rows["prompt_len"] + rows["length"])[rows["active"]].sum() * steps
        held["attended_token_steps"] += int(attended) + int(grown) * steps
        held["held_token_steps"] += sum(used) * steps
        held["live_token_steps"] += live_tokens * steps
        held["peak_held_tokens"] = max(held["peak_held_tokens"], max(used))
        shape = (rows["cell"].shape[1], rows["reply_table"].shape[2])
        shapes[shape] = shapes.get(shape, 0) + steps
        return tokens, logps, length, active, stopped, steps, live

    def run_round(rows, refill_at):
        n = len(rows["token"])
        goal = target[rows["prompt_id"], rows["sample"]]
        length, active = rows["length"].copy(), rows["active"].copy()
        stopped = np.zeros(n, bool)
        steps = live = ended = 0
        while steps < plan.round_steps and active.any() and ended < refill_at:
            live += int(active.sum())
            length += active
            ends = active & (length >= goal)
            stopped |= ends & (goal < plan.max_new)
            ended += int(ends.sum())
            active &= ~ends
            steps += 1
        tokens = np.zeros((n, plan.round_steps), np.int32)
        logps = np.zeros((n, plan.round_steps), np.float32)
        return tokens, logps, length, active, stopped, steps, live

    counts = scheduler.run(prefill, decode, window=1)
    return {**counts, **held, "rounds_by_shape": shapes}, scheduler
