"""The launch script's own commands, run: every stage that `MEMR1_DRY_RUN=1 gpu_node.sh` prints
runs for two steps on a tiny random Qwen2 checkpoint with the script's flags (recipe=paper:
remat, every device on the FSDP axis, micro-batches sized from the mesh), on 8 fake devices."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_devices import xla_flags

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("tuples", "answer", "manager", "evaluate", "export")


def _printed_commands(env: dict[str, str]) -> list[list[str]]:
    """The commands of every stage, as the dry run prints them (one line each)."""
    proc = subprocess.run(
        ["bash", str(ROOT / "experiments" / "gpu_node.sh"), *STAGES],
        env={**env, "MEMR1_DRY_RUN": "1"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith(shlex.quote(env["MEMR1_PYTHON"]))
    ]
    # The lines are bash's own quoting (printf %q, $'...' for the exporter's script): let bash
    # read them back into argument lists.
    return [_bash_words(line) for line in lines]


def _bash_words(line: str) -> list[str]:
    done = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, check=True, timeout=30
    )
    return done.stdout.decode().split("\0")[:-1]


@pytest.mark.slow
def test_every_stage_of_the_gpu_script_runs_with_its_own_flags(tmp_path):
    from tests.data_fixtures import write_locomo_fixture
    from tests.train.tiny import make_hf_base

    # Prompts of LoCoMo tuples run to hundreds of tokens: positions as a real backbone has.
    hf_dir = make_hf_base(tmp_path / "qwen-tiny", max_position=8192)
    locomo = write_locomo_fixture(tmp_path / "locomo10.json", num_conversations=10)
    run_dir = tmp_path / "run"
    env = {
        **os.environ,
        "MEMR1_PYTHON": sys.executable,
        "MEMR1_RUN_DIR": str(run_dir),
        "MEMR1_LOCOMO": str(locomo),
        "MEMR1_HF_DIR": str(hf_dir),
        "MEMR1_BACKBONE": "tiny",
        # Two steps of 8 prompts x G 2 = 16 rows: two micro-batches of one row per device.
        "MEMR1_STEPS": "2",
        "MEMR1_BATCH": "8",
        "MEMR1_GROUP": "2",
        # Both agents' budget, in training, the manager stage's reward and evaluation.
        "MEMR1_MAX_RESPONSE": "12",
        "MEMR1_EVAL_ARGS": "--config.data.max_questions=3 --config.memory.retriever=exact_numpy",
    }
    commands = _printed_commands(env)
    # The train and validation tuples, answer, manager, evaluate, and the export of two agents.
    assert len(commands) == 7
    run_env = {
        **env,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": xla_flags(8),
        "HF_HUB_OFFLINE": "1",
    }
    for command in commands:
        proc = subprocess.run(
            command, cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=900
        )
        assert proc.returncode == 0, f"{shlex.join(command)}\n{proc.stderr[-4000:]}"
    for stage in ("answer", "manager"):
        records = [
            json.loads(line)
            for line in (run_dir / f"{stage}-grpo" / "logs" / "metrics.jsonl")
            .read_text()
            .split("\n")
            if line
        ]
        train = [r for r in records if "train/loss" in r]
        assert [r["step"] for r in train] == [0, 1]
        assert all(r["train/update_refused"] == 0.0 for r in train)
        # The recipe validates every 10 steps: before the first step and after the last.
        assert [r["step"] for r in records if "val/em" in r] == [0, 2]
    manager = next(r for r in records if "train/loss" in r)  # the manager stage's first step
    assert "train/answerer_cut_frac" in manager and "train/malformed_frac" in manager
    results = json.loads((run_dir / "eval-grpo" / "results.json").read_text())
    assert results["num_questions"] == 3
    # The later stages loaded each stage's best validated step.
    assert results["answer_checkpoint"].endswith("answer-grpo/checkpoints:best")
    assert set(results["checkpoint_steps"].values()) <= {0, 2}
    for agent in ("answer", "manager"):
        assert (run_dir / "export" / f"{agent}-grpo" / "config.json").is_file()
