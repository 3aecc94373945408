"""One device's part of a rollout run's schedule: its running rows, prompt slots, page pool
and queue of prompts (`memr1.sampling.scheduler` says how a run is scheduled)."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from memr1.sampling.paged import NULL_PAGE


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """The static sizes of one engine run (they fix its programs' shapes)."""

    devices: int  # C: data × fsdp devices that decode rows of their own
    slots_per_device: int  # R
    prompt_slots: int  # PS, prompts a device holds at once
    pages_per_device: int  # P, the null page included
    page_size: int
    prompt_pages: int  # Tp: prompt table width
    reply_pages: int  # Tr: reply table width at the full budget
    num_samples: int  # G
    max_new: int
    round_steps: int  # k: decode steps a round runs at most
    shrink_tail: bool = True  # once nothing waits, rounds run fewer slots (`tail_sizes`)

    def reply_need(self, generated: int) -> int:
        """Reply pages a row with `generated` tokens needs for one more round: the round writes
        the KV of tokens generated - 1 .. generated + k - 2, never that of the budget's last."""
        written = min(generated + self.round_steps - 1, self.max_new - 1)
        return ceil_div(written, self.page_size)


@dataclasses.dataclass
class Prompt:
    index: int  # in the run
    length: int
    key_id: int  # what its rows' PRNG keys fold in (its index unless the caller names it)
    slot: int = -1  # its prompt slot while resident
    pages: list[int] = dataclasses.field(default_factory=list)
    pending: list[int] = dataclasses.field(default_factory=list)  # samples waiting, ascending
    running: int = 0
    first_tokens: np.ndarray | None = None  # [G] after prefill
    first_logps: np.ndarray | None = None
    first_stops: np.ndarray | None = None


@dataclasses.dataclass
class Row:
    prompt: Prompt
    sample: int
    tokens: list[int]
    logps: list[float]
    pages: list[int]
    admitted: int  # admission order on its device: preemption takes the newest first


@dataclasses.dataclass
class Finished:
    tokens: np.ndarray  # [n] int32
    logps: np.ndarray  # [n] float32
    stopped: bool  # ended on EOS or a stop sequence (False: cut at the budget)


class PoolTooSmallError(ValueError):
    """The page pool cannot hold one prompt and the pages its row needs for one round."""


class DeviceSchedule:
    """One device's running rows, prompt slots, page pool and queue of prompts."""

    def __init__(self, prompts: list[Prompt], plan: RunPlan):
        self.plan = plan
        self.queue: collections.deque[Prompt] = collections.deque(prompts)
        self.prompt_slots: list[Prompt | None] = [None] * plan.prompt_slots
        self.running: list[Row] = []
        # Page 0 is the null page; pop() hands out the lowest free id first.
        self.free = list(range(plan.pages_per_device - 1, NULL_PAGE, -1))
        self.peak_pages = 0
        self.preempted = 0
        self._admissions = 0

    # -- pages ---------------------------------------------------------------------------------

    def _take(self, n: int) -> list[int]:
        out = [self.free.pop() for _ in range(n)]
        self.peak_pages = max(self.peak_pages, self.used_pages)
        return out

    def _give(self, pages: list[int]) -> None:
        self.free.extend(pages)
        self.free.sort(reverse=True)
        pages.clear()

    @property
    def used_pages(self) -> int:
        return self.plan.pages_per_device - 1 - len(self.free)

    @property
    def resident(self) -> list[Prompt]:
        return [p for p in self.prompt_slots if p is not None]

    # -- a round -------------------------------------------------------------------------------

    def grow(self) -> None:
        """Gives every running row the reply pages of the next round; preempts when short."""
        while True:
            need = sum(max(0, self.plan.reply_need(len(r.tokens)) - len(r.pages))
                       for r in self.running)  # fmt: skip
            if need <= len(self.free):
                break
            self._preempt(max(self.running, key=lambda r: r.admitted))
        for row in self.running:
            row.pages += self._take(self.plan.reply_need(len(row.tokens)) - len(row.pages))

    def _preempt(self, row: Row) -> None:
        self.running.remove(row)
        self._give(row.pages)
        row.prompt.running -= 1
        row.prompt.pending = sorted(row.prompt.pending + [row.sample])
        self.preempted += 1

    def make_resident(self) -> list[Prompt]:
        """Prompts to prefill now: in order, while free slots outnumber waiting samples, a
        prompt slot is free and the pool holds the prompt's pages plus its first row's."""
        free_slots = self.plan.slots_per_device - len(self.running)
        waiting = sum(len(p.pending) for p in self.resident)
        first_row = self.plan.reply_need(1)
        new = []
        while self.queue and waiting < free_slots and None in self.prompt_slots:
            prompt = self.queue[0]
            prompt_pages = ceil_div(prompt.length, self.plan.page_size)
            if prompt_pages + first_row > len(self.free):
                break
            self.queue.popleft()
            prompt.pages = self._take(prompt_pages)
            prompt.pending = list(range(self.plan.num_samples))
            prompt.slot = self.prompt_slots.index(None)
            self.prompt_slots[prompt.slot] = prompt
            new.append(prompt)
            waiting += self.plan.num_samples
        return new

    def admit(self, finished: dict[tuple[int, int], Finished]) -> None:
        """Fills free slots with waiting samples of resident prompts (lowest first)."""
        while len(self.running) < self.plan.slots_per_device:
            waiting = [p for p in self.resident if p.pending]
            if not waiting:
                return
            prompt = min(waiting, key=lambda p: p.index)
            sample = prompt.pending[0]
            token = int(prompt.first_tokens[sample])
            logp = float(prompt.first_logps[sample])
            stopped = bool(prompt.first_stops[sample])
            if stopped or self.plan.max_new == 1:
                prompt.pending.pop(0)
                one = Finished(np.array([token], np.int32), np.array([logp], np.float32), stopped)
                finished[(prompt.index, sample)] = one
                self._release_if_done(prompt)
                continue
            pages = self.plan.reply_need(1)
            if pages > len(self.free):
                return
            prompt.pending.pop(0)
            prompt.running += 1
            self._admissions += 1
            self.running.append(Row(prompt, sample, [token], [logp], self._take(pages),
                                    self._admissions))  # fmt: skip

    def _release_if_done(self, prompt: Prompt) -> None:
        if not prompt.pending and prompt.running == 0:
            self._give(prompt.pages)
            self.prompt_slots[prompt.slot] = None

    def check_progress(self) -> None:
        """Raises when this device has work left (called when a round moved nothing)."""
        if self.running or not (self.queue or self.resident):
            return
        need = self.plan.reply_need(1)
        if self.queue and not self.resident:
            need += ceil_div(self.queue[0].length, self.plan.page_size)
        raise PoolTooSmallError(
            f"the engine's page pool ({self.plan.pages_per_device - 1} pages of "
            f"{self.plan.page_size} tokens a device) cannot hold a prompt and its first reply "
            f"pages ({need} pages): raise engine.kv_tokens (0 sizes the pool for the worst case)"
        )

    def end_round(self, tokens, logps, lengths, active, stopped, finished) -> None:
        """Takes one round's results for this device's running rows (in their order)."""
        for slot, row in enumerate(list(self.running)):
            n = int(lengths[slot]) - len(row.tokens)
            row.tokens += tokens[slot, :n].tolist()
            row.logps += logps[slot, :n].tolist()
            if active[slot]:
                continue
            finished[(row.prompt.index, row.sample)] = Finished(
                np.asarray(row.tokens, np.int32), np.asarray(row.logps, np.float32),
                bool(stopped[slot]),
            )  # fmt: skip
            self.running.remove(row)
            self._give(row.pages)
            row.prompt.running -= 1
            self._release_if_done(row.prompt)
