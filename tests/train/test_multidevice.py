"""SFT and GRPO on a 2×2×2 mesh of 8 fake CPU devices equal the single-device results.

The fake device count is fixed when XLA's backend starts, so the check runs in a subprocess
(`multidevice_check.py`), where the flag is set before JAX is imported; this test process keeps
its single device.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_sharded_steps_match_one_device_and_shard_the_state():
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.train.multidevice_check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"multi-device check failed:\n{tail}"
    line = next(x for x in proc.stdout.splitlines() if x.startswith("MULTIDEVICE_OK "))
    report = json.loads(line.removeprefix("MULTIDEVICE_OK "))
    assert report["sft_grad_max_diff"] < 1e-5 and report["grpo_grad_max_diff"] < 1e-5
