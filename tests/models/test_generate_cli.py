"""`python -m memr1.generate` reproduces transformers' greedy `generate` token for token."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memr1 import generate

from .tiny_hf import VOCAB, make_hf_model, make_tokenizer, read_config, write_config

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "the cat sat on a mat, and the dog ran!"


def _checkpoint(path: Path, family: str, layers: int = 2):
    """A tiny checkpoint with the test tokenizer; one layer where only the CLI is under test."""
    tok = make_tokenizer(path)
    extra = {"llama3_original_max": 8} if family == "llama" else {}
    model = make_hf_model(
        family, path, vocab=VOCAB, d_model=48, layers=layers, heads=6, kv_heads=2, **extra
    )
    return model, tok


def _cli(capsys, *argv: str) -> dict:
    assert generate.main([*argv, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _hf_greedy(model, tok, prompt_ids: list[int], n: int) -> list[int]:
    import torch

    ids = torch.tensor([prompt_ids])
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=n,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    return out[0, len(prompt_ids) :].tolist()


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_greedy_matches_transformers(tmp_path, capsys, family):
    model, tok = _checkpoint(tmp_path, family)
    n = 20
    raw = _cli(capsys, "--hf_dir", str(tmp_path), "--prompt", PROMPT, "--max_new_tokens", str(n))
    assert raw["prompt_ids"] == tok.encode(PROMPT)
    assert raw["ids"] == _hf_greedy(model, tok, raw["prompt_ids"], n)
    assert raw["text"] == tok.decode(raw["ids"], skip_special_tokens=True)

    chat = _cli(
        capsys, "--hf_dir", str(tmp_path), "--prompt", PROMPT, "--max_new_tokens", "8", "--chat"
    )
    assert chat["prompt_ids"][0] == tok.convert_tokens_to_ids("<user>")
    assert chat["prompt_ids"][-1] == tok.convert_tokens_to_ids("<assistant>")
    assert chat["ids"] == _hf_greedy(model, tok, chat["prompt_ids"], 8)


def test_stops_at_eos_from_generation_config(tmp_path, capsys):
    _checkpoint(tmp_path, "qwen2", layers=1)
    base = ["--hf_dir", str(tmp_path), "--prompt", PROMPT, "--max_new_tokens", "12"]
    first = _cli(capsys, *base)
    assert not first["stopped"] and len(first["ids"]) == 12
    # Declaring the third generated token an eos id must end the row at its first occurrence.
    stop_id = first["ids"][2]
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": stop_id}))
    stopped = _cli(capsys, *base)
    assert stopped["stopped"]
    assert stopped["ids"] == first["ids"][: first["ids"].index(stop_id) + 1]


def test_sampling_is_seeded(tmp_path, capsys):
    _checkpoint(tmp_path, "qwen2", layers=1)
    base = ["--hf_dir", str(tmp_path), "--prompt", PROMPT, "--max_new_tokens", "10"]
    sample = ["--temperature", "1.5", "--top_k", "20", "--top_p", "0.95"]
    a = _cli(capsys, *base, *sample, "--seed", "3")
    b = _cli(capsys, *base, *sample, "--seed", "3")
    c = _cli(capsys, *base, *sample, "--seed", "4")
    assert a["ids"] == b["ids"] and len(a["ids"]) >= 1
    assert a["ids"] != c["ids"] or len(a["ids"]) < 10  # a stop may end both rows identically


def test_bad_inputs_exit_nonzero_naming_the_file(tmp_path, capsys):
    _checkpoint(tmp_path / "ok", "qwen2", layers=1)
    base = ["--prompt", PROMPT, "--max_new_tokens", "2"]
    assert generate.main(["--hf_dir", str(tmp_path / "missing"), *base]) == 1
    assert "missing: checkpoint directory not found" in capsys.readouterr().err

    config = read_config(tmp_path / "ok")
    config["architectures"] = ["GPT2LMHeadModel"]
    write_config(tmp_path / "ok", config)
    assert generate.main(["--hf_dir", str(tmp_path / "ok"), *base]) == 1
    assert "config.json: key 'architectures'" in capsys.readouterr().err

    config["architectures"] = ["Qwen2ForCausalLM"]
    write_config(tmp_path / "ok", config)
    (tmp_path / "ok" / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00garbage!")
    assert generate.main(["--hf_dir", str(tmp_path / "ok"), *base]) == 1
    assert "model.safetensors: unreadable safetensors file" in capsys.readouterr().err


def test_module_entry_point_exit_status(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "memr1.generate", "--hf_dir", str(tmp_path / "x"), "--prompt", "hi"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert f"{tmp_path / 'x'}: checkpoint directory not found" in proc.stderr
