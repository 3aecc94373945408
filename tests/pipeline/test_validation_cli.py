"""Validation as a user runs it: `python -m memr1.train` on synthloco tuples with --val_tuples of
the validation split (GRPO, answer stage) or --val_sft_data (SFT) logs val/... before the first
step and every train.eval_every steps, keeps the best checkpoint, and `memr1.evaluate
--answer_checkpoint DIR:best` loads that step; a bad validation set stops the run before the
first step with a named error and exit 2.

Subprocesses, because `memr1.train.__main__` and `memr1.evaluate` each define the absl flag
`--config` and cannot be imported into one process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

from configs import memr1 as memr1_config
from memr1 import evaluate
from memr1.data.locomo import load_locomo
from memr1.data.split import split_conversations
from memr1.train.checkpoint import Checkpointer, resolve_checkpoint, restore_params
from memr1.train.metrics_log import read_jsonl
from memr1.tuples import write_tuples
from tests.data.test_tuples import build

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
GRPO = "configs/memr1.py:runlocal,algo=grpo,stage=answer"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "memr1.train", *args],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def _tuples(synth_dir: Path, split: str, out: Path) -> Path:
    convs = load_locomo(synth_dir / "data" / f"{split}.json")
    built = build(list(split_conversations(convs, (1,), names=("all",))["all"]))
    return write_tuples(out, built.manager, built.answer, {"split": split})


@pytest.fixture(scope="module")
def tuples(synth_dir, tmp_path_factory):
    """(root, train tuples, validation tuples) of the synthloco fixture's splits."""
    root = tmp_path_factory.mktemp("valcli")
    train = _tuples(synth_dir, "train", root / "train")
    return root, train, _tuples(synth_dir, "validation", root / "val")


@pytest.fixture(scope="module")
def grpo_run(synth_dir, tuples):
    root, train, val = tuples
    workdir = root / "run"
    proc = _cli(
        f"--config={GRPO}", f"--config.tokenizer_dir={synth_dir / 'tokenizer'}",
        f"--tuples={train}", f"--val_tuples={val}", f"--workdir={workdir}",
        "--config.train.steps=4", "--config.train.eval_every=2", "--config.train.keep=1",
        "--config.train.batch_size=2", "--config.train.group_size=2",
        "--config.agents.answer_max_new_tokens=6", "--config.train.checkpoint_every=4",
        "--config.agents.max_prompt_tokens=512",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, workdir, train, val


def test_grpo_validates_at_0_2_4_and_keeps_the_argmax(grpo_run):
    root, workdir, _, val = grpo_run
    records = read_jsonl(workdir / "logs" / "metrics.jsonl")
    validated = [r for r in records if "val/em" in r]
    assert [r["step"] for r in validated] == [0, 2, 4]
    for r in validated:
        assert {"val/f1", "val/no_marker_frac", "val/truncated_frac", "time/val_s"} <= r.keys()
    assert [r["step"] for r in records if "train/loss" in r] == [0, 1, 2, 3]
    values = [r["val/em"] for r in validated]
    best = validated[int(np.argmax(values))]["step"]  # the first of equal values
    ckpt_dir = workdir / "checkpoints"
    with Checkpointer(ckpt_dir) as ckpt:
        assert ckpt.best_record() == {"step": best, "value": max(values), "metric": "val/em"}
        assert ckpt.all_steps() == sorted({best, 4})  # keep=1: the last, and the best
    assert resolve_checkpoint(f"{ckpt_dir}:best") == (str(ckpt_dir), best)


def test_evaluate_loads_the_best_step_of_the_run(grpo_run, synth_dir):
    root, workdir, _, _ = grpo_run
    config = memr1_config.get_config("system=memory_r1,dataset=synthloco,runlocal")
    config.data.path = str(synth_dir / "data" / "test.json")
    config.data.gold_ops = None
    config.data.max_questions = 2
    config.tokenizer_dir = str(synth_dir / "tokenizer")
    config.memory.retriever = "exact_numpy"
    config.agents.update(batch_size=2, answer_max_new_tokens=4, manager_max_new_tokens=8)
    spec = f"{workdir / 'checkpoints'}:best"
    results = evaluate.evaluate(
        config, hf_dir=None, manager_ckpt=None, answer_ckpt=spec, embed_dir=None,
        workdir=str(root / "eval"), overwrite=False,
    )  # fmt: skip
    best = resolve_checkpoint(spec)[1]
    assert results["answer_checkpoint"] == spec
    assert results["checkpoint_steps"] == {"manager": None, "answer": best}
    assert f"(step {best})" in (root / "eval" / "results.md").read_text()
    with pytest.raises(FileNotFoundError, match=r":7: step 7 is not a finalised checkpoint"):
        evaluate.evaluate(
            config, hf_dir=None, manager_ckpt=None, answer_ckpt=f"{workdir / 'checkpoints'}:7",
            embed_dir=None, workdir=str(root / "eval7"), overwrite=False,
        )  # fmt: skip


def test_sft_validates_its_target_loss_and_keeps_the_lowest_which_exports(tmp_path, capsys):
    from memr1.env import load
    from tests.tool import load_tool
    from tests.train.tiny import make_hf_base

    base = make_hf_base(tmp_path / "base")
    rows = [
        {"messages": [{"role": "user", "content": f"what did the cat do {i}?"}], "target": "sat"}
        for i in range(6)
    ]
    data, val = tmp_path / "sft.jsonl", tmp_path / "val.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    val.write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    workdir = tmp_path / "run"
    proc = _cli(
        "--config=configs/memr1.py:runlocal,algo=sft,stage=answer", f"--hf_dir={base}",
        f"--sft_data={data}",
        f"--val_sft_data={val}", f"--workdir={workdir}", "--config.train.steps=3",
        "--config.train.eval_every=2", "--config.train.sft_length=64",
        "--config.train.batch_size=2", "--config.train.checkpoint_every=3",
        "--config.train.lr=0.01",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    validated = [r for r in read_jsonl(workdir / "logs" / "metrics.jsonl") if "val/loss" in r]
    assert [r["step"] for r in validated] == [0, 2, 3]
    losses = [r["val/loss"] for r in validated]
    assert losses[-1] < losses[0]  # lr 0.01 on a repeated target: the loss falls
    with Checkpointer(workdir / "checkpoints") as ckpt:
        best = ckpt.best_record()
    assert best == {
        "step": validated[int(np.argmin(losses))]["step"],
        "value": min(losses),
        "metric": "-val/loss",
    }
    # tools/export_hf.py exports the best step; a step the run did not keep is named.
    tool, ckpt_dir = load_tool("export_hf"), workdir / "checkpoints"
    args = ["--train_checkpoint", f"{ckpt_dir}:best", "--hf_dir", str(base)]
    assert tool.main([*args, "--out", str(tmp_path / "best")]) == 0
    exported = load.load_backbone(hf_dir=str(tmp_path / "best"))
    saved = restore_params(f"{ckpt_dir}:best", exported.params)
    for a, b in zip(jax.tree.leaves(exported.params), jax.tree.leaves(saved), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    capsys.readouterr()
    bad = ["--train_checkpoint", f"{ckpt_dir}:1", "--hf_dir", str(base)]
    assert tool.main([*bad, "--out", str(tmp_path / "one")]) == 1
    assert ":1: step 1 is not a finalised checkpoint" in capsys.readouterr().err


# Runs `train()` with model loading replaced by a tripwire: each bad validation setting must be
# refused, naming the file or field, before the backbone or the train state is built.
CHECKS = textwrap.dedent(
    """
    import json, sys
    import memr1.train.__main__ as cli
    from configs import memr1 as memr1_config
    from memr1.env import load
    from memr1.train import state

    def tripwire(*args, **kwargs):
        raise AssertionError("a model was built before the validation set was checked")

    load.load_backbone = state.create_train_state = tripwire
    out = {}
    for name, arg, changes, kwargs in json.loads(sys.argv[1]):
        config = memr1_config.get_config(arg)
        config.train.update(changes)
        run = {"hf_dir": None, "sft_data": None, "init_checkpoint": None,
               "answer_checkpoint": None, **kwargs}
        try:
            cli.train(config, workdir=f"{sys.argv[2]}/{name}", **run)
            out[name] = "accepted"
        except (ValueError, FileNotFoundError, AssertionError) as err:
            out[name] = f"{type(err).__name__}: {err}"
    print(json.dumps(out))
"""
)


def test_a_bad_validation_set_is_refused_before_any_model_is_built(tuples):
    root, train, val = tuples
    arg = GRPO.split(":", 1)[1]
    broken = root / "broken"
    broken.mkdir()
    (broken / "metadata.json").write_text("{not json")
    empty = write_tuples(root / "empty", [], [], {"split": "validation"})
    on = {"eval_every": 2}
    cases = [
        ("malformed", arg, on, {"tuples": str(train), "val_tuples": str(broken)}),
        ("missing", arg, on, {"tuples": str(train), "val_tuples": str(root / "nope")}),
        ("train_split", arg, on, {"tuples": str(train), "val_tuples": str(train)}),
        ("train_built", arg, on, {"tuples": str(val), "val_tuples": str(train)}),
        ("empty", arg, on, {"tuples": str(train), "val_tuples": str(empty)}),
        ("no_set", arg, on, {"tuples": str(train)}),
        ("ignored", arg, {}, {"tuples": str(train), "val_tuples": str(val)}),
        ("bad_best", arg, {**on, "keep_best": "em"},
         {"tuples": str(train), "val_tuples": str(val)}),
        ("sft_kind", "runlocal,algo=sft", on,
         {"tuples": None, "sft_data": "x.jsonl", "val_tuples": str(val)}),
    ]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", CHECKS, json.dumps(cases), str(root / "checks")],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["malformed"].startswith("DataError:") and "metadata.json" in got["malformed"]
    assert got["missing"].startswith("DataError:") and "nope" in got["missing"]
    assert "are the training tuples" in got["train_split"]
    assert "built from the train split" in got["train_built"]
    assert "no answer tuples to validate on" in got["empty"]
    assert "train.eval_every=2 needs a validation set: give --val_tuples" in got["no_set"]
    assert "--val_tuples given but config train.eval_every=0" in got["ignored"]
    assert "train.keep_best='em'" in got["bad_best"]
    assert "--val_tuples is not read by algo=sft; give --val_sft_data" in got["sft_kind"]
    assert not (root / "checks").exists()  # nothing written: no checkpoint, no log


def test_the_command_exits_2_naming_a_malformed_validation_set(tuples, synth_dir):
    root, train, _ = tuples
    proc = _cli(
        f"--config={GRPO}", f"--config.tokenizer_dir={synth_dir / 'tokenizer'}",
        f"--tuples={train}", f"--val_tuples={root / 'nope'}", "--config.train.eval_every=2",
        f"--workdir={root / 'bad'}",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("memr1.train: error:") and "nope" in message, message
    assert not (root / "bad").exists()
