"""The evaluation CLI end to end on a generated synthloco fixture with a tiny random backbone."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from configs import memr1 as memr1_config
from memr1 import evaluate
from memr1.data.locomo import load_locomo
from tests.train import tiny

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _config(synth_dir, system):
    config = memr1_config.get_config(f"system={system},runlocal")
    config.data.path = str(synth_dir / "data" / "test.json")
    config.data.gold_ops = str(synth_dir / "data" / "gold_ops.json")
    config.data.max_questions = 6
    config.tokenizer_dir = str(synth_dir / "tokenizer")
    config.memory.retriever = "exact_numpy"
    config.agents.batch_size = 4
    config.agents.manager_max_new_tokens = 12
    config.agents.answer_max_new_tokens = 8
    return config


@pytest.mark.parametrize("system", ["locomo_rag", "mem0"])
def test_systems_write_every_output(synth_dir, tmp_path, system):
    workdir = tmp_path / system
    results = evaluate.evaluate(
        _config(synth_dir, system),
        hf_dir=None,
        manager_ckpt=None,
        answer_ckpt=None,
        embed_dir=None,
        workdir=str(workdir),
        overwrite=False,
    )
    names = {p.name for p in workdir.iterdir()}
    assert {
        "results.json",
        "results.md",
        "predictions.jsonl",
        "manager_turns.jsonl",
        "banks",
    } <= names
    on_disk = json.loads((workdir / "results.json").read_text())
    assert on_disk["system"] == system and on_disk["num_questions"] == 6
    overall = results["scores"]["overall"]["scores"]
    assert all(0.0 <= overall[m] <= 1.0 for m in ("f1", "bleu1", "em", "locomo"))
    assert overall["j"] is None  # no judge configured
    preds = [json.loads(line) for line in (workdir / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 6 and all("retrieved" in p and "gold" in p for p in preds)
    ops = on_disk["operations"]
    assert ops["op_accuracy"]["scored"] > 0
    banks = json.loads((workdir / "banks" / "synth-test-000.json").read_text())
    if system == "locomo_rag":
        # Raw turns are the memories: one per turn, no manager, nothing invalid.
        (conv,) = load_locomo(synth_dir / "data" / "test.json")
        assert len(banks["memories"]) == conv.num_turns
        assert ops["invalid_ops"] == {}
        assert all(": " in m["text"] for m in banks["memories"])
        _check_inspector(workdir, banks["memories"][3])
    else:
        # A random manager writes garbage: every output is rejected and counted, none crashes.
        assert sum(ops["invalid_ops"].values()) > 0
    with pytest.raises(FileExistsError):
        evaluate.evaluate(
            _config(synth_dir, system),
            hf_dir=None,
            manager_ckpt=None,
            answer_ckpt=None,
            embed_dir=None,
            workdir=str(workdir),
            overwrite=False,
        )


def test_cli_bad_input_exits_2_and_writes_nothing(synth_dir, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"sample_id": "x", "conversation": ')
    workdir = tmp_path / "out"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "memr1.evaluate",
            "--config",
            "configs/memr1.py:system=mem0,runlocal",
            f"--config.data.path={bad}",
            f"--config.tokenizer_dir={synth_dir / 'tokenizer'}",
            f"--workdir={workdir}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert str(bad) in proc.stderr
    assert not workdir.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.json"]  # no temporary left


def _check_inspector(workdir, memory):
    """tools/inspect_bank.py reads the saved bank back and shows a memory and its history."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import inspect_bank
    finally:
        sys.path.pop(0)
    out = io.StringIO()
    inspect_bank.show_bank(workdir, "synth-test-000", None, out=out)
    assert memory["text"] in out.getvalue()
    out = io.StringIO()
    inspect_bank.show_bank(workdir, "synth-test-000", memory["id"], out=out)
    assert "ADD" in out.getvalue() and memory["text"] in out.getvalue()
    assert inspect_bank.main([str(workdir), "--conversation", "nope"]) == 2


def test_memory_r1_loads_each_agent_from_its_own_checkpoint(synth_dir, tmp_path):
    """memory_r1 / memory_sft take the manager and the answerer from two training checkpoints."""
    import jax
    import numpy as np

    from memr1.env import load
    from memr1.train import mesh, state
    from memr1.train.checkpoint import Checkpointer, restore_params

    config = _config(synth_dir, "memory_r1")
    backbone = load.load_backbone(
        hf_dir=None, size="tiny", tokenizer_dir=config.tokenizer_dir, seed=config.seed
    )
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[backbone.cfg])
    saved = {}
    for name, seed in (("manager", 11), ("answer", 12)):
        _, st = state.create_train_state(m, backbone.cfg, tiny.optim(), seed=seed)
        with Checkpointer(tmp_path / name) as ckpt:
            ckpt.save(1, st, {"next_step": 1})
        saved[name] = st.params
    restored = restore_params(tmp_path / "manager", backbone.params)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(saved["manager"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    results = evaluate.evaluate(
        config,
        hf_dir=None,
        manager_ckpt=str(tmp_path / "manager"),
        answer_ckpt=str(tmp_path / "answer"),
        embed_dir=None,
        workdir=str(tmp_path / "run"),
        overwrite=False,
    )
    assert results["manager_checkpoint"] == str(tmp_path / "manager")
    assert results["answer_checkpoint"] == str(tmp_path / "answer")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        restore_params(tmp_path / "missing", backbone.params)
    assert not (tmp_path / "missing").exists()  # restoring never creates a directory


def test_longmemeval_is_judged_with_its_own_prompts(synth_dir, tmp_path, monkeypatch):
    from memr1.eval.judge_backends import CallableBackend
    from memr1.eval.longmemeval_judge import build_longmemeval_prompt, is_abstention
    from tests.data_fixtures import write_longmemeval_fixture

    path = write_longmemeval_fixture(tmp_path / "lme.json", num_instances=4)
    config = _config(synth_dir, "locomo_rag")
    config.data.kind = "longmemeval"
    config.data.path = str(path)
    config.data.split = "all"
    config.data.gold_ops = None
    config.data.max_questions = -1
    prompts = []

    def scripted(batch):
        prompts.extend(batch)
        return ["yes" if len(prompts) - len(batch) + i == 0 else "no" for i in range(len(batch))]

    monkeypatch.setattr(evaluate, "judge_backend", lambda cfg, bb: CallableBackend(scripted))
    results = evaluate.evaluate(
        config,
        hf_dir=None,
        manager_ckpt=None,
        answer_ckpt=None,
        embed_dir=None,
        workdir=str(tmp_path / "out"),
        overwrite=False,
    )
    preds = [
        json.loads(x) for x in (tmp_path / "out" / "predictions.jsonl").read_text().split("\n") if x
    ]
    assert len(prompts) == len(preds) == 4
    qa = [q for c in evaluate.setup.load_conversations(config.data) for q in c.qa]
    for prompt, p, q in zip(prompts, preds, qa):
        abstain = is_abstention(q.question_id)
        want = build_longmemeval_prompt(
            q.question_type, p["question"], p["gold"], p["answer"], abstain
        )
        assert prompt == want
    assert [p["j"] for p in preds] == [1.0, 0.0, 0.0, 0.0]
    summary = results["longmemeval_judge"]
    assert summary["count"] == 4 and summary["overall_accuracy"] == 0.25
    assert (
        json.loads((tmp_path / "out" / "results.json").read_text())["longmemeval_judge"] == summary
    )
