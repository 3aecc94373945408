"""The rollout engine's host side: which rows decode in a round, and which pages they hold.

A run is B prompts × G samples. Prompt b goes to data × fsdp device b % C; each device has R
decode slots, PS prompt slots and a pool of pages (`memr1.sampling.paged`) and is scheduled on
its own, so a row's work never depends on another device's. Before each round of decode steps
the scheduler:

1. grows every running row's reply pages to what the round can write (`round_steps` tokens
   more, never past the budget); when the pool runs short it preempts the most recently
   admitted rows (their pages go back to the pool, their samples back to the waiting ones);
2. makes prompts resident, in order, while slots would otherwise stay empty, a prompt slot is
   free and the pool holds the prompt: a resident prompt keeps its pages until its last sample
   ends, and is prefilled once (the engine runs the prefill and hands back each sample's first
   token);
3. admits waiting samples of resident prompts into free slots, lowest prompt and sample first;
   a sample whose first token already ends it (EOS, a one-token stop, a budget of one) is
   finished without taking a slot.

The host owns every row's state (its tokens, length, pages) and sends it to the device each
round, so a row has no fixed slot: a round lays the running rows out in its first slots, and
once nothing waits the engine runs fewer slots and prompt slots (`round_level`), so the run's
tail does not decode finished slots.

A preempted row is decoded again from its first token. Each row draws its tokens with keys of
its own (prompt, sample, position), so it decodes the same tokens again: preemption, the slot
count and the order of admission change when a row runs, never what it generates.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence

import numpy as np

from memr1.sampling.device_schedule import (
    DeviceSchedule,
    Finished,
    Prompt,
    RunPlan,
    ceil_div,
    pow2_at_least,
)
from memr1.sampling.paged import NULL_PAGE

# A round ends early once this share of the slots has ended while rows wait for a slot.
REFILL_SHARE = 1 / 16
# The narrowest reply table a round reads (budgets up to this many pages get one width).
MIN_REPLY_PAGES = 8

# prefill(new prompts per device): stores each new prompt's first tokens, log-probs and stops;
# returns the prefill programs it ran.
Prefill = Callable[[list[list[Prompt]]], int]
# decode(rows, refill_at) -> (tokens, logps, lengths, active, stopped, steps, live): a round.
Decode = Callable[[dict[str, np.ndarray], int], tuple]


class Scheduler:
    """Every device's schedule for one run, and the rows it has finished."""

    def __init__(self, lengths: Sequence[int], plan: RunPlan, key_ids: Sequence[int] | None = None):
        self.plan = plan
        d = plan.devices
        key_ids = range(len(lengths)) if key_ids is None else key_ids
        prompts = [Prompt(b, int(n), int(k)) for b, (n, k) in enumerate(zip(lengths, key_ids))]
        self.devices = [DeviceSchedule(prompts[i::d], plan) for i in range(d)]
        self.finished: dict[tuple[int, int], Finished] = {}
        self.total = len(prompts) * plan.num_samples

    @property
    def done(self) -> bool:
        return len(self.finished) == self.total

    def run(
        self,
        prefill: Prefill,
        decode: Decode,
        window: int,
        progress: Callable[[list[int]], None] | None = None,
    ) -> dict[str, int]:
        """Drives the run to its end: rounds of (grow, prefill, admit, decode, take results).

        `decode` gets the round's rows (`round_inputs`) and how many ended rows end the round
        early; `window` is the stop window W; `progress` gets the prompts whose samples have
        all ended, as they end. Returns the run's counts (rounds, decode_steps, slot_steps,
        live_slot_steps, prefills, prefill_rows).
        """
        count = dict.fromkeys(
            ("rounds", "decode_steps", "slot_steps", "live_slot_steps", "prefills",
             "prefill_rows"), 0,
        )  # fmt: skip
        reported: set[int] = set()
        while not self.done:
            new = self.start_round()
            if any(new):
                count["prefills"] += prefill(new)
                count["prefill_rows"] += sum(map(len, new))
            self.admit(prefilled=any(new))
            if self.running():
                level = self.round_level()
                total = self.plan.devices * self.level_sizes(level)[0]
                refill = max(1, math.ceil(total * REFILL_SHARE)) if self.waiting() else total + 1
                rows = self.round_inputs(window, level, self.round_reply_pages())
                toks, logps, lengths, active, stopped, steps, live = decode(rows, refill)
                self.end_round(total // self.plan.devices, toks, logps, lengths, active, stopped)
                count["rounds"] += 1
                count["decode_steps"] += int(steps)
                count["slot_steps"] += int(steps) * total
                count["live_slot_steps"] += int(live)
            if progress is not None:
                done = self.prompts_done()
                if len(done) > len(reported):
                    progress(sorted(done - reported))
                    reported = done
        return count

    def start_round(self) -> list[list[Prompt]]:
        """Grows running rows (preempting where the pool is short); returns per device the
        prompts to prefill before `admit`."""
        for device in self.devices:
            device.grow()
        return [device.make_resident() for device in self.devices]

    def admit(self, prefilled: bool) -> None:
        """Admits waiting samples on every device (after the prefill of `start_round`'s
        prompts, `prefilled` when there were any); raises PoolTooSmallError when the round
        moved nothing: no row runs, none ended, no prompt became resident."""
        before = len(self.finished)
        for device in self.devices:
            device.admit(self.finished)
        if self.done or self.running() or prefilled or len(self.finished) > before:
            return
        for device in self.devices:
            device.check_progress()

    def running(self) -> int:
        return sum(len(dev.running) for dev in self.devices)

    def waiting(self) -> bool:
        return any(dev.queue or any(p.pending for p in dev.resident) for dev in self.devices)

    def tail_sizes(self) -> list[int]:
        """The slot counts a device may run once nothing waits, largest first: R and its
        eighths (7R/8, ..., R/8, rounded up) from 32 slots, so that the slots of the rows that
        end in the run's tail are not decoded on; R, R/2, R/4, R/8 below (a small tail has
        little to save, and each size is a program to compile)."""
        r = self.plan.slots_per_device
        parts = [(8 - i, 8) for i in range(8)] if r >= 32 else [(1, 2**i) for i in range(4)]
        return sorted({ceil_div(r * a, b) for a, b in parts}, reverse=True)

    def round_level(self) -> int:
        """How far this round shrinks: 0 (all R slots) while rows wait; after that the index of
        the smallest of `tail_sizes` that still holds every device's running rows. Prompt
        slots shrink with them (`level_sizes`): with nothing waiting, every resident prompt
        has a running row."""
        if self.waiting() or not self.plan.shrink_tail:
            return 0
        rows = max(len(dev.running) for dev in self.devices)
        sizes = self.tail_sizes()
        return max(i for i, size in enumerate(sizes) if size >= rows)

    def level_sizes(self, level: int) -> tuple[int, int]:
        """(slots, prompt slots) a device runs at `level`."""
        slots = self.tail_sizes()[level]
        return slots, min(self.plan.prompt_slots, slots)

    def round_reply_pages(self) -> int:
        """Reply table width this round: the power of two (at least MIN_REPLY_PAGES) that holds
        every row's pages, or the budget's width if that is smaller."""
        held = max((len(r.pages) for dev in self.devices for r in dev.running), default=1)
        return min(max(pow2_at_least(held), MIN_REPLY_PAGES), self.plan.reply_pages)

    def round_inputs(self, window: int, level: int, reply_pages: int) -> dict[str, np.ndarray]:
        """The running rows laid out in the `level_sizes` slots a device, device-major
        [C·slots, ...] (tables [C, ...]), and the resident prompts in the first prompt slots
        (in order: a prompt's slot on the device may change from round to round); with
        `reply_pages` reply pages a row."""
        p = self.plan
        d, g = p.devices, p.num_samples
        slots, ps = self.level_sizes(level)
        n = d * slots
        out = {
            "token": np.zeros(n, np.int32),
            "length": np.zeros(n, np.int32),
            "tail": np.full((n, window), -1, np.int32),
            "active": np.zeros(n, bool),
            "prompt_len": np.zeros(n, np.int32),
            "prompt_id": np.zeros(n, np.int32),
            "sample": np.zeros(n, np.int32),
            # Slots without a row point past the grid of lanes.
            "cell": np.full((d, slots), ps * g, np.int32),
            "reply_table": np.full((d, slots, reply_pages), NULL_PAGE, np.int32),
            "prompt_table": np.full((d, ps, p.prompt_pages), NULL_PAGE, np.int32),
            "prompt_slot_len": np.zeros((d, ps), np.int32),
        }
        for i, device in enumerate(self.devices):
            place = {}
            for j, prompt in enumerate(device.resident):
                place[prompt.index] = j
                out["prompt_table"][i, j, : len(prompt.pages)] = prompt.pages
                out["prompt_slot_len"][i, j] = prompt.length
            for slot, row in enumerate(device.running):
                j = i * slots + slot
                out["token"][j] = row.tokens[-1]
                out["length"][j] = len(row.tokens)
                tail = row.tokens[-window:]
                out["tail"][j, window - len(tail) :] = tail
                out["active"][j] = True
                out["prompt_len"][j] = row.prompt.length
                out["prompt_id"][j] = row.prompt.key_id
                out["sample"][j] = row.sample
                out["cell"][i, slot] = place[row.prompt.index] * g + row.sample
                out["reply_table"][i, slot, : len(row.pages)] = row.pages
        return out

    def end_round(self, slots: int, tokens, logps, lengths, active, stopped) -> None:
        """Takes a round's [C·slots, ...] results."""
        for i, device in enumerate(self.devices):
            part = slice(i * slots, (i + 1) * slots)
            device.end_round(
                tokens[part], logps[part], lengths[part], active[part], stopped[part],
                self.finished,
            )  # fmt: skip

    def prompts_done(self) -> set[int]:
        """The prompts all of whose samples have finished."""
        g = self.plan.num_samples
        counts = collections.Counter(b for b, _ in self.finished)
        return {b for b, n in counts.items() if n == g}

    @property
    def peak_pages(self) -> int:
        return max(dev.peak_pages for dev in self.devices)

    @property
    def preempted(self) -> int:
        return sum(dev.preempted for dev in self.devices)
