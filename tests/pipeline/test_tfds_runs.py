"""Evaluation and training read a built TFDS dataset (`tfds:DATA_DIR`) and do exactly what they do
on the files it was built from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from configs import memr1 as memr1_config
from memr1 import evaluate
from memr1.data.tfds.__main__ import main as build_dataset
from memr1.train.metrics_log import is_wall_clock, read_jsonl
from memr1.tuples import write_tuples
from memr1.tuples.to_tfds import main as build_tuples_dataset
from tests.data.test_tuples import build, synth_conversations

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _evaluate(synth_dir, path, workdir):
    config = memr1_config.get_config("system=locomo_rag,dataset=synthloco,runlocal")
    config.data.path = str(path)
    config.data.max_questions = 4
    config.tokenizer_dir = str(synth_dir / "tokenizer")
    config.memory.retriever = "exact_numpy"
    config.agents.batch_size = 4
    config.agents.answer_max_new_tokens = 8
    evaluate.evaluate(config, hf_dir=None, manager_ckpt=None, answer_ckpt=None, embed_dir=None,
                      workdir=str(workdir), overwrite=False)  # fmt: skip
    return [json.loads(line) for line in (workdir / "predictions.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_evaluation_from_the_built_dataset_predicts_what_it_does_from_the_file(synth_dir, tmp_path):
    source = synth_dir / "data" / "test.json"
    data_dir = tmp_path / "tfds"
    argv = ["--dataset=synthloco", f"--source={source}", f"--data_dir={data_dir}"]
    assert build_dataset(argv) == 0
    direct = _evaluate(synth_dir, source, tmp_path / "file")
    assert len(direct) == 4
    assert _evaluate(synth_dir, f"tfds:{data_dir}", tmp_path / "tfds_run") == direct


def _train(synth_dir, tuples: str, workdir: Path) -> list[dict]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "memr1.train",
         "--config=configs/memr1.py:runlocal,algo=grpo,stage=answer",
         f"--config.tokenizer_dir={synth_dir / 'tokenizer'}", f"--tuples={tuples}",
         f"--workdir={workdir}", "--config.train.steps=2", "--config.train.batch_size=2",
         "--config.train.group_size=2", "--config.agents.answer_max_new_tokens=6",
         "--config.train.checkpoint_every=2", "--config.agents.max_prompt_tokens=512"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_jsonl(workdir / "logs" / "metrics.jsonl")
    return [{k: v for k, v in r.items() if not is_wall_clock(k)} for r in records]


@pytest.mark.slow
def test_two_training_steps_from_the_built_tuples_match_the_folder_run(synth_dir, tmp_path):
    built = build(synth_conversations(synth_dir / "data"))
    folder = write_tuples(tmp_path / "tuples", built.manager, built.answer, {"split": "train"})
    argv = [f"--source={folder}", f"--data_dir={tmp_path / 'tfds'}", "--kind=answer"]
    assert build_tuples_dataset(argv) == 0
    from_folder = _train(synth_dir, str(folder), tmp_path / "run_folder")
    assert [r["step"] for r in from_folder] == [0, 1]
    # The same rows at the same positions: the same rollouts, rewards and updates.
    assert _train(synth_dir, f"tfds:{tmp_path / 'tfds'}", tmp_path / "run_tfds") == from_folder
