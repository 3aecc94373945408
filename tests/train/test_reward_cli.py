"""`python -m memr1.train` with `train.reward` and W&B, as a user runs it: an answer-stage GRPO
run with the F1 reward logs train/reward to metrics.jsonl and to an offline W&B run under its
workdir, and a restart resumes into the same W&B run; the manager stage trains on the F1 reward
through the frozen tiny answerer; an unknown reward stops the run by name before anything loads.

W&B runs offline (no account) with its base URL on a closed loopback port, so that nothing
here can reach a network even if offline mode were ignored.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from memr1.train.metrics_log import read_jsonl
from memr1.train.wandb_log import RUN_ID_FILE
from tests.pipeline.conftest import synth_dir  # noqa: F401  (the synthloco fixture)
from tests.pipeline.test_validation_cli import _tuples

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    home = tmp_path_factory.mktemp("wandb-home")
    return {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_BASE_URL": f"http://127.0.0.1:{_closed_port()}",
        "WANDB_CONFIG_DIR": str(home / "config"),
        "WANDB_CACHE_DIR": str(home / "cache"),
        "WANDB_DATA_DIR": str(home / "data"),
        "WANDB_DISABLE_CODE": "true",
    }


def _cli(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "memr1.train", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


@pytest.fixture(scope="module")
def train_tuples(synth_dir, tmp_path_factory):  # noqa: F811
    return _tuples(synth_dir, "train", tmp_path_factory.mktemp("reward-cli") / "train")


def _flags(synth_dir, tuples, workdir, stage, *extra):  # noqa: F811
    return (
        f"--config=configs/memr1.py:runlocal,algo=grpo,stage={stage}",
        f"--config.tokenizer_dir={synth_dir / 'tokenizer'}", f"--tuples={tuples}",
        f"--workdir={workdir}", "--config.train.batch_size=2", "--config.train.group_size=2",
        "--config.agents.answer_max_new_tokens=6", "--config.agents.manager_max_new_tokens=12",
        "--config.agents.max_prompt_tokens=512", "--config.train.reward=f1", *extra,
    )  # fmt: skip


def wandb_history(path: Path) -> dict[int, dict]:
    """step -> the metrics of an offline W&B run file (its records in W&B's LevelDB-style log:
    a 7-byte header, then 32 KiB blocks of records, each crc32, length, type, payload)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    pos, block, chunks, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # FULL, LAST
            chunks.append(pending + chunk)
            pending = b""
        elif kind in (2, 3):  # FIRST, MIDDLE
            pending += chunk
    history, config = {}, {}
    for raw in chunks:
        record = pb.Record.FromString(raw)
        which = record.WhichOneof("record_type")
        if which == "history":
            items = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in record.history.item
            }
            history.setdefault(record.history.step.num, {}).update(items)
        elif which == "run":
            config = {u.key: json.loads(u.value_json) for u in record.run.config.update}
    return history, config


def _offline_runs(workdir: Path) -> list[Path]:
    return sorted((workdir / "wandb").glob("offline-run-*/run-*.wandb"))


def test_f1_reward_logs_to_jsonl_and_an_offline_wandb_run_that_a_restart_resumes(
    synth_dir,  # noqa: F811
    train_tuples,
    env,
    tmp_path,
):
    workdir = tmp_path / "run"
    args = _flags(synth_dir, train_tuples, workdir, "answer", "--config.train.checkpoint_every=1",
                  "--config.train.wandb_project=memr1-tests")  # fmt: skip
    first = _cli(env, *args, "--config.train.steps=2")
    assert first.returncode == 0, first.stderr[-3000:]
    records = read_jsonl(workdir / "logs" / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1]
    for r in records:
        # The reward is the answers' F1, as train/f1 scores them; EM is still logged beside it.
        assert r["train/reward"] == pytest.approx(r["train/f1"], abs=1e-6)
        assert {"train/em", "train/no_marker_frac"} <= r.keys()
    run_id = (workdir / "logs" / RUN_ID_FILE).read_text().strip()
    (run_file,) = _offline_runs(workdir)
    assert run_file.name == f"run-{run_id}.wandb"
    history, config = wandb_history(run_file)
    assert sorted(history) == [0, 1]
    for r in records:
        assert history[r["step"]]["train/reward"] == pytest.approx(r["train/reward"])
    assert config["train"]["reward"] == "f1"
    assert config["train"]["wandb_project"] == "memr1-tests"

    # A restart with a longer schedule resumes from checkpoint 2, into the same W&B run.
    second = _cli(env, *args, "--config.train.steps=3")
    assert second.returncode == 0, second.stderr[-3000:]
    assert [r["step"] for r in read_jsonl(workdir / "logs" / "metrics.jsonl")] == [0, 1, 2]
    assert (workdir / "logs" / RUN_ID_FILE).read_text().strip() == run_id
    runs = _offline_runs(workdir)
    assert len(runs) == 2 and {p.name for p in runs} == {f"run-{run_id}.wandb"}
    resumed, _ = wandb_history(runs[-1])
    assert sorted(resumed) == [2] and "train/reward" in resumed[2]


def test_the_manager_stage_trains_on_the_f1_reward_through_the_frozen_answerer(
    synth_dir,  # noqa: F811
    train_tuples,
    env,
    tmp_path,
):
    workdir = tmp_path / "manager"
    proc = _cli(env, *_flags(synth_dir, train_tuples, workdir, "manager"), "--config.train.steps=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = read_jsonl(workdir / "logs" / "metrics.jsonl")
    for key in ("reward", "em", "malformed_frac", "duplicate_id_frac", "extra_add_frac"):
        assert 0.0 <= record[f"train/{key}"] <= 1.0, key
    assert not (workdir / "wandb").exists()  # train.wandb_project "" = off


def test_an_unknown_reward_exits_non_zero_naming_train_reward_before_anything(
    synth_dir,  # noqa: F811
    train_tuples,
    env,
    tmp_path,
):
    workdir = tmp_path / "bleu"
    args = _flags(synth_dir, train_tuples, workdir, "answer", "--config.train.reward=bleu")
    proc = _cli(env, *args)
    assert proc.returncode == 2, proc.stderr[-3000:]
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("memr1.train: error: config train.reward='bleu' is not one of")
    assert not workdir.exists()
