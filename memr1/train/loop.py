"""The training loops: SFT on (prompt, target) pairs, and GRPO / PPO on rollouts of a stage.

Plain code with sections (data / rollout / update / log / checkpoint) rather than a Trainer.
Which examples a step sees is a pure function of (seed, step), so a run killed at any moment and
resumed from its last checkpoint replays exactly the steps it had not saved.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from memr1.train import batches
from memr1.train.checkpoint import Checkpointer
from memr1.train.metrics_log import LaggedMetrics, MetricsWriter, check_finite, progress
from memr1.train.sft import sft_batch
from memr1.train.state import TrainSetup, TrainState, step_key
from memr1.train.update import shard_batch


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    steps: int
    batch_size: int  # states (GRPO) or pairs (SFT) per step
    group_size: int = 1  # G samples per state (GRPO)
    checkpoint_every: int = 50
    seed: int = 0
    on_nonfinite: str = "skip"  # "skip" the refused update, or "stop" the run
    desc: str = "train"


def batch_indices(n: int, batch: int, step: int, seed: int) -> np.ndarray:
    """The example indices of `step`: consecutive slices of a fresh permutation per epoch."""
    if n <= 0:
        raise ValueError("no training examples")
    out = []
    start = step * batch
    while len(out) < batch:
        epoch, offset = divmod(start + len(out), n)
        perm = np.random.default_rng([seed, epoch]).permutation(n)
        out.extend(perm[offset : offset + batch - len(out)].tolist())
    return np.asarray(out)


def resume(checkpointer: Checkpointer | None, setup: TrainSetup, state: TrainState):
    """(state, first step): the latest checkpoint's, or the given state at step 0."""
    if checkpointer is None:
        return state, 0
    restored = checkpointer.restore_latest(setup.abstract_state)
    if restored is None:
        return state, 0
    restored_state, position = restored
    return restored_state, int(position["next_step"])


def _finish_step(step, metrics, lag, writer, bar, cfg, checkpointer, state) -> None:
    ready = lag.push(step, metrics)
    if ready is not None:
        check_finite(*ready, on_nonfinite=cfg.on_nonfinite)
        if writer is not None:
            writer.write(*ready)
        bar.set_postfix({k: f"{v:.3g}" for k, v in ready[1].items() if k in _SHOWN})
    done = step + 1
    if checkpointer is not None and (done % cfg.checkpoint_every == 0 or done == cfg.steps):
        checkpointer.save(done, state, {"next_step": done})


_SHOWN = ("loss", "reward", "kl", "zero_signal_frac")


def run_sft(
    setup: TrainSetup,
    state: TrainState,
    step_fn: Callable,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    cfg: LoopConfig,
    length: int,
    pad_id: int,
    checkpointer: Checkpointer | None = None,
    writer: MetricsWriter | None = None,
) -> TrainState:
    """SFT over (prompt ids, target ids) pairs for `cfg.steps` steps."""
    state, start = resume(checkpointer, setup, state)
    lag = LaggedMetrics()
    bar = progress(range(start, cfg.steps), total=cfg.steps, initial=start, desc=cfg.desc)
    for step in bar:
        # -- data ---------------------------------------------------------------------------
        idx = batch_indices(len(pairs), cfg.batch_size, step, cfg.seed)
        batch = sft_batch([pairs[i][0] for i in idx], [pairs[i][1] for i in idx], length, pad_id)
        # -- update -------------------------------------------------------------------------
        state, metrics = step_fn(state, shard_batch(setup, batch))
        _finish_step(step, metrics, lag, writer, bar, cfg, checkpointer, state)
    _flush(lag, writer, cfg)
    return state


def make_rl_update(
    setup: TrainSetup, algo: str, *, grpo_cfg=None, ppo_cfg=None, ref_params: Any = None
) -> Callable[[TrainState, dict], tuple[TrainState, dict]]:
    """`update(state, host_batch) -> (state, metrics)` for "grpo" or "ppo" (jitted inside)."""
    from memr1.train import grpo, ppo

    def with_ref(fn, beta):
        if beta > 0 and ref_params is None:
            raise ValueError(f"{algo} with KL beta={beta} needs reference parameters")
        return (lambda s, b: fn(s, b, ref_params)) if beta > 0 else fn

    if algo == "grpo":
        grpo_cfg = grpo_cfg or grpo.GRPOConfig()
        step = with_ref(grpo.make_grpo_step(setup, grpo_cfg), grpo_cfg.kl_beta)
        fields = grpo.FIELDS + ("old_logp", "sampler_logp")
        return lambda s, b: step(s, shard_batch(setup, {k: b[k] for k in fields}))
    if algo == "ppo":
        ppo_cfg = ppo_cfg or ppo.PPOConfig()
        prepare = ppo.make_ppo_prepare(setup, ppo_cfg)
        step = with_ref(ppo.make_ppo_step(setup, ppo_cfg), ppo_cfg.kl_beta)
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
) -> TrainState:
    """GRPO or PPO: each step samples G outputs for `batch_size` states, scores, and updates.

    `rollout(params, states, key) -> (groups, rewards [B, G], stats)`; `update` from
    `make_rl_update`.
    """
    state, start = resume(checkpointer, setup, state)
    lag = LaggedMetrics()
    bar = progress(range(start, cfg.steps), total=cfg.steps, initial=start, desc=cfg.desc)
    for step in bar:
        # -- data ---------------------------------------------------------------------------
        idx = batch_indices(len(states), cfg.batch_size, step, cfg.seed)
        chosen = [states[i] for i in idx]
        # -- rollout + reward ---------------------------------------------------------------
        groups, rewards, rstats = rollout(state.params, chosen, step_key(state.rng, step, 1))
        batch, gstats = batches.pack_rollout(
            groups, rewards, response_width=response_width, pad_id=pad_id
        )
        # -- update -------------------------------------------------------------------------
        state, metrics = update(state, batch)
        metrics = {**metrics, **rstats, **gstats}
        _finish_step(step, metrics, lag, writer, bar, cfg, checkpointer, state)
    _flush(lag, writer, cfg)
    return state


def _flush(lag: LaggedMetrics, writer: MetricsWriter | None, cfg: LoopConfig) -> None:
    ready = lag.flush()
    if ready is not None:
        check_finite(*ready, on_nonfinite=cfg.on_nonfinite)
        if writer is not None:
            writer.write(*ready)
