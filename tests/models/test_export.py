"""`export_hf` writes checkpoints that transformers loads with the same logits, and that
`load_hf` reads back bit for bit; the write is atomic and refuses to clobber by default."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from memr1.models import transformer
from memr1.models.config import ModelConfig, RopeScaling, get_size
from memr1.models.hf_export import export_hf
from memr1.models.hf_io import INDEX_FILE, SINGLE_FILE, load_hf
from memr1.models.masks import causal_mask, positions_from_valid
from tests.tool import load_tool

from .tiny_hf import hf_logits, make_tokenizer

ROOT = Path(__file__).resolve().parents[2]

QWEN = get_size(
    "tiny",
    vocab_size=53,
    d_model=36,
    n_layers=2,
    head_dim=10,
    d_ff=44,
    rope_theta=1000000.0,
    tie_embeddings=False,
    max_position=512,
)
LLAMA = QWEN.replace(
    family="llama",
    n_heads=3,
    n_kv_heads=3,
    qkv_bias=False,
    tie_embeddings=True,
    rms_eps=1e-5,
    rope_theta=5e5,
    rope_scaling=RopeScaling(original_max_position_embeddings=24),
)


def _random_params(cfg: ModelConfig, seed: int = 0) -> tuple[nnx.GraphDef, nnx.State]:
    """A model with every weight random, biases and norm scales included (init gives 0 and 1).

    Filled from numpy on the host: jax.random would compile one small program per shape.
    """
    graphdef, abstract = transformer.abstract_model(cfg)
    rng = np.random.default_rng(seed)
    params = jax.tree.map(
        lambda x: jnp.asarray(0.2 * rng.standard_normal(x.shape), x.dtype), abstract
    )
    return graphdef, params


def _assert_same_params(a: nnx.State, b: nnx.State) -> None:
    flat_a, flat_b = dict(nnx.to_flat_state(a)), dict(nnx.to_flat_state(b))
    assert flat_a.keys() == flat_b.keys()
    for path in flat_a:
        x, y = np.asarray(flat_a[path].get_value()), np.asarray(flat_b[path].get_value())
        assert x.dtype == y.dtype and np.array_equal(x, y), f"{path} changed in the round trip"


@pytest.mark.parametrize("cfg", [QWEN, LLAMA], ids=["qwen2-untied", "llama-tied-llama3rope"])
def test_transformers_loads_export_with_same_logits(tmp_path, cfg):
    from transformers import AutoModelForCausalLM

    graphdef, params = _random_params(cfg)
    out = export_hf(cfg, params, tmp_path / "hf")
    model = AutoModelForCausalLM.from_pretrained(str(out), attn_implementation="eager").eval()
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(2, 48))
    valid = jnp.ones(tokens.shape, bool)
    h, _ = transformer.forward(
        graphdef, params, jnp.asarray(tokens), positions_from_valid(valid), causal_mask(valid)
    )
    ours = np.asarray(transformer.logits_fn(graphdef, params, h))
    ref = hf_logits(model, tokens)
    assert np.abs(ours - ref).max() <= 1e-4 * np.abs(ref).max()

    cfg_back, _, params_back = load_hf(out)
    assert cfg_back == cfg
    _assert_same_params(params, params_back)


def test_sharded_export_round_trip_and_bf16(tmp_path):
    _, params = _random_params(QWEN, seed=1)
    out = export_hf(QWEN, params, tmp_path / "hf", dtype="bfloat16", max_shard_bytes=20_000)
    index = json.loads((out / INDEX_FILE).read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and not (out / SINGLE_FILE).exists()
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    cfg_back, _, params_back = load_hf(out)  # param dtype defaults to the stored bfloat16
    assert cfg_back.param_dtype == "bfloat16"
    _assert_same_params(jax.tree.map(lambda x: x.astype(jnp.bfloat16), params), params_back)


def test_tokenizer_files_copied(tmp_path):
    make_tokenizer(tmp_path / "tok")
    (tmp_path / "tok" / "generation_config.json").write_text(json.dumps({"eos_token_id": 2}))
    _, params = _random_params(QWEN)
    out = export_hf(QWEN, params, tmp_path / "hf", tokenizer_dir=tmp_path / "tok")
    assert (out / "tokenizer.json").is_file() and (out / "tokenizer_config.json").is_file()
    assert json.loads((out / "config.json").read_text())["eos_token_id"] == 2


def test_refuses_to_overwrite_and_replaces_when_asked(tmp_path):
    _, params = _random_params(QWEN)
    out = tmp_path / "hf"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="not empty"):
        export_hf(QWEN, params, out)
    assert (out / "keep.txt").read_text() == "precious"
    export_hf(QWEN, params, out, overwrite=True)
    assert not (out / "keep.txt").exists() and (out / SINGLE_FILE).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"], "temporary dirs left behind"


def test_failed_export_leaves_nothing(tmp_path):
    _, params = _random_params(QWEN)
    # An untied config whose params lack the LM head fails midway through the weights.
    with pytest.raises(ValueError, match="lm_head"):
        export_hf(QWEN, _drop(params, ("lm_head",)), tmp_path / "x")
    assert list(tmp_path.iterdir()) == [], "a failed export must leave no files"


def test_config_without_hf_equivalent_is_refused(tmp_path):
    _, params = _random_params(QWEN)
    with pytest.raises(ValueError, match="no HF equivalent"):
        export_hf(QWEN.replace(qkv_bias=False), params, tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


def _drop(params: nnx.State, path: tuple) -> nnx.State:
    return nnx.from_flat_state([(p, v) for p, v in nnx.to_flat_state(params) if p != path])


def test_export_tool_from_orbax_and_hf(tmp_path, capsys):
    tool = load_tool("export_hf")
    tiny = get_size("tiny")
    _, params = _random_params(tiny)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save((tmp_path / "orbax").resolve(), nnx.to_pure_dict(params))
    checkpointer.wait_until_finished()
    src = ["--src", str(tmp_path / "orbax")]

    # Without --backbone the shapes are unknown: a clear error, and nothing written.
    assert tool.main([*src, "--out", str(tmp_path / "a")]) == 1
    assert "needs --backbone" in capsys.readouterr().err and not (tmp_path / "a").exists()

    make_tokenizer(tmp_path / "tok")
    tok = ["--tokenizer_dir", str(tmp_path / "tok")]
    assert tool.main([*src, "--out", str(tmp_path / "a"), "--backbone", "tiny", *tok]) == 0
    _assert_same_params(params, load_hf(tmp_path / "a")[2])

    # An HF source is re-exported with its tokenizer, here as bfloat16.
    args = ["--src", str(tmp_path / "a"), "--out", str(tmp_path / "b"), "--dtype", "bfloat16"]
    assert tool.main(args) == 0
    assert (tmp_path / "b" / "tokenizer.json").is_file()
    assert load_hf(tmp_path / "b")[0].param_dtype == "bfloat16"
    assert tool.main(args) == 1, "an existing output needs --overwrite"
    assert "not empty" in capsys.readouterr().err

    assert tool.main(["--src", str(tmp_path / "nope"), "--out", str(tmp_path / "c")]) == 1
    assert "nope: source directory not found" in capsys.readouterr().err
