"""The train command line under bad settings and a poisoned step, run as a user runs it.

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

import pytest

from memr1.models.tokenizer_train import train_bpe_tokenizer
from memr1.train.metrics_log import read_jsonl
from tests.fake_devices import xla_flags

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
SFT = "configs/memr1.py:runlocal,algo=sft,stage=answer"


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "memr1.train", *args],
        cwd=ROOT, env=env or ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_a_mistyped_override_fails_loudly_and_writes_nothing(tmp_path):
    proc = _cli(f"--config={SFT}", "--config.train.stpes=3", f"--workdir={tmp_path / 'run'}")
    assert proc.returncode != 0
    assert "stpes" in proc.stderr and 'Did you mean "steps"' in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "run").exists()


def test_bfloat16_master_weights_are_refused_with_exit_2_before_loading(tmp_path):
    proc = _cli(
        f"--config={SFT}", "--config.model.param_dtype=bfloat16", f"--workdir={tmp_path / 'run'}"
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("memr1.train: error: config model.param_dtype='bfloat16'"), message
    assert "float32 master weights" in message
    assert not (tmp_path / "run").exists()


# Runs `train()` with model loading replaced by a tripwire: each bad setting must be refused,
# naming the field, before the backbone or the train state is built.
CHECKS = textwrap.dedent(
    """
    import json, sys
    import memr1.train.__main__ as cli
    from configs import memr1 as memr1_config
    from memr1.env import load
    from memr1.train import state

    def tripwire(*args, **kwargs):
        raise AssertionError("a model was built before the settings were checked")

    load.load_backbone = state.create_train_state = tripwire
    out = {}
    for name, arg, changes, kwargs in json.loads(sys.argv[1]):
        config = memr1_config.get_config(arg)
        for dotted, value in changes.items():
            section, key = dotted.split(".")
            config[section][key] = value
        run = {"hf_dir": None, "tuples": None, "sft_data": "unused.jsonl",
               "init_checkpoint": None, "answer_checkpoint": None, **kwargs}
        run["inject_nonfinite"] = tuple(map(tuple, run.get("inject_nonfinite", ())))
        try:
            cli.train(config, workdir=f"{sys.argv[2]}/{name}", **run)
            out[name] = "accepted"
        except (ValueError, AssertionError) as err:
            out[name] = f"{type(err).__name__}: {err}"
    out["parse"] = cli.parse_faults("3, 7:grads")
    try:
        cli.parse_faults("x:loss")
    except ValueError as err:
        out["parse_error"] = str(err)
    print(json.dumps(out))
    """
)
MANAGER = "runlocal,algo=grpo,stage=manager"
# (name, config arg, overrides, train() keyword arguments, what the error must say)
CASES = [
    ("tensor3", "runlocal,algo=sft", {"mesh.tensor": 3}, {}, "tensor=3 does not divide n_kv_heads"),
    ("data2", "runlocal,algo=sft", {"mesh.data": 2}, {}, "needs 2 devices but 3 are available"),
    ("every0", "runlocal,algo=sft", {"train.checkpoint_every": 0}, {}, "train.checkpoint_every=0"),
    ("steps0", "runlocal,algo=sft", {"train.steps": 0}, {}, "train.steps=0"),
    ("keep0", "runlocal,algo=sft", {"train.keep": 0}, {}, "train.keep=0"),
    ("policy", "runlocal,algo=sft", {"train.on_nonfinite": "ignore"}, {}, "train.on_nonfinite"),
    ("fault", "runlocal,algo=sft", {}, {"inject_nonfinite": [[1, "weights"]]}, "inject_nonfinite"),
    ("no_data", "runlocal,algo=sft", {}, {"sft_data": None}, "needs --sft_data"),
    ("cap0", MANAGER, {"memory.capacity": 0}, {"tuples": "t"}, "memory.capacity=0"),
    ("cap_neg", MANAGER, {"memory.capacity": -4}, {"tuples": "t"}, "memory.capacity=-4"),
    ("text0", MANAGER, {"memory.text_bytes": 0}, {"tuples": "t"}, "memory.text_bytes=0"),
    ("retriever", MANAGER, {"memory.retriever": "faiss"}, {"tuples": "t"}, "memory.retriever"),
    ("micro0", "runlocal,algo=sft", {"train.n_micro": 0}, {}, "train.n_micro=0"),
    ("drop_ppo", "runlocal,algo=ppo,stage=answer", {"train.drop_zero_signal": True},
     {"tuples": "t"}, "drop_zero_signal=True is a GRPO option"),
    ("over_ppo", "runlocal,algo=ppo,stage=answer", {"train.oversample": 2},
     {"tuples": "t"}, "train.oversample=2 is a GRPO option"),
    ("over0", "runlocal,algo=sft", {"train.oversample": 0}, {}, "train.oversample=0"),
    ("classes_ppo", "runlocal,algo=ppo,stage=answer", {"train.width_classes": 2},
     {"tuples": "t"}, "train.width_classes=2 is a GRPO option"),
    ("classes_rows", "runlocal,algo=grpo,stage=answer",
     {"train.width_classes": 2, "train.shared_prompt": False},
     {"tuples": "t"}, "width_classes=2 (train.width_classes)"),
    ("group_grpo", "runlocal,algo=grpo,stage=answer", {"train.sft_group_by_length": 4},
     {"tuples": "t"}, "train.sft_group_by_length=4 is for SFT, not grpo"),
    ("buckets0", "runlocal,algo=sft", {"train.sft_buckets": 0}, {}, "train.sft_buckets=0"),
    ("bf16", "runlocal,algo=grpo,stage=answer", {"model.param_dtype": "bfloat16"},
     {"tuples": "t"}, "model.param_dtype='bfloat16'"),
]  # fmt: skip


def test_impossible_settings_are_refused_before_any_model_is_built(tmp_path):
    cases = [case[:4] for case in CASES]
    env = {**ENV, "XLA_FLAGS": xla_flags(3)}
    proc = subprocess.run(
        [sys.executable, "-c", CHECKS, json.dumps(cases), str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, *_, expected in CASES:
        assert out[name].startswith("ValueError") and expected in out[name], (name, out[name])
    assert out["parse"] == [[3, "loss"], [7, "grads"]]
    assert "x:loss" in out["parse_error"]
    assert list(tmp_path.iterdir()) == [], "a work directory was created for a refused run"


def test_stop_on_a_poisoned_step_exits_3_naming_the_step_and_the_kept_checkpoint(tmp_path):
    chat = lambda i: [{"role": "user", "content": f"Where is item {i}?"}]
    rows = [{"messages": chat(i), "target": f"shelf {i}"} for i in range(8)]
    train_bpe_tokenizer(
        [r["messages"][0]["content"] for r in rows], tmp_path / "tok", vocab_size=280
    )
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    workdir = tmp_path / "run"
    proc = _cli(
        f"--config={SFT}", f"--config.tokenizer_dir={tmp_path / 'tok'}", f"--sft_data={data}",
        f"--workdir={workdir}", "--config.train.steps=3", "--config.train.sft_length=32",
        "--config.train.batch_size=2", "--config.train.checkpoint_every=1",
        "--config.train.on_nonfinite=stop", "--inject_nonfinite=1:grads",
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-3000:]
    message = proc.stderr.strip().splitlines()[-1]
    assert "stopped: step 1: non-finite" in message and "the last checkpoint is step 1" in message
    assert [p.name for p in (workdir / "checkpoints").iterdir()] == ["1"]
    records = read_jsonl(workdir / "logs" / "metrics.jsonl")
    assert [(r["step"], r["train/update_refused"]) for r in records] == [(0, 0), (1, 1)]
