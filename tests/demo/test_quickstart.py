"""`python -m memr1.quickstart`, the README's smoke run of the plain commands, completes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_runs_every_command_and_writes_results(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-m", "memr1.quickstart", "--workdir", str(tmp_path), "--steps", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for system in ("locomo_rag", "memory_r1"):
        results = json.loads((tmp_path / f"eval-{system}" / "results.json").read_text())
        em = results["scores"]["overall"]["scores"]["em"]
        assert 0.0 <= em <= 1.0
    for stage in ("answer", "manager"):
        assert any((tmp_path / stage / "checkpoints").iterdir())
