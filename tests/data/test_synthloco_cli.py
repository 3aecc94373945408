"""The synthloco command line, and its output read back through the real LoCoMo loader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memr1.data.locomo import load_locomo
from tests.data.helpers import REAL_LOCOMO, REPO, needs_real_locomo

SPLITS = ("train", "validation", "test")


def _run(*args: str, hash_seed: str = "0") -> subprocess.CompletedProcess:
    # A fixed but different PYTHONHASHSEED per run shows that no output depends on set order.
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        [sys.executable, "-m", "memr1.data.synthloco.generate", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synthloco") / "tiny"
    result = _run("--out", str(out), "--preset", "tiny", "--seed", "3", hash_seed="1")
    assert result.returncode == 0, result.stderr
    return out


def test_cli_writes_every_file_and_is_reproducible_across_processes(tiny_dir, tmp_path):
    names = sorted(p.name for p in tiny_dir.iterdir())
    assert names == sorted([f"{s}.json" for s in SPLITS] + ["gold_ops.json", "metadata.json"])
    again = tmp_path / "again"
    result = _run("--out", str(again), "--preset", "tiny", "--seed", "3", hash_seed="2")
    assert result.returncode == 0, result.stderr
    for name in names:
        assert (tiny_dir / name).read_bytes() == (again / name).read_bytes(), name
    metadata = json.loads((tiny_dir / "metadata.json").read_text())
    assert metadata["preset"] == "tiny" and metadata["config"]["seed"] == 3
    assert metadata["counts"]["train"]["conversations"] == 1


def test_cli_output_loads_with_the_locomo_loader(tiny_dir):
    gold = json.loads((tiny_dir / "gold_ops.json").read_text())["conversations"]
    for split in SPLITS:
        raw = json.loads((tiny_dir / f"{split}.json").read_text())
        loaded = load_locomo(tiny_dir / f"{split}.json", source="synthloco")
        assert [c.sample_id for c in loaded] == [f"synth-{split}-000"]
        for record, conversation in zip(raw, loaded):
            assert conversation.dangling_evidence() == ()
            assert len(conversation.qa) == len(record["qa"])
            assert conversation.num_turns == len(gold[conversation.sample_id]["ops"])
            n_obs = sum(len(v) for o in record["observation"].values() for v in o.values())
            assert len(conversation.observation) == n_obs
            adversarial = [qa for qa in conversation.qa if qa.category == 5]
            assert adversarial and all(qa.answer_from_adversarial for qa in adversarial)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--preset", "huge"), "invalid choice"),
        (("--seed", "-1"), "non-negative"),
        (("--seed", "one"), "invalid int"),
    ],
)
def test_cli_bad_arguments_write_nothing(tmp_path, args, message):
    out = tmp_path / "out"
    result = _run("--out", str(out), *args)
    assert result.returncode != 0
    assert message in result.stderr
    assert not out.exists()


def test_cli_refuses_an_output_path_that_is_a_file(tmp_path):
    blocker = tmp_path / "taken"
    blocker.write_text("keep me")
    result = _run("--out", str(blocker), "--preset", "tiny")
    assert result.returncode != 0 and "not a folder" in result.stderr
    assert blocker.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


@needs_real_locomo
def test_keys_match_the_real_locomo_file(tiny_dir):
    real = json.loads(REAL_LOCOMO.read_text())[0]
    synth = json.loads((tiny_dir / "train.json").read_text())[0]
    assert list(synth) == list(real)
    real_turn_keys = {k for k, v in real["conversation"].items() if isinstance(v, list)}
    turn = synth["conversation"]["session_1"][0]
    assert set(turn) <= set(real["conversation"]["session_1"][0])
    assert real_turn_keys and all(k.startswith("session_") for k in real_turn_keys)
    real_qa_shapes = {tuple(qa) for qa in real["qa"]}
    assert {tuple(qa) for qa in synth["qa"]} <= real_qa_shapes
    real_events = real["event_summary"]["events_session_1"]
    assert len(synth["event_summary"]["events_session_1"]) == len(real_events)
