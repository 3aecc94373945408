"""experiments/gpu_node.sh passes the paper's recipe and only the overrides that are set; the
micro-batch arithmetic lives in Python (memr1.train.mesh.micro_batch_count, tests/train)."""

import os
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(tmp_path, *stages, **env):
    run_env = {
        **os.environ,
        "MEMR1_DRY_RUN": "1",
        "MEMR1_RUN_DIR": str(tmp_path / "run"),
        "MEMR1_HF_DIR": str(tmp_path),
        "MEMR1_TUPLES": str(tmp_path),
        "MEMR1_BACKBONE": "qwen2.5-3b",
        **env,
    }
    return subprocess.run(
        ["bash", str(ROOT / "experiments" / "gpu_node.sh"), *(stages or ("answer",))],
        env=run_env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_training_stages_run_the_paper_recipe(tmp_path):
    proc = _dry_run(tmp_path, "answer", "manager")
    assert proc.returncode == 0, proc.stderr
    commands = [shlex.split(line) for line in proc.stdout.splitlines() if "memr1.train" in line]
    configs = [c[c.index("--config") + 1].split(":", 1)[1] for c in commands]
    assert configs == [
        "backbone=qwen2.5-3b,algo=grpo,stage=answer,dataset=locomo,recipe=paper",
        "backbone=qwen2.5-3b,algo=grpo,stage=manager,dataset=locomo,recipe=paper",
    ]
    # Nothing but the recipe when no override is set; the script holds no numbers of its own.
    assert "--config.train" not in proc.stdout and "--config.mesh" not in proc.stdout
    assert not (tmp_path / "run").exists(), "a dry run wrote its run directory"


def test_overrides_that_are_set_pass_through(tmp_path):
    proc = _dry_run(
        tmp_path, MEMR1_MESH="2,-1,1", MEMR1_MICRO_ROWS="2", MEMR1_BATCH="64", MEMR1_STEPS="5"
    )
    assert proc.returncode == 0, proc.stderr
    for flag in (
        "--config.mesh.data=2",
        "--config.mesh.fsdp=-1",
        "--config.train.micro_rows=2",
        "--config.train.batch_size=64",
        "--config.train.steps=5",
    ):
        assert flag in proc.stdout
    bad = _dry_run(tmp_path, MEMR1_MESH="2,4")
    assert bad.returncode == 2 and "MEMR1_MESH=2,4" in bad.stderr


def test_one_budget_per_agent_in_training_reward_and_evaluation(tmp_path):
    """MEMR1_MAX_RESPONSE sets both agents' one budget on every stage that samples them: the
    training stages (the manager stage's frozen answerer included) and evaluation, which runs
    at the recipe's budgets (2,048) when it is unset, as training does."""
    locomo = tmp_path / "locomo10.json"
    locomo.write_text("[]")
    stages = ("answer", "manager", "evaluate")
    want = [
        "--config.agents.answer_max_new_tokens=64",
        "--config.agents.manager_max_new_tokens=64",
    ]
    proc = _dry_run(tmp_path, *stages, MEMR1_MAX_RESPONSE="64", MEMR1_LOCOMO=str(locomo))
    assert proc.returncode == 0, proc.stderr
    commands = [shlex.split(line) for line in proc.stdout.splitlines() if "-m" in line]
    assert len(commands) == 3
    for command in commands:
        assert all(flag in command for flag in want), command
        assert command[command.index("--config") + 1].endswith(",recipe=paper")
    assert "max_new_tokens" not in _dry_run(tmp_path, *stages, MEMR1_LOCOMO=str(locomo)).stdout


def test_the_tpu_script_launches_the_same_training_commands(tmp_path):
    """tpu_pod.sh only sets up the process group and calls gpu_node.sh: its training commands
    are the ones test_launch_tiny.py runs on 8 fake devices."""
    group = {"JAX_COORDINATOR_ADDRESS": "10.0.0.2:8476", "JAX_NUM_PROCESSES": "4"}
    node = _dry_run(tmp_path, "answer", "manager")
    lines = {}
    for host in ("0", "3"):
        env = {**os.environ, "MEMR1_DRY_RUN": "1", "MEMR1_RUN_DIR": str(tmp_path / "run"),
               "MEMR1_HF_DIR": str(tmp_path), "MEMR1_TUPLES": str(tmp_path),
               "MEMR1_BACKBONE": "qwen2.5-3b", **group, "JAX_PROCESS_ID": host}  # fmt: skip
        pod = subprocess.run(
            ["bash", str(ROOT / "experiments" / "tpu_pod.sh"), "answer", "manager"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert pod.returncode == 0, pod.stderr
        lines[host] = [line for line in pod.stdout.splitlines() if "memr1.train" in line]
    want = [line for line in node.stdout.splitlines() if "memr1.train" in line]
    assert len(want) == 2 and lines["0"] == lines["3"] == want
    missing = subprocess.run(
        ["bash", str(ROOT / "experiments" / "tpu_pod.sh"), "answer"],
        env={**os.environ, **group}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert missing.returncode == 2 and "JAX_PROCESS_ID" in missing.stderr
