"""Shared helpers of the data tests: writing JSON, checking that errors point at the right spot."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from memr1.data.errors import DataError

REPO = Path(__file__).resolve().parents[2]
# The real file lives next to the repository on development machines only; a user's clone does not
# have it, so tests that need it skip. MEMR1_LOCOMO_PATH points elsewhere if it is kept elsewhere.
REAL_LOCOMO = Path(os.environ.get("MEMR1_LOCOMO_PATH", REPO.parent / "shared/data/locomo10.json"))
needs_real_locomo = pytest.mark.skipif(
    not REAL_LOCOMO.is_file(), reason="real LoCoMo file not present"
)


def write_json(path: Path, value: Any) -> Path:
    """Writes ``value`` as JSON to ``path`` and returns the path."""
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def assert_points_at(err: DataError, file: Path, sample: str, field: str) -> None:
    """Checks that an error names this file, sample and field, as attributes and in its message."""
    assert (err.file, err.sample, err.field) == (str(file), sample, field), str(err)
    message = str(err)
    for part in (str(file), sample, field):
        assert part in message, f"{part!r} missing from the message {message!r}"
