"""Weights & Biases as a third sink of the training metrics, beside TensorBoard and metrics.jsonl
(`train.wandb_project`; "" = off).

The run logs every record `metrics_log.MetricsWriter` writes, under the same names
(`train/reward`, `val/em`, `time/step_s`, ...) at the same step, with the run's whole config.
Its W&B id is kept in WORKDIR/logs/wandb_run_id, written before the run starts, so a restarted
process resumes the same W&B run (`resume="allow"`): the steps a resumed run replays (those after
its last checkpoint) are logged again with the values they had, which the trainer reproduces
exactly except wall-clock fields; W&B keeps the first copy of a step it already holds.
The W&B files go under the workdir (WORKDIR/wandb). `WANDB_MODE=offline` needs no account and no
network (`wandb sync WORKDIR/wandb/offline-run-*` uploads later, each restart's folder into the
one run); `WANDB_MODE=disabled` turns W&B off without touching the config.

Everything that can fail does so at start, before any model loads, with a message naming the
setting: the package missing (`pip install 'memr1[wandb]'`), no API key in online mode, or
`wandb.init` refusing. Multi-host: only process 0 logs, as it alone writes metrics.jsonl.
"""

from __future__ import annotations

import math
import os
import secrets
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax

from memr1.atomic import write_text_atomic

RUN_ID_FILE = "wandb_run_id"
_OFFLINE_MODES = ("offline", "dryrun", "disabled")


def _import_wandb():
    try:
        import wandb
    except ImportError as err:
        raise ValueError(
            "config train.wandb_project is set but the wandb package is not installed: "
            "pip install 'memr1[wandb]' (or leave train.wandb_project empty)"
        ) from err
    return wandb


def _has_credentials() -> bool:
    """Whether online W&B has a key without asking for one: WANDB_API_KEY, or `wandb login`'s
    netrc entry for the W&B host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        from wandb.sdk.lib.wbauth.wbnetrc import read_netrc_auth
    except ImportError:  # another wandb release: let wandb.init decide
        return True
    host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    try:
        return bool(read_netrc_auth(host=host))
    except Exception:  # an unreadable netrc is no key
        return False


def check(config) -> None:
    """Refuses a `train.wandb_project` that cannot log, before anything is built."""
    project = config.train.wandb_project
    if not isinstance(project, str):
        raise ValueError(f"config train.wandb_project={project!r}: a W&B project name, or ''")
    if not project:
        return
    _import_wandb()
    mode = os.environ.get("WANDB_MODE", "online").lower()
    if mode not in _OFFLINE_MODES and not _has_credentials():
        raise ValueError(
            f"config train.wandb_project={project!r}: W&B has no API key (set WANDB_API_KEY or "
            "run `wandb login`), or log without an account with WANDB_MODE=offline"
        )


class WandbRun:
    """One W&B run of a training workdir; `log(step, record)` takes a metrics.jsonl record."""

    def __init__(self, run):
        self.run = run
        self.finished = False

    def log(self, step: int, record: Mapping[str, Any]) -> None:
        values = {k: float(v) for k, v in record.items() if k != "step"}
        self.run.log(values, step=int(step))

    def finish(self, failed: bool = False) -> None:
        """Ends the run (once; later calls do nothing), marked failed on an error."""
        if not self.finished:
            self.finished = True
            self.run.finish(exit_code=1 if failed else 0)


def open_run(config, workdir: str | os.PathLike) -> WandbRun | None:
    """The run's W&B run (None when `train.wandb_project` is "" or on processes other than 0),
    started now and resumed when WORKDIR/logs/wandb_run_id names an earlier one."""
    check(config)
    project = config.train.wandb_project
    if not project or jax.process_index() != 0:
        return None
    wandb = _import_wandb()
    workdir = Path(workdir)
    id_file = workdir / "logs" / RUN_ID_FILE
    if id_file.is_file():
        run_id = id_file.read_text(encoding="utf-8").strip()
    else:
        # W&B's own id form: 8 characters of [a-z0-9].
        run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
        id_file.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(id_file, run_id + "\n")
    try:
        run = wandb.init(
            project=project,
            dir=str(workdir),
            id=run_id,
            resume="allow",
            name=workdir.resolve().name,
            config=_plain(config.to_dict()),
            # The console stays the trainer's: no stdout capture around the progress bar.
            settings=wandb.Settings(console="off"),
        )
    except Exception as err:  # wandb's errors have no common base class
        raise ValueError(
            f"config train.wandb_project={project!r}: W&B could not start run {run_id}: {err}"
        ) from err
    return WandbRun(run)


def _plain(value):
    """The config as JSON-able values (placeholders' None stay None, NaN as a string)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
