"""Training metrics on the host: TensorBoard, a JSONL file, a progress bar, and the NaN check.

The loop must not block the device every step. A step's metrics are device arrays that are not
ready until the step finishes; reading them at once would make the host wait for the device and
leave the device idle while the host prepares the next batch. `LaggedMetrics` holds on to step
k's metrics and hands them over (as floats) when step k + 1 has been dispatched, by which time
step k has usually finished. The NaN/inf check reads those host values, one step late as well.

    lag = LaggedMetrics()
    with MetricsWriter(workdir) as writer:
        for step in progress(range(start, total), total=total, initial=start):
            state, metrics = update(state, batch)
            if (ready := lag.push(step, metrics)) is not None:
                check_finite(*ready, on_nonfinite=cfg.on_nonfinite)
                writer.write(*ready)
        if (ready := lag.flush()) is not None:
            writer.write(*ready)
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from memr1.atomic import write_text_atomic
from memr1.torchless import torch_hidden


def _summary_writer_class():
    """tensorboardX's SummaryWriter, imported without torch.

    tensorboardX's writer imports torch, where it is installed, only to accept torch tensors as
    values; memr1 logs Python floats. Importing torch costs every `memr1.train` start ~2.5 s of
    CPU (more than JAX's own import), so tensorboardX loads under `memr1.torchless.torch_hidden`
    (tensorboardX catches the ImportError). A torch already imported (a parity test's) stays.
    """
    with torch_hidden():
        from tensorboardX import SummaryWriter
    return SummaryWriter


# Metric keys that measure wall-clock time rather than the computation: the `time/` and `perf/`
# sections (`time/step_s`, `perf/tokens_per_s`, from LaggedMetrics) and names that start with
# `time_` (a rollout's `time_sample_s`, `time_reward_s`, logged as `train/time_sample_s`). They
# differ between any two runs; every other field of a record is a function of the seed and the
# step, so a resumed run must reproduce it exactly (tools/fault_drill.py compares the rest).
WALL_CLOCK_SECTIONS = ("time", "perf")
WALL_CLOCK_NAME_PREFIX = "time_"


def is_wall_clock(key: str) -> bool:
    """Whether the metrics.jsonl field `key` is a wall-clock measurement (see above)."""
    section, _, name = key.rpartition("/")
    return section.split("/")[0] in WALL_CLOCK_SECTIONS or name.startswith(WALL_CLOCK_NAME_PREFIX)


class NonFiniteError(RuntimeError):
    """A step produced a non-finite loss or gradient norm and the run is set to stop."""


class LaggedMetrics:
    """Delays host reads of device metrics by one step (see the module docstring).

    Step timing: a step pushed with `started` (its loop iteration's `time.perf_counter()`) gets
    `time/step_s`, the wall time from then until its metrics are on the host, i.e. until the
    device finished it; with `tokens` (the tokens its update processed) also
    `perf/tokens_per_s`. The first step of a process includes compilation.
    """

    def __init__(self):
        self._pending: tuple[int, Any, float | None, int | None] | None = None

    def push(
        self,
        step: int,
        metrics: Mapping[str, Any],
        *,
        started: float | None = None,
        tokens: int | None = None,
    ) -> tuple[int, dict[str, float]] | None:
        """Stores this step's (device) metrics; returns the previous step's as floats, if any."""
        ready = self.flush()
        self._pending = (int(step), metrics, started, tokens)
        return ready

    def flush(self) -> tuple[int, dict[str, float]] | None:
        """The pending metrics as host floats (blocks on their step), or None."""
        if self._pending is None:
            return None
        step, metrics, started, tokens = self._pending
        self._pending = None
        host = jax.device_get(dict(metrics))
        out = {k: float(np.asarray(v)) for k, v in host.items()}
        if started is not None:
            elapsed = max(time.perf_counter() - started, 1e-9)
            out["time/step_s"] = elapsed
            if tokens is not None:
                out["perf/tokens_per_s"] = tokens / elapsed
        return step, out


def check_finite(step: int, metrics: Mapping[str, float], *, on_nonfinite: str = "skip") -> bool:
    """Returns True if the step's loss and gradient norm are finite.

    The update step has already refused a non-finite update (weights unchanged); this decides
    what the run does next: "skip" goes on with the next batch, "stop" raises NonFiniteError.
    """
    if on_nonfinite not in ("skip", "stop"):
        raise ValueError(f"on_nonfinite={on_nonfinite!r}; expected 'skip' or 'stop'")
    bad = {k: v for k, v in metrics.items() if k in ("loss", "grad_norm") and not math.isfinite(v)}
    if metrics.get("update_refused", 0.0) > 0 or bad:
        if on_nonfinite == "stop":
            raise NonFiniteError(
                f"step {step}: non-finite {bad or 'update'}; the update was refused"
            )
        return False
    return True


# Shares of a step's replies above which its rewards say little: the reward of a manager
# reply the frozen answerer could not finish reading, or that could not be parsed at all, is 0
# whatever the bank, and so is an answer whose judge verdict could not be read (the judge
# reward). The trainer warns on every logged step above these limits.
SHARE_LIMITS = {"answerer_cut_frac": 0.05, "malformed_frac": 0.05, "judge_unparseable_frac": 0.05}


def warn_shares(step: int, metrics: Mapping[str, float], warn=None) -> list[str]:
    """Warns (absl logging.warning unless `warn` is given) for each share above its limit;
    returns the messages."""
    from absl import logging

    messages = [
        f"step {step}: {key}={metrics[key]:.1%} is above {limit:.0%}: the rewards of those "
        f"replies are 0 whatever the policy did ({_SHARE_HINTS[key]})"
        for key, limit in SHARE_LIMITS.items()
        if key in metrics and metrics[key] > limit
    ]
    for message in messages:
        (warn or logging.warning)(message)
    return messages


_SHARE_HINTS = {
    "answerer_cut_frac": "raise agents.answer_max_new_tokens",
    "malformed_frac": "check the manager's reply format, or raise agents.manager_max_new_tokens",
    "judge_unparseable_frac": "check the judge model's replies (config judge.model)",
}


class MetricsWriter:
    """Writes scalars to TensorBoard event files and one JSON line per step to metrics.jsonl,
    and with `wandb_run` (`memr1.train.wandb_log`) the same names and values to W&B.

    The JSONL file is flushed after every line, so a crashed run keeps every step it logged.
    Non-finite values are written as the strings "nan" / "inf" / "-inf" (JSON has no NaN).

    Multi-host: every process runs the same loop and logs the same step metrics (global means,
    see `memr1.train.multihost`), so only process 0 writes; on the others a writer touches no
    file and every method does nothing.
    """

    def __init__(self, logdir: str | os.PathLike, *, tensorboard: bool = True, wandb_run=None):
        self.logdir = os.fspath(logdir)
        self.active = jax.process_index() == 0
        self._wandb = wandb_run if self.active else None
        if not self.active:
            return
        os.makedirs(self.logdir, exist_ok=True)
        self._path = os.path.join(self.logdir, "metrics.jsonl")
        self._jsonl = open(self._path, "a", encoding="utf-8")
        self._tb = _summary_writer_class()(self.logdir) if tensorboard else None

    def drop_from(self, step: int, *, keep_validation: bool = False) -> int:
        """Removes the JSONL records of steps >= `step`; returns how many lines went.

        A resumed run calls this with its first step: the records a killed process wrote after
        its last checkpoint are about to be written again, and a process killed mid-write can
        leave a torn last line, which is dropped too. The file is replaced atomically, so a kill
        during the rewrite leaves either the old or the new file. `keep_validation` keeps the
        validation records (`val/...` fields) of step `step` itself: a resumed run does not
        validate its first step again when the checkpoint it resumed from came after that
        validation (`memr1.train.validation`).
        """
        if not self.active:
            return 0
        self._jsonl.close()
        kept, dropped = [], 0
        with open(self._path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    record = json.loads(line)
                    at = int(record["step"])
                    validated = keep_validation and at == step and _is_validation(record)
                    keep = line.endswith("\n") and (at < step or validated)
                except (ValueError, KeyError, TypeError):
                    keep = False
                if keep:
                    kept.append(line)
                else:
                    dropped += 1
        if dropped:
            write_text_atomic(self._path, "".join(kept))
        self._jsonl = open(self._path, "a", encoding="utf-8")
        return dropped

    def write(self, step: int, metrics: Mapping[str, float], prefix: str = "train") -> None:
        """One record: `prefix/name` for each metric, or `name` itself when it already names its
        section (`time/step_s`, `perf/tokens_per_s`)."""
        if not self.active:
            return
        record = {"step": int(step)}
        values = {}
        for name, value in metrics.items():
            value = float(value)
            key = name if "/" in name else f"{prefix}/{name}"
            values[key] = value
            record[key] = value if math.isfinite(value) else str(value)
            if self._tb is not None:
                self._tb.add_scalar(key, value, int(step))
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        if self._wandb is not None:
            self._wandb.log(int(step), values)

    def close(self, failed: bool = False) -> None:
        if not self.active:
            return
        self._jsonl.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish(failed=failed)
            self._wandb = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(failed=exc_type is not None)


def _is_validation(record: Mapping[str, Any]) -> bool:
    return any(key.startswith("val/") for key in record)


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl file (non-finite strings turned back into floats)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            out.append({k: float(v) if isinstance(v, str) else v for k, v in record.items()})
    return out


def progress(
    iterable: Iterable, *, total: int, initial: int = 0, desc: str = "train", **tqdm_kwargs
) -> tqdm:
    """A tqdm bar over the steps, with rate and ETA; `initial` marks where a resumed run starts,
    so the ETA counts only the steps run in this process. Show metrics with
    `bar.set_postfix(loss=..., ...)`; extra keyword arguments go to tqdm (file, disable, ...).
    Of a multi-host run only process 0 shows its bar (the others iterate silently)."""
    tqdm_kwargs.setdefault("disable", jax.process_index() != 0)
    return tqdm(
        iterable, total=total, initial=initial, desc=desc, dynamic_ncols=True, **tqdm_kwargs
    )
