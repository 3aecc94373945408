"""Which checkpoint of a stage the demo's later stages and evaluations read, and the record
that keeps a reused stage honest about it.

An RL stage hands on its last step or, with its config's ``checkpoint`` "best", its best
validated step (``DIR:best``, memr1.train.checkpoint). The manager stage is rewarded through
the Answer Agent's checkpoint, so its folder records which one (``answer_checkpoint``), and
a run whose config names the other refuses to reuse it rather than evaluating a manager
trained against another reader.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from experiments.cpu_demo.seed_tuples import check_built_with, record_build

# Which checkpoint of an RL stage the stages after it and the evaluation read.
PICKS = ("last", "best")


def spec(stage: Path, pick: str, field: str) -> str:
    """The checkpoint spec of ``stage`` for ``pick`` ("last": the bare directory, the latest
    step; "best": ``DIR:best``); ``field`` names the config setting in the error.

    Raises:
      ValueError: ``pick`` is not one of PICKS.
    """
    if pick not in PICKS:
        raise ValueError(f"{field}: expected one of {PICKS}, got {pick!r}")
    directory = str(stage / "checkpoints")
    return f"{directory}:best" if pick == "best" else directory


def same(read: Sequence[str | None], wanted: Sequence[str | None]) -> bool:
    """Whether two lists of checkpoint specs name the same checkpoints, links resolved."""

    def real(specs):
        return [None if s is None else os.path.realpath(s) for s in specs]

    return real(read) == real(wanted)


def check_reader(manager_stage: Path, answer_pick: str) -> None:
    """Records which Answer Agent checkpoint the manager stage is rewarded through, or checks
    it against the record of a folder being reused (a folder from before the record was
    trained against the last step, the only choice then).

    Raises:
      ValueError: the folder was trained against the other checkpoint (seed_tuples'
        message: delete it or run with --fresh).
    """
    reader = {"answer_checkpoint": answer_pick}
    if not (manager_stage / "metadata.json").is_file():
        legacy = (manager_stage / "checkpoints").is_dir()
        record_build(manager_stage, {"answer_checkpoint": "last"} if legacy else reader)
    check_built_with(manager_stage, reader)
