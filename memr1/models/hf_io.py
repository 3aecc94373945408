"""Loads Hugging Face Qwen2 / LLaMA checkpoints into the memr1 parameter tree.

The weights are read from memory-mapped safetensors files (one file or a sharded index) and
converted one tensor at a time: each tensor is read, cast, rearranged into our layout and placed
on its devices before the next one is touched, so loading a 14B checkpoint needs host memory for
the largest single tensor, not for a second copy of the model.

`TENSOR_LAYOUT` is the single description of how HF tensor names and shapes map onto ours; the
exporter (`hf_export`) walks the same table backwards, so the two directions cannot drift.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from memr1.models.config import ModelConfig, RopeScaling
from memr1.models.transformer import abstract_model
from memr1.sharding import logical_to_spec

ARCHITECTURES = {"Qwen2ForCausalLM": "qwen2", "LlamaForCausalLM": "llama"}
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# Tensors that HF checkpoints may carry but that our model recomputes or does not use.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)

# A path in the flat parameter state, e.g. ("layers", 3, "attn", "wq").
ParamPath = tuple[str | int, ...]
# One parameter: (our path, HF tensor name, HF shape, HF -> ours, ours -> HF).
Entry = tuple[ParamPath, str, tuple[int, ...], Callable, Callable]


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be loaded; the message names the file and key."""


# ----------------------------------------------------------------------------------------------
# Layout: our path -> (HF tensor name, HF shape, HF->ours, ours->HF).
# ----------------------------------------------------------------------------------------------


def _layer_entries(cfg: ModelConfig, i: int) -> Iterator[Entry]:
    d, h, k, n, f = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff
    p = f"model.layers.{i}."
    # HF linear weights are [out, in]; ours are [in, out...] with heads split out of the out axis.
    for ours, hf, heads in (("wq", "q_proj", h), ("wk", "k_proj", k), ("wv", "v_proj", k)):
        yield (
            ("layers", i, "attn", ours),
            f"{p}self_attn.{hf}.weight",
            (heads * n, d),
            lambda w, heads=heads: w.T.reshape(d, heads, n),
            lambda w, heads=heads: w.reshape(d, heads * n).T,
        )
    yield (
        ("layers", i, "attn", "wo"),
        f"{p}self_attn.o_proj.weight",
        (d, h * n),
        lambda w: w.T.reshape(h, n, d),
        lambda w: w.reshape(h * n, d).T,
    )
    if cfg.qkv_bias:
        for ours, hf, heads in (("bq", "q_proj", h), ("bk", "k_proj", k), ("bv", "v_proj", k)):
            yield (
                ("layers", i, "attn", ours),
                f"{p}self_attn.{hf}.bias",
                (heads * n,),
                lambda b, heads=heads: b.reshape(heads, n),
                lambda b, heads=heads: b.reshape(heads * n),
            )
    for ours, hf, shape in (("gate", "gate_proj", (f, d)), ("up", "up_proj", (f, d))):
        yield ("layers", i, "mlp", ours), f"{p}mlp.{hf}.weight", shape, np.transpose, np.transpose
    yield (
        ("layers", i, "mlp", "down"),
        f"{p}mlp.down_proj.weight",
        (d, f),
        np.transpose,
        np.transpose,
    )
    for ours, hf in (("attn_norm", "input_layernorm"), ("mlp_norm", "post_attention_layernorm")):
        yield ("layers", i, ours, "scale"), f"{p}{hf}.weight", (d,), _same, _same


def _same(x: np.ndarray) -> np.ndarray:
    return x


def tensor_layout(cfg: ModelConfig) -> list[Entry]:
    """Every parameter as (our path, HF name, HF shape, hf_to_ours, ours_to_hf)."""
    v, d = cfg.vocab_size, cfg.d_model
    entries = [(("embed",), "model.embed_tokens.weight", (v, d), _same, _same)]
    for i in range(cfg.n_layers):
        entries.extend(_layer_entries(cfg, i))
    entries.append((("final_norm", "scale"), "model.norm.weight", (d,), _same, _same))
    if not cfg.tie_embeddings:
        entries.append((("lm_head",), "lm_head.weight", (v, d), np.transpose, np.transpose))
    return entries


# ----------------------------------------------------------------------------------------------
# config.json -> ModelConfig.
# ----------------------------------------------------------------------------------------------


def read_json(path: Path) -> dict:
    """Parses a JSON file, naming the file on any failure."""
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from e


def _rope_scaling(raw: dict, hf_cfg: Any, where: Path) -> tuple[float, RopeScaling | None]:
    """Reads RoPE theta and scaling from either the 5.x (`rope_parameters`) or 4.x layout."""
    key = "rope_parameters" if raw.get("rope_parameters") is not None else "rope_scaling"
    params = getattr(hf_cfg, "rope_parameters", None) or getattr(hf_cfg, "rope_scaling", None)
    params = dict(params or {})
    theta = params.get("rope_theta", raw.get("rope_theta", getattr(hf_cfg, "rope_theta", 1e4)))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return float(theta), None
    if rope_type != "llama3":
        raise CheckpointError(
            f"{where}: unsupported RoPE type {rope_type!r} in key '{key}.rope_type' "
            "(supported: default, llama3)"
        )
    try:
        scaling = RopeScaling(
            factor=float(params["factor"]),
            low_freq_factor=float(params["low_freq_factor"]),
            high_freq_factor=float(params["high_freq_factor"]),
            original_max_position_embeddings=int(params["original_max_position_embeddings"]),
        )
    except KeyError as e:
        raise CheckpointError(f"{where}: llama3 RoPE scaling in {key!r} lacks {e.args[0]!r}") from e
    return float(theta), scaling


def _reject(where: Path, key: str, value: Any, why: str) -> None:
    raise CheckpointError(f"{where}: key {key!r} = {value!r} is not supported ({why})")


def config_from_hf(hf_dir: str | Path, *, dtype=None, param_dtype=None) -> ModelConfig:
    """Builds a ModelConfig from `hf_dir/config.json` (read through transformers.AutoConfig).

    `param_dtype` defaults to the checkpoint's stored dtype when it is one we support (else
    float32) and `dtype`, the compute dtype, defaults to `param_dtype`.
    """
    hf_dir = Path(hf_dir)
    if not hf_dir.is_dir():
        raise CheckpointError(f"{hf_dir}: checkpoint directory not found")
    where = hf_dir / "config.json"
    raw = read_json(where)
    archs = raw.get("architectures") or []
    family = next((ARCHITECTURES[a] for a in archs if a in ARCHITECTURES), None)
    if family is None:
        raise CheckpointError(
            f"{where}: key 'architectures' = {archs!r} names no supported architecture "
            f"(supported: {sorted(ARCHITECTURES)})"
        )
    from transformers import AutoConfig  # deferred: importing transformers costs seconds

    try:
        hf_cfg = AutoConfig.from_pretrained(str(hf_dir), local_files_only=True)
    except Exception as e:  # transformers' validators raise assorted (non-ValueError) types
        raise CheckpointError(f"{where}: transformers could not parse it ({e})") from e

    if getattr(hf_cfg, "hidden_act", "silu") != "silu":
        _reject(where, "hidden_act", hf_cfg.hidden_act, "only silu MLPs")
    if getattr(hf_cfg, "mlp_bias", False):
        _reject(where, "mlp_bias", True, "the MLP has no biases")
    if family == "llama" and getattr(hf_cfg, "attention_bias", False):
        _reject(where, "attention_bias", True, "LLaMA attention here has no biases")
    if getattr(hf_cfg, "use_sliding_window", False):
        _reject(where, "use_sliding_window", True, "only full attention")
    theta, scaling = _rope_scaling(raw, hf_cfg, where)

    stored = str(raw.get("dtype") or raw.get("torch_dtype") or "float32")
    param_dtype = param_dtype or (
        stored if stored in ("float32", "bfloat16", "float16") else "float32"
    )
    n_heads = hf_cfg.num_attention_heads
    head_dim = getattr(hf_cfg, "head_dim", None) or hf_cfg.hidden_size // n_heads
    try:
        return ModelConfig(
            family=family,
            vocab_size=hf_cfg.vocab_size,
            d_model=hf_cfg.hidden_size,
            n_layers=hf_cfg.num_hidden_layers,
            n_heads=n_heads,
            n_kv_heads=getattr(hf_cfg, "num_key_value_heads", None) or n_heads,
            head_dim=head_dim,
            d_ff=hf_cfg.intermediate_size,
            rope_theta=theta,
            rope_scaling=scaling,
            rms_eps=float(hf_cfg.rms_norm_eps),
            qkv_bias=family == "qwen2",  # Qwen2 always has q/k/v biases; LLaMA never here.
            tie_embeddings=bool(getattr(hf_cfg, "tie_word_embeddings", False)),
            max_position=int(getattr(hf_cfg, "max_position_embeddings", 32_768)),
            param_dtype=str(param_dtype),
            dtype=str(dtype or param_dtype),
        )
    except ValueError as e:
        raise CheckpointError(f"{where}: {e}") from e


# ----------------------------------------------------------------------------------------------
# Safetensors discovery and loading.
# ----------------------------------------------------------------------------------------------


def weight_files(hf_dir: Path) -> dict[str, Path]:
    """Maps every tensor name to the safetensors file that holds it (single file or index)."""
    index = hf_dir / INDEX_FILE
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index}: key 'weight_map' is missing or not an object")
        return {name: hf_dir / fname for name, fname in weight_map.items()}
    single = hf_dir / SINGLE_FILE
    if not single.is_file():
        raise CheckpointError(f"{hf_dir}: neither {SINGLE_FILE} nor {INDEX_FILE} found")
    with _open(single) as f:
        return dict.fromkeys(f.keys(), single)


@contextlib.contextmanager
def _open(path: Path):
    """safe_open with errors that name the file (a missing or corrupt header)."""
    from safetensors import safe_open

    if not path.is_file():
        raise CheckpointError(f"{path}: safetensors file not found (listed in the index)")
    try:
        handle = safe_open(str(path), framework="numpy")
    except Exception as e:  # safetensors raises its own SafetensorError for a bad header
        raise CheckpointError(f"{path}: unreadable safetensors file ({e})") from e
    with handle as f:
        yield f


def _param_names(abstract_params: nnx.State) -> dict[ParamPath, tuple]:
    """Logical axis names of every parameter, keyed by its path in the flat state."""
    return {
        path: tuple(var.get_metadata().get("out_sharding") or ())
        for path, var in nnx.to_flat_state(abstract_params)
    }


def _target_sharding(path: ParamPath, names: tuple, shardings: Any) -> jax.sharding.Sharding | None:
    if shardings is None:
        return None
    if isinstance(shardings, Mesh):
        return NamedSharding(shardings, logical_to_spec(names))
    return shardings[path]  # a mapping from flat path to a Sharding, supplied by the trainer


def _check_tensor_names(hf_dir: Path, cfg: ModelConfig, layout, located: dict) -> None:
    """Every tensor the config needs is in the files, and the files hold no tensor it does not."""
    expected = {hf_name for _, hf_name, *_ in layout}
    searched = sorted({p.name for p in located.values()}) or [SINGLE_FILE]
    for _, hf_name, *_ in layout:
        if hf_name not in located:
            raise CheckpointError(f"{hf_dir}: tensor {hf_name!r} is missing (searched {searched})")
    unexpected = [
        k
        for k in located
        if k not in expected
        and not k.endswith(_IGNORED_SUFFIXES)
        and not (cfg.tie_embeddings and k == "lm_head.weight")
    ]
    if unexpected:
        raise CheckpointError(
            f"{hf_dir / 'config.json'}: the weights hold tensors this config does not use, "
            f"e.g. {unexpected[:3]} (is num_hidden_layers or tie_word_embeddings wrong?)"
        )


def _checked_placements(layout, located, handles, names, abstract_shapes, shardings) -> dict:
    """The sharding of every parameter, after checking each tensor's shape (from the file
    headers) and that its sharding divides it: no data is read before all of them pass."""
    placements = {}
    for path, hf_name, shape, *_ in layout:
        got = tuple(handles[located[hf_name]].get_slice(hf_name).get_shape())
        if got != shape:
            raise CheckpointError(
                f"{located[hf_name]}: tensor {hf_name!r} has shape {got}, "
                f"config.json implies {shape}"
            )
        placements[path] = _target_sharding(path, names[path], shardings)
        ours = abstract_shapes[path]
        try:
            if placements[path] is not None:
                placements[path].shard_shape(ours)
        except ValueError as e:
            raise CheckpointError(
                f"{located[hf_name]}: tensor {hf_name!r} (as {ours}, axes {names[path]}) "
                f"cannot be split as {placements[path]} ({e})"
            ) from e
    return placements


def load_hf(
    hf_dir: str | Path,
    *,
    dtype: str | None = None,
    param_dtype: str | None = None,
    shardings: Mesh | dict[ParamPath, jax.sharding.Sharding] | None = None,
) -> tuple[ModelConfig, nnx.GraphDef, nnx.State]:
    """Loads a Qwen2 / LLaMA HF checkpoint directory.

    Args:
      hf_dir: a local directory with config.json and model.safetensors (or a sharded index).
      dtype: compute dtype (defaults to `param_dtype`).
      param_dtype: storage dtype of the parameters (defaults to the checkpoint's dtype).
      shardings: a Mesh (each parameter is placed by its logical axis names through
        `memr1.sharding.logical_to_spec`), or a mapping from flat parameter path to Sharding, or
        None for the default device.

    Returns:
      (cfg, graphdef, params) as used by `memr1.models.transformer.forward`.
    """
    hf_dir = Path(hf_dir)
    cfg = config_from_hf(hf_dir, dtype=dtype, param_dtype=param_dtype)
    graphdef, abstract = abstract_model(cfg)
    names = _param_names(abstract)
    abstract_shapes = {
        path: tuple(var.get_value().shape) for path, var in nnx.to_flat_state(abstract)
    }
    located = weight_files(hf_dir)
    layout = tensor_layout(cfg)

    _check_tensor_names(hf_dir, cfg, layout, located)
    target = np.dtype(cfg.param_dtype)
    values: dict[ParamPath, jax.Array] = {}
    with contextlib.ExitStack() as stack:
        handles = {p: stack.enter_context(_open(p)) for p in sorted(set(located.values()))}
        # Check every shape (from the headers) and every placement before reading any data or
        # allocating device memory, so a bad checkpoint fails fast and leaves nothing behind.
        placements = _checked_placements(
            layout, located, handles, names, abstract_shapes, shardings
        )
        for path, hf_name, _, to_ours, _ in layout:
            try:
                raw = handles[located[hf_name]].get_tensor(hf_name)
            except Exception as e:
                raise CheckpointError(f"{located[hf_name]}: cannot read {hf_name!r} ({e})") from e
            host = np.ascontiguousarray(to_ours(raw.astype(target, copy=False)))
            del raw
            values[path] = jax.device_put(host, placements[path])
            del host  # release the host copy before the next tensor is read

    params = nnx.from_flat_state(
        [(path, var.replace(values[path])) for path, var in nnx.to_flat_state(abstract)]
    )
    return cfg, graphdef, params
