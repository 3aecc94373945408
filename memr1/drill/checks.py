"""Reading back what a killed run left: checkpoints, train states and metrics.jsonl records."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memr1.train.metrics_log import is_wall_clock


def read_state(step_dir: Path) -> dict:
    """Every array of a checkpoint's train state, as numpy (keys as raw bits)."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    tree = ocp.PyTreeCheckpointer().restore(step_dir / "state")

    def host(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x)

    return {jax.tree_util.keystr(p): host(x) for p, x in jax.tree_util.tree_leaves_with_path(tree)}


def audit(ckpt_dir: Path, last_reported: int | None) -> dict:
    """Finalised steps, the ones that fail to restore, and whether a finished save vanished."""
    from memr1.train.checkpoint import COMMIT_MARKER

    steps = sorted(
        int(p.name) for p in ckpt_dir.iterdir() if p.name.isdigit() and (p / COMMIT_MARKER).exists()
    )
    unreadable = []
    for step in steps:
        try:
            read_state(ckpt_dir / str(step))
            json.loads((ckpt_dir / str(step) / "data" / "metadata").read_text())
        except Exception as err:  # any failure to read back counts as a lost checkpoint
            unreadable.append(f"{step}: {type(err).__name__}: {err}")
    vanished = last_reported is not None and (not steps or steps[-1] < last_reported)
    temporary = [p.name for p in ckpt_dir.iterdir() if ".orbax-checkpoint-tmp" in p.name]
    return {
        "finalised": steps,
        "unreadable": unreadable,
        "vanished": vanished,
        "temporary": temporary,
    }


def states_equal(a: Path, b: Path, only: str = "") -> bool:
    """Bitwise equality of two checkpoints' train states (or of the leaves under `only`)."""
    import numpy as np

    x, y = read_state(a), read_state(b)
    keys = [k for k in x if k.startswith(only)]
    return (
        bool(keys)
        and x.keys() == y.keys()
        and all(x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]) for k in keys)
    )


def record_differences(
    expected: Sequence[dict[str, Any]], actual: Sequence[dict[str, Any]]
) -> list[str]:
    """How two runs' metrics records differ, in words; empty when they agree.

    Every field that is not a wall-clock measurement (`metrics_log.is_wall_clock`) must be equal,
    non-finite values included (the writer stores them as the strings "nan", "inf"); both runs
    must log the same fields, wall-clock ones included. Records are compared in order, as written.
    """
    out = []
    if len(expected) != len(actual):
        out.append(f"{len(actual)} records, the uninterrupted run has {len(expected)}")
    for i, (want, got) in enumerate(zip(expected, actual)):
        where = f"record {i} (step {got.get('step')})"
        for key in sorted(want.keys() ^ got.keys()):
            side = "uninterrupted" if key in want else "resumed"
            out.append(f"{where}: field {key!r} only in the {side} run")
        for key in sorted(want.keys() & got.keys()):
            if not is_wall_clock(key) and want[key] != got[key]:
                out.append(f"{where}: {key} = {got[key]!r}, uninterrupted {want[key]!r}")
    return out


def raw_records(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl exactly as written (non-finite values stay strings)."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(keepends=True), 1):
        try:
            if not line.endswith("\n"):
                raise ValueError("no newline at the end")
            out.append(json.loads(line))
        except ValueError as err:
            raise ValueError(f"{path}: line {n} is not a whole JSON record ({err})") from err
    return out


def log_differences(expected: Path, actual: Path) -> list[str]:
    """`record_differences` of two metrics.jsonl files; an unreadable line is a difference."""
    try:
        return record_differences(raw_records(expected), raw_records(actual))
    except ValueError as err:
        return [str(err)]
