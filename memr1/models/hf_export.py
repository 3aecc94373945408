"""Writes a memr1 model as a Hugging Face checkpoint directory that transformers can load.

The directory gets config.json (Qwen2ForCausalLM or LlamaForCausalLM), the weights as
safetensors (split into ~4 GB files with an index once they exceed that, as HF does) and,
optionally, the tokenizer files of a source directory. Everything is written into a temporary
sibling of `out_dir` and renamed into place at the end, so a crash never leaves a half-written
checkpoint behind. Weights are pulled from the devices one tensor at a time and written one
file at a time, so host memory holds at most one output file's worth of tensors.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from memr1.atomic import atomic_dir
from memr1.models.config import ModelConfig
from memr1.models.hf_io import INDEX_FILE, SINGLE_FILE, tensor_layout

MAX_SHARD_BYTES = 4 * 2**30
ARCHITECTURE = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}
# Files of a tokenizer (and the generation defaults that name its stop ids) worth carrying over.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "generation_config.json",
)


def hf_config_dict(cfg: ModelConfig, dtype: str) -> dict:
    """The config.json contents that make transformers rebuild exactly this architecture."""
    # HF's Qwen2 always has q/k/v biases and its LLaMA (with attention_bias) would add an output
    # bias too, so a config off that pattern has no faithful HF equivalent.
    if cfg.qkv_bias != (cfg.family == "qwen2"):
        raise ValueError(
            f"a {cfg.family} model with qkv_bias={cfg.qkv_bias} has no HF equivalent "
            "(Qwen2 needs q/k/v biases, LLaMA must have none)"
        )
    out = {
        "architectures": [ARCHITECTURE[cfg.family]],
        "model_type": cfg.family,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.d_ff,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position,
        "rms_norm_eps": cfg.rms_eps,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": None,
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_dropout": 0.0,
        "use_cache": True,
        "dtype": dtype,
    }
    if cfg.rope_scaling is not None:
        s = cfg.rope_scaling
        out["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position_embeddings,
        }
    if cfg.family == "qwen2":
        out.update(use_sliding_window=False, sliding_window=None)
    else:
        out.update(attention_bias=False, mlp_bias=False)
    return out


def _plan_shards(sizes: list[int], max_bytes: int) -> list[list[int]]:
    """Groups consecutive tensors into files of at most `max_bytes` (a lone big tensor alone)."""
    shards: list[list[int]] = [[]]
    used = 0
    for i, size in enumerate(sizes):
        if shards[-1] and used + size > max_bytes:
            shards.append([])
            used = 0
        shards[-1].append(i)
        used += size
    return shards


def _write_weights(cfg: ModelConfig, params: nnx.State, tmp: Path, dtype: str, max_bytes: int):
    from safetensors.numpy import save_file

    flat = dict(nnx.to_flat_state(params))
    layout = tensor_layout(cfg)
    missing = [path for path, *_ in layout if path not in flat]
    if missing:
        raise ValueError(f"params lack {missing[:3]} required by the config ({cfg.family})")
    itemsize = np.dtype(dtype).itemsize
    sizes = [int(np.prod(shape)) * itemsize for _, _, shape, _, _ in layout]
    shards = _plan_shards(sizes, max_bytes)
    names = (
        [SINGLE_FILE]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    weight_map = {}
    for fname, members in zip(names, shards):
        tensors = {}
        for i in members:
            path, hf_name, shape, _, to_hf = layout[i]
            # One device->host transfer per tensor; a sharded array is gathered here.
            host = np.asarray(jax.device_get(flat[path].get_value()))
            out = np.ascontiguousarray(to_hf(host).astype(dtype, copy=False))
            if out.shape != shape:
                raise ValueError(
                    f"param {path} has shape {host.shape}; {hf_name!r} must be {shape} ({cfg})"
                )
            tensors[hf_name] = out
            weight_map[hf_name] = fname
        save_file(tensors, str(tmp / fname), metadata={"format": "pt"})
        del tensors
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map}
        (tmp / INDEX_FILE).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def export_hf(
    cfg: ModelConfig,
    params: nnx.State,
    out_dir: str | Path,
    tokenizer_dir: str | Path | None = None,
    *,
    dtype: str | None = None,
    overwrite: bool = False,
    max_shard_bytes: int = MAX_SHARD_BYTES,
) -> Path:
    """Writes `params` as an HF checkpoint directory.

    Args:
      cfg: the model's config.
      params: the parameter state (as from `init_model` or `load_hf`), on any devices.
      out_dir: the directory to create.
      tokenizer_dir: a directory whose tokenizer files (and generation_config.json) are copied.
      dtype: storage dtype of the weights; defaults to `cfg.param_dtype`.
      overwrite: replace an existing non-empty `out_dir` (otherwise that is an error).
      max_shard_bytes: size above which the weights are split into several files plus an index.

    Returns:
      The path of the written directory.
    """
    out_dir = Path(out_dir)
    dtype = dtype or cfg.param_dtype
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise FileExistsError(f"{out_dir}: directory is not empty (pass overwrite=True)")
    if tokenizer_dir is not None and not Path(tokenizer_dir).is_dir():
        raise FileNotFoundError(f"{tokenizer_dir}: tokenizer directory not found")

    with atomic_dir(out_dir) as tmp:
        config = hf_config_dict(cfg, dtype)
        _write_weights(cfg, params, tmp, dtype, max_shard_bytes)
        if tokenizer_dir is not None:
            for name in TOKENIZER_FILES:
                src = Path(tokenizer_dir) / name
                if src.is_file():
                    shutil.copy2(src, tmp / name)
            # Let transformers find the special ids without the tokenizer at hand.
            gen = tmp / "generation_config.json"
            if gen.is_file():
                for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
                    value = json.loads(gen.read_text()).get(key)
                    if value is not None:
                        config[key] = value
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return out_dir
