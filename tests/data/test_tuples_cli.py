"""The tuples command line (run as a user would, in a subprocess, with the pinned MiniLM), its
errors, and the counts on the real LoCoMo training conversation."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from memr1.data.locomo import load_locomo
from memr1.data.split import split_conversations
from memr1.tuples import read_metadata, read_tuples
from memr1.tuples.cli import main
from tests.data.helpers import REAL_LOCOMO, REPO, needs_real_locomo
from tests.data.test_tuples import write_synth


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "memr1.tuples", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def synth_file(tmp_path_factory):
    return write_synth(tmp_path_factory.mktemp("synth")) / "test.json"


def test_cli_writes_tuples_and_prints_counts(synth_file, tmp_path):
    out = tmp_path / "tuples"
    args = ["--dataset", "synthloco", "--path", str(synth_file), "--out", str(out)]
    result = _run(*args, "--window", "6", "--k_per_speaker", "4", "--all_turns")
    assert result.returncode == 0, result.stderr
    (conv,) = split_conversations(load_locomo(synth_file), (1,), names=("all",))["all"]
    manager, answer = read_tuples(out, "manager"), read_tuples(out, "answer")
    assert f"answer tuples: {len(conv.qa)}" in result.stdout
    assert f"manager tuples: {len(manager)} written" in result.stdout
    assert len(answer) == len(conv.qa) and manager and any(not m.has_qa for m in manager)
    assert all(m.window_start == max(0, m.turn_index - 6) for m in manager)
    build = read_metadata(out)["build"]
    assert (build["split"], build["builder"], build["window"]) == ("all", "observation", 6)
    assert all(len(a.memories) <= 8 for a in answer)


def test_cli_error_exits_2_and_writes_nothing(tmp_path):
    out = tmp_path / "tuples"
    result = _run("--dataset", "locomo", "--path", str(tmp_path / "nope.json"), "--out", str(out))
    assert result.returncode == 2
    assert "error:" in result.stderr and "nope.json" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--builder", "teacher"], "need --hf_dir or --tokenizer_dir"),
        (["--hf_dir", "x"], "only used by"),
        (["--window", "-3"], "window"),
        (["--split", "train"], "split 'train' has no conversation"),
    ],
)
def test_cli_bad_settings_are_named(synth_file, tmp_path, capsys, extra, message):
    out = tmp_path / "tuples"
    code = main(["--dataset", "synthloco", "--path", str(synth_file), "--out", str(out), *extra])
    assert code == 2 and message in capsys.readouterr().err
    assert not out.exists()


def test_cli_refuses_to_overwrite_without_the_flag(synth_file, tmp_path, capsys):
    out = tmp_path / "tuples"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    code = main(["--dataset", "synthloco", "--path", str(synth_file), "--out", str(out)])
    assert code == 2 and "not a tuples folder" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


@needs_real_locomo
def test_real_locomo_train_split_counts():
    from memr1.embed import Encoder
    from memr1.tuples.build import build_tuples

    (conv,) = split_conversations(load_locomo(REAL_LOCOMO))["train"]
    assert conv.sample_id == "conv-26"
    encoder = Encoder.from_dir()
    result = build_tuples([conv], embed=encoder.encode, dim=encoder.dim)
    counts = result.counts
    # conv-26: 419 turns, 165 with observation facts, 92 of them cited by a question.
    assert (counts["turns"], counts["turns_with_facts"]) == (419, 165)
    assert counts["manager_with_qa"] == counts["manager_written"] == len(result.manager) == 92
    assert len(result.answer) == 152
    # 104 and 80 facts per speaker: every answer tuple gets the full 30 + 30.
    assert all(len(a.memories) == 60 for a in result.answer)
    turns = list(conv.iter_turns())
    position = {t.dia_id: p for p, t in enumerate(turns)}
    for m in result.manager:
        assert all(m.window_start <= position[x.dia_id] < m.turn_index for x in m.bank)
        assert all(m.dia_id in q.evidence for q in m.qa) and m.qa
