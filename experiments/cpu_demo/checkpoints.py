"""Which checkpoint of a stage the demo's later stages and evaluations read, and the records
that keep a reused stage honest.

An RL stage hands on its last step or, with its config's ``checkpoint`` "best", its best
validated step (``DIR:best``, memr1.train.checkpoint). Each RL stage's folder records what
it was trained with, the stages it started from and read included (the manager stage: the
Answer Agent's settings and which of its checkpoints rewarded it), and each evaluation
folder what it read; a run whose config differs refuses to reuse the stage, or evaluates
again, rather than report a policy trained under other settings.
"""

from __future__ import annotations

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


def check_stage(folder: Path, settings: dict) -> None:
    """Records the settings a stage's folder is trained with, or checks a reused or resumed
    folder's record against them (seed_tuples.check_built_with: a ValueError naming each
    difference, the folder left as it is; a folder without a record is refused too).

    An RL stage's settings hold those of every stage it starts from or reads (run.SeedRun.
    stage_settings), so a manager stage rewarded through another Answer Agent, or an answer
    stage started from another warm start, is never reused."""
    if folder.exists():
        check_built_with(folder, settings)
    else:
        record_build(folder, settings)


def built_with(folder: Path, settings: dict) -> bool:
    """Whether ``folder`` records exactly ``settings`` (an evaluation is run again if not)."""
    try:
        check_built_with(folder, settings)
    except ValueError:
        return False
    return True


def best_record(stage: Path) -> dict | None:
    """An RL stage's best validated step ({"step", "value", "metric"}), or None."""
    from memr1.train.checkpoint import Checkpointer

    if not (stage / "checkpoints").is_dir():
        return None
    with Checkpointer(stage / "checkpoints") as ckpt:
        return ckpt.best_record()
