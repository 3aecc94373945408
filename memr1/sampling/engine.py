"""The rollout engine: a whole rollout (B prompts × G samples) in one run, over a fixed number of
decode slots, with each prompt's KV stored once and caches sized by live tokens.

How a run goes (`Engine.generate`):
- the host scheduler (`memr1.sampling.scheduler`) hands prompts to data × fsdp devices, makes
  them resident as slots free up, and gives each row the pages it needs (`memr1.sampling.paged`
  for the memory layout);
- a newly resident prompt is prefilled once (`Programs.prefill`, up to `prefill_prompts` a
  device a program, batched to a power of two, left-padded to the run's prompt bucket) and its
  KV written into its pages, which all G samples read; the prefill also draws each sample's
  first token;
- rounds of up to `round_steps` decode steps (`Programs.round`, one `lax.while_loop`) run the
  slots; a round ends early when a sixteenth of the slots have finished while rows wait, and
  between rounds finished rows leave and waiting ones take their slots (continuous batching), so
  a run does not wait for its longest reply with every other slot idle.

A row's reply depends on (key, prompt index, sample index) only: `memr1.sampling.programs` draws
with per-row keys, and the pages a row reads hold its own tokens only. The same run with other
slot counts, page sizes, pool sizes (preempted rows are decoded again from their first token) or
prompt orders gives the same replies, up to float rounding of batch-size-dependent matmuls.

Programs compile once per shape: the round per slot count (R, or a run's tail's smaller
counts: `Scheduler.tail_sizes`), reply table width (powers of two of pages), pool pages, prompt
bucket, `round_steps`, G, greedy / top-k / top-p on-off and the stop set's padded shape; the
prefill per prompt batch (powers of two up to `prefill_prompts`) and prompt bucket. Weights,
temperature, top_p, keys, max_new_tokens and stop ids are arguments.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from memr1.models.config import ModelConfig
from memr1.sampling import stopping
from memr1.sampling.device_schedule import Prompt, RunPlan, ceil_div, pow2_at_least
from memr1.sampling.layout import row_devices
from memr1.sampling.paged import KERNELS
from memr1.sampling.programs import Programs, new_pool
from memr1.sampling.request import (
    PromptBatch,
    check_request,
    default_bucket,
    left_pad,
    prompt_ids_of,
    sampling_args,
)
from memr1.sampling.scheduler import Scheduler


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """How the engine lays out its cache and schedules its slots (config section `engine`).

    page_size: tokens a page holds (a power of two).
    prefill_prompts: prompts a device prefills in one program at most (its activations, and
      without a fused attention kernel its [prompts, heads, P, P] scores, grow with it).
    shrink_tail: once no row waits, rounds run fewer slots (`Scheduler.tail_sizes`): less
      decoding of finished slots, one round program more to compile for each smaller size.
    attention: the decode attention's kernel (`memr1.sampling.paged.PagedLayer`): "xla" (any
      backend, reads every table entry), "pallas" (walks only live pages; interpreted off a
      GPU; no tensor axis), "auto" (pallas on a GPU, xla elsewhere).
    kv_tokens: KV tokens the pool of each device holds (0: as many as R slots can ever need,
      every row from its own prompt at the full budget: nothing is ever preempted).
    round_steps: decode steps a round runs at most before finished rows leave their slots.
    """

    page_size: int = 16
    kv_tokens: int = 0
    round_steps: int = 16
    prefill_prompts: int = 4
    shrink_tail: bool = True
    attention: str = "auto"

    def __post_init__(self):
        if self.page_size < 1 or self.page_size & (self.page_size - 1):
            raise ValueError(f"engine.page_size must be a power of two, got {self.page_size}")
        if self.kv_tokens < 0:
            raise ValueError(f"engine.kv_tokens must be >= 0, got {self.kv_tokens}")
        if self.round_steps < 1:
            raise ValueError(f"engine.round_steps must be >= 1, got {self.round_steps}")
        if self.prefill_prompts < 1:
            raise ValueError(f"engine.prefill_prompts must be >= 1, got {self.prefill_prompts}")
        if self.attention not in ("auto", *KERNELS):
            raise ValueError(f"engine.attention={self.attention!r}: one of auto, {KERNELS}")

    def kernel(self) -> str:
        """The attention kernel this process runs ("auto" resolved by its backend)."""
        if self.attention != "auto":
            return self.attention
        return "pallas" if jax.default_backend() == "gpu" else "xla"

    @classmethod
    def from_config(cls, config) -> EngineSettings:
        e = config.engine
        return cls(
            page_size=e.page_size,
            kv_tokens=e.kv_tokens,
            round_steps=e.round_steps,
            prefill_prompts=e.prefill_prompts,
            shrink_tail=e.shrink_tail,
            attention=e.attention,
        )


@dataclasses.dataclass(frozen=True)
class EngineStats:
    """What one run did. A slot-step is one slot through one decode step; it is live when the
    slot holds a row that had not ended (`slot_occupancy` = live / all)."""

    rounds: int
    decode_steps: int
    slot_steps: int
    live_slot_steps: int
    prefills: int
    prefill_rows: int
    preempted: int
    slots: int
    pool_pages: int  # per device, the null page included
    peak_pages: int  # the most pages one device held at once
    page_size: int

    @property
    def slot_occupancy(self) -> float:
        return self.live_slot_steps / self.slot_steps if self.slot_steps else 1.0


class EngineOutput(NamedTuple):
    """A run's rows, prompt-major (row = b * G + g), as host arrays; the fields of
    `memr1.sampling.output.SampleOutput` plus the run's `stats`. `prompt_tokens` are left-padded
    to the bucket of the longest prompt; `steps` is the longest row's length."""

    tokens: np.ndarray
    logprobs: np.ndarray
    lengths: np.ndarray
    mask: np.ndarray
    done: np.ndarray
    prompt_tokens: np.ndarray
    prompt_mask: np.ndarray
    steps: int
    stats: EngineStats


class Engine:
    """Continuous-batching rollouts over a paged KV cache, for one backbone."""

    def __init__(
        self,
        cfg: ModelConfig,
        graphdef: Any,
        *,
        pad_id: int = 0,
        settings: EngineSettings | None = None,
        cache_dtype: Any = None,
    ):
        self.cfg = cfg
        self.pad_id = int(pad_id)
        self.settings = settings or EngineSettings()
        self.cache_dtype = jnp.dtype(cache_dtype or cfg.jnp_dtype)
        self.programs = Programs(cfg, graphdef, self.pad_id)

    def compiled_programs(self) -> int:
        """Programs compiled so far (for recompile checks)."""
        return self.programs.compiled()

    def plan(self, lengths: Sequence[int], *, num_samples: int, max_new_tokens: int,
             slots: int, devices: int) -> RunPlan:  # fmt: skip
        """The static sizes of a run over prompts of these lengths.

        Prompt slots: R where G = 1 (a prompt leaves with its one row), else twice the R / G
        prompts that fill the slots, so that the stragglers of some prompts leave room for the
        next ones; never more than a device's prompts. A pool of `kv_tokens` 0 holds the
        worst case: every prompt slot at the prompt bucket and every slot at the full budget.
        """
        s = self.settings
        r = ceil_div(slots, devices)
        g = num_samples
        prompt_slots = r if g == 1 else min(r, 2 * ceil_div(r, g))
        prompt_slots = min(prompt_slots, ceil_div(len(lengths), devices))
        # The prefill's width: the reference sampler's bucket (so the first tokens are its to
        # the bit), at least a page.
        prompt_pages = max(default_bucket(max(lengths)), s.page_size) // s.page_size
        reply_pages = max(1, ceil_div(max_new_tokens - 1, s.page_size))
        if s.kv_tokens:
            pages = s.kv_tokens // s.page_size + 1
        else:
            pages = prompt_slots * prompt_pages + r * reply_pages + 1
        return RunPlan(devices, r, prompt_slots, pages, s.page_size, prompt_pages, reply_pages,
                       g, max_new_tokens, s.round_steps, s.shrink_tail)  # fmt: skip

    def generate(
        self,
        params: Any,
        prompt_tokens: PromptBatch,
        *,
        key: jax.Array,
        max_new_tokens: int,
        num_samples: int = 1,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        eos_ids: Sequence[int] = (),
        stop_sequences: Sequence[Sequence[int]] = (),
        slots: int | None = None,
        prompt_ids: Sequence[int] | None = None,
        progress: Callable[[list[int]], None] | None = None,
    ) -> EngineOutput:
        """Generates `num_samples` continuations of every prompt in one run.

        Args:
          params: model parameters (a decode copy on a mesh splits the slots over its
            data × fsdp devices: `memr1.sampling.layout`); never donated.
          prompt_tokens: B prompts of token ids (any lengths >= 1).
          key: PRNG key; row (b, g) draws from fold_in(fold_in(key, prompt_ids[b]), g).
          max_new_tokens, num_samples, temperature, top_k, top_p, eos_ids, stop_sequences:
            as `memr1.sampling.sampler.Sampler.generate` takes them.
          slots: rows decoded at once, over all devices (default B·G: every row at once);
            rounded up to a multiple of the devices.
          prompt_ids: each prompt's id in the key (default: its index, 0 .. B - 1), so that a
            prompt keeps its replies in any order or batch of prompts.
          progress: called with the indices of the prompts whose G samples have all
            finished since its last call.
        """
        prompts, top_k = check_request(
            self.cfg, prompt_tokens, max_new_tokens=max_new_tokens, num_samples=num_samples,
            temperature=temperature, top_k=top_k, top_p=top_p,
        )  # fmt: skip
        g = int(num_samples)
        slots = int(slots or len(prompts) * g)
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        devices, row_split = row_devices(params)
        lengths = [len(p) for p in prompts]
        ids = prompt_ids_of(prompt_ids, len(prompts))
        plan = self.plan(lengths, num_samples=g, max_new_tokens=int(max_new_tokens),
                         slots=slots, devices=devices)  # fmt: skip
        scheduler = Scheduler(lengths, plan, ids)
        pool = new_pool(self.cfg, devices, plan.pages_per_device, plan.page_size,
                        self.cache_dtype, pool_sharding(params, row_split))  # fmt: skip
        stops = stopping.make_stop_set(eos_ids, stop_sequences)
        kernel = self.settings.kernel()
        if kernel == "pallas" and row_split is not None and row_split.mesh.shape["tensor"] > 1:
            raise ValueError(
                "engine.attention='pallas' splits rows over data x fsdp only; this mesh has a "
                "tensor axis: use engine.attention='xla'"
            )
        args, static = sampling_args(key, temperature, top_k, top_p, stops, row_split)
        state = {"pool": pool}

        def prefill(new):
            state["pool"], calls = self._prefill_all(params, state["pool"], new, prompts, plan,
                                                     args, static)  # fmt: skip
            return calls

        def decode(rows, refill_at):
            state["pool"], *out = self.programs.round(
                params, state["pool"], rows, *args, np.int32(plan.max_new), np.int32(refill_at),
                steps=plan.round_steps, num_samples=g, kernel=kernel, **static,
            )  # fmt: skip
            return jax.device_get(out)

        count = scheduler.run(prefill, decode, stops.window, progress)
        state.clear()  # the pool's memory is free before the outputs are built
        return self._output(scheduler, prompts, plan, count)

    def _prefill_all(self, params, pool, new, prompts, plan, args, static):
        """Prefills the new prompts of every device, `engine.prefill_prompts` a device a call:
        (pool, calls)."""
        n = self.settings.prefill_prompts
        calls = max(ceil_div(len(device), n) for device in new)
        for c in range(calls):
            chunk = [device[c * n : (c + 1) * n] for device in new]
            pool = self._prefill(params, pool, chunk, prompts, plan, args, static)
        return pool, calls

    def lower_round(
        self, params: Any, plan: RunPlan, *, level: int = 0, reply_pages: int | None = None,
        temperature: float = 1.0, eos_ids: Sequence[int] = (1,), kernel: str = "xla",
    ) -> jax.stages.Lowered:  # fmt: skip
        """The round program of `plan` (at the slot counts of a tail `level`, 0 for all, and
        `reply_pages` reply pages, default the budget's), lowered from abstract or real
        `params` (for HLO and cost checks)."""
        r, ps = Scheduler([1], plan).level_sizes(level)
        d, n = plan.devices, plan.devices * r
        stops = stopping.make_stop_set(eos_ids)
        rows = {
            "token": np.zeros(n, np.int32),
            "length": np.ones(n, np.int32),
            "tail": np.zeros((n, stops.window), np.int32),
            "active": np.ones(n, bool),
            "prompt_len": np.ones(n, np.int32),
            "prompt_id": np.zeros(n, np.int32),
            "sample": np.zeros(n, np.int32),
            "cell": np.zeros((d, r), np.int32),
            "reply_table": np.zeros((d, r, reply_pages or plan.reply_pages), np.int32),
            "prompt_table": np.zeros((d, ps, plan.prompt_pages), np.int32),
            "prompt_slot_len": np.zeros((d, ps), np.int32),
        }
        _, row_split = row_devices(params)
        c = self.cfg
        shape = (d, 2 * c.n_kv_heads, plan.pages_per_device, plan.page_size, c.head_dim)
        leaf = jax.ShapeDtypeStruct(shape, self.cache_dtype, sharding=row_split)
        pool = [leaf] * c.n_layers
        greedy = temperature == 0.0
        return self.programs.round.lower(
            params, pool, rows, jax.random.key(0), np.float32(1.0), np.float32(1.0), stops,
            np.int32(plan.max_new), np.int32(n + 1), steps=plan.round_steps,
            num_samples=plan.num_samples, kernel=kernel, greedy=greedy, top_k=None,
            use_top_p=False, row_split=row_split,
        )  # fmt: skip

    def _prefill(self, params, pool, new: list[list[Prompt]], prompts, plan: RunPlan, args,
                 static):  # fmt: skip
        """Prefills each device's new resident prompts; stores their first tokens on them."""
        page = plan.page_size
        batch = pow2_at_least(max(1, max(map(len, new))))
        width = plan.prompt_pages * page
        d = plan.devices
        tokens = np.full((d * batch, width), self.pad_id, np.int32)
        lengths = np.zeros(d * batch, np.int32)
        index = np.zeros(d * batch, np.int32)
        page_ids = np.zeros((d, batch, width // page), np.int32)
        for i, device in enumerate(new):
            for j, prompt in enumerate(device):
                row = i * batch + j
                tokens[row, width - prompt.length :] = prompts[prompt.index]
                lengths[row] = prompt.length
                index[row] = prompt.key_id
                page_ids[i, j, : len(prompt.pages)] = prompt.pages
        pool, *first = self.programs.prefill(
            params, pool, tokens, lengths, page_ids, index, *args,
            num_samples=plan.num_samples, **static,
        )  # fmt: skip
        first_tokens, first_logps, first_stops = jax.device_get(first)
        for i, device in enumerate(new):
            for j, prompt in enumerate(device):
                row = i * batch + j
                prompt.first_tokens = first_tokens[row]
                prompt.first_logps = first_logps[row]
                prompt.first_stops = first_stops[row]
        return pool

    def _output(self, scheduler: Scheduler, prompts, plan: RunPlan, count: dict) -> EngineOutput:
        """The run's replies in prompt-major rows (b·G + g), and its stats (`count`: the
        scheduler's counts of rounds and steps)."""
        stats = EngineStats(
            **count,
            preempted=scheduler.preempted,
            slots=plan.devices * plan.slots_per_device,
            pool_pages=plan.pages_per_device,
            peak_pages=scheduler.peak_pages,
            page_size=plan.page_size,
        )
        g, new = plan.num_samples, plan.max_new
        rows = len(prompts) * g
        tokens = np.full((rows, new), self.pad_id, np.int32)
        logps = np.zeros((rows, new), np.float32)
        lengths = np.zeros(rows, np.int32)
        done = np.zeros(rows, bool)
        for (b, s), row in scheduler.finished.items():
            i, n = b * g + s, len(row.tokens)
            tokens[i, :n], logps[i, :n], lengths[i], done[i] = row.tokens, row.logps, n, row.stopped
        width = default_bucket(max(len(p) for p in prompts))
        prompt_tokens, prompt_mask = left_pad(prompts, width, self.pad_id)
        return EngineOutput(
            tokens=tokens,
            logprobs=logps,
            lengths=lengths,
            mask=np.arange(new)[None, :] < lengths[:, None],
            done=done,
            prompt_tokens=np.repeat(prompt_tokens, g, axis=0),
            prompt_mask=np.repeat(prompt_mask, g, axis=0),
            steps=int(lengths.max()),
            stats=stats,
        )


def pool_sharding(params: Any, row_split: NamedSharding | None) -> NamedSharding | None:
    """Where a run's page pool lives: split over the row devices, else on the weights' mesh
    whole. The programs' outputs carry the weights' mesh; a pool placed anywhere else on the
    first call (a plain device placement) would be a second input layout, and so a second
    compile of the prefill, on every run."""
    if row_split is not None:
        return row_split
    leaves = jax.tree.leaves(params)
    first = leaves[0].sharding if leaves else None
    if isinstance(first, NamedSharding):
        return NamedSharding(first.mesh, PartitionSpec())
    return None
