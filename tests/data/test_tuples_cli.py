"""The tuples command line (run as a user would, in a subprocess, with the pinned MiniLM), its
errors, and the counts on the real LoCoMo training conversation."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from configs import memr1 as memr1_config
from memr1.data.locomo import load_locomo
from memr1.data.split import split_conversations
from memr1.tuples import read_metadata, read_tuples
from memr1.tuples.cli import main
from tests.data.helpers import REAL_LOCOMO, REPO, needs_real_locomo
from tests.data.test_tuples import write_synth

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow


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


def _config(path, arg: str = "dataset=synthloco"):
    """configs/memr1.py's config of `arg` reading the dataset file `path`."""
    config = memr1_config.get_config(arg)
    config.data.path = str(path)
    return config


@pytest.fixture(scope="module")
def synth_file(tmp_path_factory):
    return write_synth(tmp_path_factory.mktemp("synth")) / "test.json"


def test_cli_writes_tuples_and_prints_counts(synth_file, tmp_path):
    out = tmp_path / "tuples"
    args = ["--config=configs/memr1.py:dataset=synthloco", f"--config.data.path={synth_file}"]
    args += ["--config.tuples.window=6", "--config.memory.k_per_speaker=4"]
    result = _run(*args, "--config.tuples.only_with_qa=false", "--out", str(out))
    assert result.returncode == 0, result.stderr
    (conv,) = split_conversations(load_locomo(synth_file), (1,), names=("all",))["all"]
    manager, answer = read_tuples(out, "manager"), read_tuples(out, "answer")
    assert f"answer tuples: {len(conv.qa)}" in result.stdout
    assert f"manager tuples: {len(manager)} written" in result.stdout
    assert len(answer) == len(conv.qa) and manager and any(not m.has_qa for m in manager)
    assert all(m.window_start == max(0, m.turn_index - 6) for m in manager)
    build = read_metadata(out)["build"]
    assert (build["split"], build["builder"], build["window"]) == ("all", "observation", 6)
    assert (build["k_per_speaker"], build["only_with_qa"]) == (4, False)
    assert all(len(a.memories) <= 8 for a in answer)


def test_cli_error_exits_2_and_writes_nothing(tmp_path):
    out = tmp_path / "tuples"
    missing = tmp_path / "nope.json"
    args = ["--config=configs/memr1.py:dataset=locomo", f"--config.data.path={missing}"]
    result = _run(*args, "--out", str(out))
    assert result.returncode == 2
    assert "error:" in result.stderr and "nope.json" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_cli_refuses_a_mistyped_setting(synth_file, tmp_path):
    args = ["--config=configs/memr1.py:dataset=synthloco", f"--config.data.path={synth_file}"]
    result = _run(*args, "--config.tuples.windw=6", "--out", str(tmp_path / "tuples"))
    assert result.returncode != 0 and "windw" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("settings", "flags", "message"),
    [
        ({"tuples.builder": "teacher"}, {}, "need a model: --hf_dir"),
        ({}, {"hf_dir": "x"}, "only used by"),
        ({"tuples.window": -3}, {}, "tuples.window=-3"),
        ({"data.split": "train"}, {}, "split 'train' is empty"),
        ({"data.kind": "msc"}, {}, "data.kind='msc'"),
        ({}, {"out": None}, "--out is required"),
    ],
)
def test_cli_bad_settings_are_named(synth_file, tmp_path, capsys, settings, flags, message):
    config = _config(synth_file)
    for key, value in settings.items():
        section, name = key.split(".")
        config[section][name] = value
    out = tmp_path / "tuples"
    code = main(config, **{"out": str(out), **flags})
    assert code == 2 and message in capsys.readouterr().err
    assert not out.exists()


def test_cli_refuses_to_overwrite_without_the_flag(synth_file, tmp_path, capsys):
    out = tmp_path / "tuples"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    code = main(_config(synth_file), out=str(out))
    assert code == 2 and "not a tuples folder" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


@needs_real_locomo
def test_real_locomo_train_split_counts():
    from memr1.embed import Encoder
    from memr1.tuples.build import TupleConfig, build_tuples

    (conv,) = split_conversations(load_locomo(REAL_LOCOMO))["train"]
    assert conv.sample_id == "conv-26"
    encoder = Encoder.from_dir()
    config = memr1_config.get_config("dataset=locomo,backbone=qwen2.5-7b")
    cfg = TupleConfig.from_config(config)  # the full-size settings: 30 memories per speaker
    result = build_tuples([conv], embed=encoder.encode, dim=encoder.dim, cfg=cfg)
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
