"""experiments/gpu_node.sh sizes train.n_micro so that micro-batches hold whole GRPO groups
(the shared-prompt update refuses anything else) and refuses a batch that cannot split."""

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(tmp_path, devices: int, **env):
    run_env = {
        **os.environ,
        "MEMR1_DRY_RUN": "1",
        "MEMR1_NUM_DEVICES": str(devices),
        "MEMR1_RUN_DIR": str(tmp_path / "run"),
        "MEMR1_HF_DIR": str(tmp_path),
        "MEMR1_TUPLES": str(tmp_path),
        "MEMR1_BACKBONE": "qwen2.5-3b",
        **env,
    }
    return subprocess.run(
        ["bash", str(ROOT / "experiments" / "gpu_node.sh"), "answer"],
        env=run_env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    "devices, micro_rows, n_micro",
    [(8, 1, 128), (16, 1, 64), (4, 1, 128), (2, 2, 128), (8, 2, 64)],
)
def test_micro_batches_hold_whole_groups(tmp_path, devices, micro_rows, n_micro):
    # 128 prompts x G 8 = 1,024 rows; a micro-batch is lcm(micro rows x devices, 8) rows.
    proc = _dry_run(tmp_path, devices, MEMR1_MICRO_ROWS=str(micro_rows))
    assert proc.returncode == 0, proc.stderr
    assert re.findall(r"--config\.train\.n_micro=(\d+)", proc.stdout) == [str(n_micro)]
    assert not (tmp_path / "run").exists(), "a dry run wrote its run directory"


def test_a_batch_that_cannot_hold_whole_groups_is_refused(tmp_path):
    proc = _dry_run(tmp_path, 3)
    assert proc.returncode != 0
    assert "whole groups of 8" in proc.stderr
