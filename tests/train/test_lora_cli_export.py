"""End to end: `python -m memr1.train` SFT with LoRA on a tiny HF backbone, then
`tools/export_hf.py --train_checkpoint` turns its checkpoint into an HF directory that loads with
the adapted model's logits."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

from memr1.env import load
from memr1.models import transformer
from memr1.train import lora
from memr1.train.checkpoint import Checkpointer
from memr1.train.metrics_log import read_jsonl
from tests.tool import load_tool
from tests.train import tiny
from tests.train.test_lora import _logits

# One test of ~20 CPU s (a train command and the export): queued early (tests/conftest.py).
pytestmark = pytest.mark.queue_early

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
LORA = lora.LoraConfig.from_config(tiny.config(lora_rank=4, lora_alpha=8.0))


def _train(tmp_path: Path, base: Path) -> Path:
    rows = [
        {"messages": [{"role": "user", "content": f"what did the cat do {i}?"}], "target": "sat"}
        for i in range(6)
    ]
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    workdir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable, "-m", "memr1.train",
            "--config=configs/memr1.py:runlocal,algo=sft,stage=answer", f"--hf_dir={base}",
            f"--sft_data={data}", f"--workdir={workdir}", "--config.train.steps=3",
            "--config.train.sft_length=64", "--config.train.batch_size=2",
            "--config.train.checkpoint_every=3", "--config.train.lr=0.01",
            f"--config.train.lora_rank={LORA.rank}", f"--config.train.lora_alpha={LORA.alpha}",
        ],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return workdir


def test_lora_sft_cli_then_export_loads_with_the_checkpoints_logits(tmp_path, capsys):
    base = tiny.make_hf_base(tmp_path / "base")
    workdir = _train(tmp_path, base)
    ckpt_dir = workdir / "checkpoints"

    # The run saved the adapters with their settings, and logged its step timing.
    with Checkpointer(ckpt_dir) as ckpt:
        assert ckpt.all_steps() == [3]
        assert ckpt.step_metadata(3) == {"lora": LORA.as_metadata()}
        saved = ckpt.param_metadata(3)
        module_fn = lora.module_fn(tiny.HF_CFG.replace(remat=True), LORA)
        graphdef, abstract = nnx.split(nnx.eval_shape(module_fn))
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        target = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), abstract
        )
        adapted = ckpt.restore_params(target)
    assert ("layers", "0", "attn", "wq_lora_a") in saved
    records = read_jsonl(workdir / "logs" / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2]
    for r in records:
        assert math.isfinite(r["time/step_s"]) and r["time/step_s"] > 0, r
        assert math.isfinite(r["perf/tokens_per_s"]) and r["perf/tokens_per_s"] > 0, r

    tool = load_tool("export_hf")
    out = tmp_path / "exported"
    args = ["--train_checkpoint", str(ckpt_dir), "--out", str(out)]
    assert tool.main(args) == 1 and "needs --hf_dir" in capsys.readouterr().err
    assert not out.exists()
    assert tool.main([*args, "--hf_dir", str(base)]) == 0

    exported = load.load_backbone(hf_dir=str(out))
    batch = tiny.sft_batch(0)
    want = np.asarray(_logits(graphdef, adapted, batch))
    got = np.asarray(_logits(exported.graphdef, exported.params, batch))
    np.testing.assert_allclose(got, want, atol=2e-5)
    original = load.load_backbone(hf_dir=str(base))
    assert (
        np.abs(np.asarray(_logits(original.graphdef, original.params, batch)) - want).max() > 1e-4
    )
    assert exported.tokenizer.get_vocab() == original.tokenizer.get_vocab()
    assert transformer.count_params(exported.params) == transformer.count_params(original.params)

    # An existing output is refused without --overwrite (and left as it was), replaced with it;
    # no temporary directory is left behind either way.
    before = (out / "model.safetensors").stat().st_mtime_ns
    assert tool.main([*args, "--hf_dir", str(base)]) == 1
    assert "not empty" in capsys.readouterr().err
    assert (out / "model.safetensors").stat().st_mtime_ns == before
    assert tool.main([*args, "--hf_dir", str(base), "--overwrite"]) == 0
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
