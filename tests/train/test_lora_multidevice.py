"""LoRA on a 2×2×2 mesh of 8 fake CPU devices equals one device, and the train command places its
policy and frozen answerer in shards (see `lora_multidevice_check.py`, run in a subprocess because
the fake device count is fixed when XLA starts)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_lora_step_and_train_setup_on_eight_devices():
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.train.lora_multidevice_check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"LoRA multi-device check failed:\n{tail}"
    line = next(x for x in proc.stdout.splitlines() if x.startswith("LORA_MULTIDEVICE_OK "))
    report = json.loads(line.removeprefix("LORA_MULTIDEVICE_OK "))
    assert report["lora_grad_max_diff"] < 1e-5
    assert report["lora_param_max_diff_after_2_steps"] < 1e-5
    assert report["merged_answerer_max_diff"] < 1e-6
    assert report["trainable_params_lora_rank4"] == 1856
