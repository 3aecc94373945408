"""Runs a check module in a subprocess, where XLA's fake CPU device count can still be chosen.

The fake device count is fixed when XLA's backend starts, so a multi-device check sets its flag
before importing JAX in a fresh process; the test process keeps its single device. The other XLA
flags of the test run (an ISA cap such as `--xla_cpu_max_isa=AVX2`) travel into the subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_COUNT = "--xla_force_host_platform_device_count"


def xla_flags(devices: int | None = None) -> str:
    """This process's XLA_FLAGS without its fake device count, plus `devices` fake CPU devices
    when given: what a subprocess that chooses its own device count should see."""
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if f.split("=")[0] != _COUNT]
    if devices is not None:
        kept.append(f"{_COUNT}={devices}")
    return " ".join(kept)


def run_check(module: str, marker: str, *, timeout: int = 900) -> dict:
    """Runs `python -m module` and returns the JSON report it prints after `marker`."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    env["XLA_FLAGS"] = xla_flags()  # the check module adds its own device count
    proc = subprocess.run(
        [sys.executable, "-m", module],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"{module} failed:\n{tail}"
    line = next(x for x in proc.stdout.splitlines() if x.startswith(f"{marker} "))
    return json.loads(line.removeprefix(f"{marker} "))
