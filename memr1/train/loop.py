"""The training loops: SFT on (prompt, target) pairs, and GRPO / PPO on rollouts of a stage.

Plain code with sections (data / rollout / update / eval / checkpoint) rather than a Trainer.
Which examples a step sees is a pure function of (seed, step), so a run killed at any moment and
resumed from its last checkpoint replays exactly the steps it had not saved. Its metrics.jsonl
then reads as if it had never stopped: every metric of a checkpointed step is written before the
checkpoint, and a resumed run first drops the records of the steps it is about to replay.

Every step also logs `time/step_s` (from its iteration's start until its results are on the host;
see `metrics_log.LaggedMetrics`) and `perf/tokens_per_s` (the real prompt, a packed group's once,
+ response tokens its update processed, over that time); a GRPO/PPO step's rollout share of it is
`time_sample_s` + `time_reward_s`. Such wall-clock fields are named so that
`metrics_log.is_wall_clock` recognises them: a `time/` or `perf/` section, or a `time_` name;
comparisons of two runs' logs (the fault drill, the resume tests) skip exactly those.

Validation (`validate`, with `train.eval_every` > 0: `memr1.train.validation`) runs before the
first step and after every `eval_every`-th and the last; a step that is the best so far by
`train.keep_best` is checkpointed then, whatever `checkpoint_every` says.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from memr1.train import batches, multihost, steps, validation
from memr1.train.checkpoint import Checkpointer
from memr1.train.metrics_log import (
    LaggedMetrics,
    MetricsWriter,
    check_finite,
    progress,
    warn_shares,
)
from memr1.train.order import batch_indices, bucket_length, sft_batch_indices
from memr1.train.sft import sft_batch
from memr1.train.state import TrainSetup, TrainState, step_key
from memr1.train.update import StepSpec, make_step, shard_batch

# Builds the step to run from an update's spec: `update.make_step`, or in fault drills
# `memr1.train.faults.wrapper`'s, which poisons chosen steps.
StepBuilder = Callable[[TrainSetup, StepSpec], Callable]


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """How a run steps, from the config (`from_config`): its train section and seed.

    drop_zero_signal (GRPO): drop groups without reward signal before the update
      (`batches.keep_signal_groups`); `n_micro` is the update's micro-batch count, which the
      kept rows must still split into.
    oversample (GRPO): roll out `oversample` x `batch_size` states a step and update on
      `batch_size` groups, those with a reward spread first (`batches.signal_first_groups`).
    desc: the progress bar's label.
    """

    steps: int
    batch_size: int  # states (GRPO) or pairs (SFT) per step
    group_size: int  # G samples per state (GRPO)
    checkpoint_every: int
    seed: int
    on_nonfinite: str  # "skip" the refused update, or "stop" the run
    drop_zero_signal: bool
    n_micro: int
    oversample: int
    desc: str
    eval_every: int  # validate every this many steps (and before the first, and after the last)
    keep_best: str  # the validation metric of the best checkpoint ("-" prefix: minimised)
    packed: bool = False  # GRPO under train.shared_prompt: a group a row (`memr1.rl.packing`)
    group_by_length: int = 0  # SFT: batches of similar length within chunks of this many batches
    sft_buckets: int = 4  # SFT: padded widths (compiled programs) up to train.sft_length

    def __post_init__(self):
        # Checked here so that a bad setting fails before any model is loaded or compiled.
        for name in (
            "steps",
            "batch_size",
            "group_size",
            "checkpoint_every",
            "n_micro",
            "oversample",
            "sft_buckets",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"train.{name}={value!r}: must be an integer >= 1")
        for name, key in (("eval_every", "eval_every"), ("group_by_length", "sft_group_by_length")):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 0:
                raise ValueError(f"train.{key}={value!r}: must be an integer >= 0")
        validation.parse_keep_best(self.keep_best)
        if self.on_nonfinite not in ("skip", "stop"):
            raise ValueError(f"train.on_nonfinite={self.on_nonfinite!r}: expected 'skip' or 'stop'")

    @classmethod
    def from_config(cls, config) -> LoopConfig:
        """The loop of a `configs/memr1.py` config (refuses impossible settings by name)."""
        t = config.train
        if t.sft_group_by_length and config.algo != "sft":
            msg = f"train.sft_group_by_length={t.sft_group_by_length} is for SFT, not {config.algo}"
            raise ValueError(msg)
        return cls(
            steps=t.steps,
            batch_size=t.batch_size,
            group_size=t.group_size,
            checkpoint_every=t.checkpoint_every,
            seed=config.seed,
            on_nonfinite=t.on_nonfinite,
            drop_zero_signal=bool(t.drop_zero_signal),
            n_micro=t.n_micro,
            oversample=t.oversample,
            desc=f"{config.stage}/{config.algo}",
            eval_every=t.eval_every,
            keep_best=t.keep_best,
            packed=config.algo == "grpo" and bool(t.shared_prompt),
            group_by_length=t.sft_group_by_length,
            sft_buckets=t.sft_buckets,
        )


def resume(checkpointer: Checkpointer | None, setup: TrainSetup, state: TrainState | None):
    """(state, first step): the latest checkpoint's, or the given state at step 0. `state` is
    None when the caller built none because a checkpoint exists (no fresh state beside the
    restored one); it is then an error if there is none to restore."""
    restored = None if checkpointer is None else checkpointer.restore_latest(setup.abstract_state)
    if restored is None:
        if state is None:
            where = "no checkpointer" if checkpointer is None else checkpointer.directory
            raise ValueError(f"nothing to resume from ({where}) and no fresh train state given")
        return state, 0
    restored_state, position = restored
    return restored_state, int(position["next_step"])


def _log(ready, writer, bar, cfg) -> None:
    # Written before the check, so that a run stopped by a refused update has that step logged.
    if writer is not None:
        writer.write(*ready)
    bar.set_postfix({k: f"{v:.3g}" for k, v in ready[1].items() if k in _SHOWN})
    warn_shares(*ready, warn=bar.write)
    check_finite(*ready, on_nonfinite=cfg.on_nonfinite)


def _finish_step(
    step, metrics, lag, writer, bar, cfg, checkpointer, state, timing, val=None
) -> None:
    started, tokens = timing
    ready = lag.push(step, metrics, started=started, tokens=tokens)
    if ready is not None:
        _log(ready, writer, bar, cfg)
    done = step + 1
    # -- eval -----------------------------------------------------------------------------------
    best = False
    if val is not None and val.due(done):
        # Validation waits for this step's state anyway: its own record is logged first.
        _flush(lag, writer, bar, cfg)
        _, best = val.run(done, state)
    # -- checkpoint -----------------------------------------------------------------------------
    if checkpointer is not None and (done % cfg.checkpoint_every == 0 or done == cfg.steps or best):
        # The save waits for this step's state anyway, so reading its metrics now costs no
        # device time. It makes every step a checkpoint covers logged (and NaN-checked) before
        # the checkpoint exists: a refused update under "stop" is never saved.
        _flush(lag, writer, bar, cfg)
        position = {"next_step": done, **(val.position() if val is not None else {})}
        checkpointer.save(done, state, position)


def _start_validation(validate, params_of, cfg, checkpointer, writer, start):
    """The run's `validation.Validation` (None when off), continuing the record of the
    checkpoint it resumed from; drops the log records the resumed run will write again (a
    validation at its first step was logged before that checkpoint, so it stays)."""
    val = None
    if validate is not None and cfg.eval_every > 0:
        latest = checkpointer.latest_step() if checkpointer is not None else None
        position = checkpointer.position(latest) if latest is not None else {}
        val = validation.Validation(
            validate,
            params_of,
            every=cfg.eval_every,
            steps=cfg.steps,
            keep_best=cfg.keep_best,
            writer=writer,
            position=position,
        )
    if writer is not None:
        writer.drop_from(start, keep_validation=val is not None and val.validated == start)
    return val


def _validate_start(val, start, state, checkpointer) -> None:
    """Scores the start weights (step 0: the reference); checkpointed, being the best so far."""
    if val is None or start != 0 or val.validated == 0:
        return
    _, best = val.run(0, state)
    if best and checkpointer is not None:
        checkpointer.save(0, state, {"next_step": 0, **val.position()})


_SHOWN = ("loss", "reward", "kl", "zero_signal_frac")


def run_sft(
    setup: TrainSetup,
    state: TrainState,
    step_fn: Callable,
    pairs: Sequence[tuple],
    *,
    cfg: LoopConfig,
    length: int,
    pad_id: int,
    checkpointer: Checkpointer | None = None,
    writer: MetricsWriter | None = None,
    validate: validation.Validate | None = None,
) -> TrainState:
    """SFT over (prompt ids, target ids[, target weights]) pairs for `cfg.steps` steps (the
    weights, one per target token or None: `sft.read_sft_pairs`).

    `validate(params, step)` (with `cfg.eval_every` > 0) gets the train state's parameters."""
    state, start = resume(checkpointer, setup, state)
    val = _start_validation(validate, lambda s: s.params, cfg, checkpointer, writer, start)
    # -- eval: the start weights ----------------------------------------------------------------
    _validate_start(val, start, state, checkpointer)
    lag = LaggedMetrics()
    lengths = [len(r[0]) + len(r[1]) for r in pairs]
    # Whether batches carry loss_weight is the data's property, not a step's: every process
    # and every step then feeds one pytree to one compiled program (a step of unweighted rows
    # alone would otherwise be a second program, and a process-dependent field a hang).
    weighted = any(len(r) > 2 and r[2] is not None for r in pairs)
    bar = progress(range(start, cfg.steps), total=cfg.steps, initial=start, desc=cfg.desc)
    for step in bar:
        started = time.perf_counter()
        # -- data ---------------------------------------------------------------------------
        # Every process computes the step's pairs and feeds its own slice of them; the padded
        # length is the longest row's on any process (the global batch has one shape).
        # With train.sft_group_by_length, a step's rows are of similar length (`order`).
        idx = sft_batch_indices(lengths, cfg.batch_size, step, cfg.seed, cfg.group_by_length)
        idx = idx[multihost.process_slice(len(idx), "pairs a step (batch_size)")]
        need = max(multihost.gather(max(lengths[i] for i in idx)))
        padded = bucket_length(need, length, cfg.sft_buckets)
        rows = [pairs[i] for i in idx]
        weights = [r[2] if len(r) > 2 else None for r in rows] if weighted else None
        batch = sft_batch([r[0] for r in rows], [r[1] for r in rows], padded, pad_id, weights)
        # -- update -------------------------------------------------------------------------
        state, metrics = step_fn(state, shard_batch(setup, batch))
        timing = (started, sum(multihost.gather(int(np.sum(batch["valid"])))))
        _finish_step(step, metrics, lag, writer, bar, cfg, checkpointer, state, timing, val)
    _flush(lag, writer, bar, cfg)
    return state


def make_rl_update(
    setup: TrainSetup,
    algo: str,
    *,
    grpo_cfg=None,
    ppo_cfg=None,
    ref_params: Any = None,
    build_step: StepBuilder = make_step,
) -> Callable[[TrainState, dict], tuple[TrainState, dict]]:
    """`update(state, host_batch) -> (state, metrics)` for "grpo" or "ppo" (jitted inside), with
    the algorithm's settings (`grpo_cfg` or `ppo_cfg`, built by their `from_config`).

    `build_step` builds the update step from its spec (fault drills pass their own).
    """
    from memr1.rl import grpo_layout, ppo

    settings = {"grpo": grpo_cfg, "ppo": ppo_cfg}
    if algo in settings and settings[algo] is None:
        raise ValueError(f"make_rl_update({algo!r}) needs {algo}_cfg")

    def needs_ref(beta):  # a reference pass exists only with β > 0
        if beta > 0 and ref_params is None:
            raise ValueError(f"{algo} with KL beta={beta} needs reference parameters")
        return beta > 0

    if algo == "grpo":
        step = build_step(setup, steps.grpo_spec(setup, grpo_cfg))
        reference = needs_ref(grpo_cfg.kl_beta) and steps.make_grpo_reference(setup, grpo_cfg)
        fields = grpo_layout.ROW_FIELDS + ("prompt_mask", "old_logp", "sampler_logp")

        def grpo_update(s, b):
            parts = ({k: b[k] for k in fields if k in b},)
            if grpo_cfg.packed:  # one row a group, in width classes common to every process
                parts = batches.pack_step_classes(parts[0], *grpo_cfg.classes)
            parts = tuple(shard_batch(setup, part) for part in parts)
            if reference:  # the reference's forward pass, once per rollout
                for part, ref_logp in zip(parts, reference(ref_params, parts), strict=True):
                    part["ref_logp"] = ref_logp
            return step(s, parts)

        return grpo_update
    if algo == "ppo":
        prepare_fn = steps.make_ppo_prepare(setup, ppo_cfg)
        ref = (ref_params,) if needs_ref(ppo_cfg.kl_beta) else ()
        prepare = lambda s, b: prepare_fn(s, b, *ref)  # the reference runs here, once a rollout
        step = build_step(setup, steps.ppo_spec(setup, ppo_cfg))
        fields = ppo.PREPARE_FIELDS + ("old_logp", "sampler_logp")

        def update(s, b):
            prepared, prep_metrics = prepare(s, shard_batch(setup, {k: b[k] for k in fields}))
            s, metrics = step(s, prepared)
            return s, {**prep_metrics, **metrics}

        return update
    raise ValueError(f"unknown RL algorithm {algo!r}; expected 'grpo' or 'ppo'")


def run_rl(
    setup: TrainSetup,
    state: TrainState,
    update: Callable[[TrainState, dict], tuple[TrainState, dict]],
    states: Sequence[Any],
    rollout: Callable[[Any, Sequence[Any], jax.Array], tuple],
    *,
    cfg: LoopConfig,
    response_width: int,
    pad_id: int,
    checkpointer: Checkpointer | None = None,
    writer: MetricsWriter | None = None,
    validate: validation.Validate | None = None,
) -> TrainState:
    """GRPO or PPO: each step samples G outputs for `batch_size` states, scores, and updates.

    With `cfg.oversample` k > 1 (GRPO) a step samples k × `batch_size` states and updates on
    `batch_size` of their groups (`batches.signal_first_groups`); its reward metrics cover every
    sampled group.

    On several processes each one rolls out its contiguous slice of the step's states with a
    process-local copy of the weights and feeds its own rows to the update; group choices and
    the logged metrics cover the whole step (`memr1.train.multihost`, `batches.rollout_rows`).

    `rollout(params, states, key) -> (groups, rewards [B, G], stats)`; `update` from
    `make_rl_update`. `response_width` is the rollout's budget (`agents.<stage>_max_new_tokens`),
    not the batch's width: each step's rows are as wide as its own longest prompt and reply
    (`batches.rollout_rows`), and the update logs the share of padding as `pad_frac`.
    `validate(params, step)` (with `cfg.eval_every` > 0) gets the same process-local replica
    of the weights a rollout gets.
    """
    state, start = resume(checkpointer, setup, state)
    replica = lambda s: multihost.rollout_replica(s.params, setup.model_cfg)
    val = _start_validation(validate, replica, cfg, checkpointer, writer, start)
    # -- eval: the start weights ----------------------------------------------------------------
    _validate_start(val, start, state, checkpointer)
    lag = LaggedMetrics()
    multihost.check_batch_axes(setup.mesh)
    devices = setup.mesh.shape["data"] * setup.mesh.shape["fsdp"]
    quantum = 0
    if cfg.drop_zero_signal:
        sizes = (cfg.batch_size, cfg.group_size, cfg.n_micro, devices)
        quantum = batches.signal_quantum(*sizes, packed=cfg.packed)
    bar = progress(range(start, cfg.steps), total=cfg.steps, initial=start, desc=cfg.desc)
    for step in bar:
        started = time.perf_counter()
        # -- data ---------------------------------------------------------------------------
        # Every process computes the step's states; each rolls out its own slice of them.
        idx = batch_indices(len(states), cfg.batch_size * cfg.oversample, step, cfg.seed)
        mine = idx[multihost.process_slice(len(idx), "states a step (batch_size × oversample)")]
        # -- rollout + reward ---------------------------------------------------------------
        params = multihost.rollout_replica(state.params, setup.model_cfg)
        key = multihost.process_key(step_key(state.rng, step, 1))
        groups, rewards, rstats = rollout(params, [states[i] for i in mine], key)
        del params  # the replica's memory is free before the update runs
        batch, stats = batches.rollout_rows(
            groups,
            rewards,
            rstats,
            response_width=response_width,
            pad_id=pad_id,
            group=cfg.group_size,
            keep=cfg.batch_size if cfg.oversample > 1 else 0,
            quantum=quantum,
        )
        # -- update -------------------------------------------------------------------------
        state, metrics = update(state, batch)
        metrics = {**metrics, **stats}
        timing = (started, sum(multihost.gather(batches.update_tokens(batch, cfg))))
        _finish_step(step, metrics, lag, writer, bar, cfg, checkpointer, state, timing, val)
    _flush(lag, writer, bar, cfg)
    return state


def _flush(lag: LaggedMetrics, writer: MetricsWriter | None, bar, cfg: LoopConfig) -> None:
    ready = lag.flush()
    if ready is not None:
        _log(ready, writer, bar, cfg)
