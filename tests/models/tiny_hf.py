"""Tiny random HF checkpoints and a tiny tokenizer, built offline for the model tests.

The checkpoints come from transformers' own Qwen2 / LLaMA classes (with torch as the reference),
with every weight randomised, including biases and norm scales, so that a weight loaded into the
wrong slot, transposed, or skipped changes the logits.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SPECIALS = ["<unk>", "<pad>", "<eos>", "<user>", "<assistant>"]
VOCAB = 300  # byte-level BPE: 256 byte symbols, the specials and a few dozen merges
CORPUS = [
    "the cat sat on a mat and the dog ran to a park",
    "we met at noon; she likes tea and cake.",
    "he reads books in spring. what, when, where, who, why? yes no",
] * 3
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<' + m['role'] + '> ' + m['content'] + ' <eos> ' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<assistant>' }}{% endif %}"
)


def make_tokenizer(out_dir: Path, *, eos: bool = True, pad: bool = True, chat: bool = True):
    """Trains a tiny byte-level BPE tokenizer on CORPUS and saves it to `out_dir`.

    Byte-level BPE (the Qwen2 / LLaMA-3 kind) matters: for a qwen2 checkpoint, transformers 5
    rebuilds the tokenizer as Qwen2Tokenizer from tokenizer.json's vocab and merges, which only
    reproduces a byte-level BPE tokenizer.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(CORPUS, trainer)
    assert core.get_vocab_size() == VOCAB, "the corpus no longer yields enough merges"
    kwargs = {"unk_token": "<unk>"}
    if eos:
        kwargs["eos_token"] = "<eos>"
    if pad:
        kwargs["pad_token"] = "<pad>"
    tok = PreTrainedTokenizerFast(tokenizer_object=core, **kwargs)
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(out_dir))
    return tok


def make_hf_model(
    family: str,
    out_dir: Path | None = None,
    *,
    seed: int = 0,
    vocab: int = 61,
    d_model: int = 40,
    layers: int = 2,
    heads: int = 5,
    kv_heads: int = 5,
    head_dim: int = 8,
    d_ff: int = 56,
    tie: bool = False,
    llama3_original_max: int | None = None,
    max_shard_size: str | None = None,
    dtype: str = "float32",
):
    """Builds (and optionally saves) a random transformers model; returns it in eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    shape = dict(
        vocab_size=vocab,
        hidden_size=d_model,
        intermediate_size=d_ff,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        tie_word_embeddings=tie,
        rms_norm_eps=1e-5,
        max_position_embeddings=4096,
        attn_implementation="eager",
        eos_token_id=2,
        pad_token_id=1,
        bos_token_id=None,
    )
    if family == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(rope_theta=1e6, **shape))
    else:
        rope = {"rope_type": "default", "rope_theta": 5e5}
        if llama3_original_max is not None:
            rope = {
                "rope_type": "llama3",
                "rope_theta": 5e5,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": llama3_original_max,
            }
        model = LlamaForCausalLM(LlamaConfig(rope_parameters=rope, **shape))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)  # norm scales away from 1, so a missing one shows
            else:
                p.normal_(0.0, 0.3)
    model = model.eval().to(getattr(torch, dtype))
    if out_dir is not None:
        kw = {"max_shard_size": max_shard_size} if max_shard_size else {}
        model.save_pretrained(str(out_dir), **kw)
    return model


def hf_logits(model, tokens_BT: np.ndarray) -> np.ndarray:
    """Reference logits [B, T, V] (float32) of unpadded rows from the torch model."""
    import torch

    with torch.no_grad():
        return model(torch.as_tensor(tokens_BT)).logits.float().numpy()


def read_config(hf_dir: Path) -> dict:
    return json.loads((hf_dir / "config.json").read_text())


def write_config(hf_dir: Path, config: dict) -> None:
    (hf_dir / "config.json").write_text(json.dumps(config))
