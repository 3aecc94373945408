"""A loaded backbone runs the attention kernel the config names, random or from a checkpoint."""

from __future__ import annotations

from flax import nnx

from memr1.env import load
from tests.models.tiny_hf import VOCAB, make_hf_model, make_tokenizer


def _kernel(backbone: load.Backbone) -> str:
    """The attention setting the backbone's graph runs with (what samplers and updates trace)."""
    return nnx.merge(backbone.graphdef, backbone.params).cfg.attention


def test_random_and_checkpoint_backbones_carry_the_attention_kernel(synth_dir, tmp_path):
    tokenizer_dir = str(synth_dir / "tokenizer")
    default = load.load_backbone(hf_dir=None, size="tiny", tokenizer_dir=tokenizer_dir)
    assert default.cfg.attention == _kernel(default) == "auto"
    einsum = load.load_backbone(
        hf_dir=None, size="tiny", tokenizer_dir=tokenizer_dir, attention="einsum"
    )
    assert einsum.cfg.attention == _kernel(einsum) == "einsum"

    make_tokenizer(tmp_path)
    make_hf_model("qwen2", tmp_path, vocab=VOCAB, d_model=48, heads=6, kv_heads=2)
    chunked = load.load_backbone(hf_dir=str(tmp_path), attention="chunked")
    assert chunked.cfg.attention == _kernel(chunked) == "chunked"
    assert chunked.cfg.n_kv_heads == 2  # the checkpoint's shapes, not a default size
