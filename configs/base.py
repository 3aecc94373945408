"""Config sections shared by every memr1 experiment, and the `arg` string parser.

Each section is a function returning a ConfigDict, so an experiment config composes the ones it
needs and later stages (training, the memory pipeline) add their own sections next to these
without touching the existing ones. This file imports nothing heavy: loading a config must not
pull in JAX.
"""

from __future__ import annotations

import ml_collections
from ml_collections import config_dict


def model_section(
    size: str, *, dtype: str = "bfloat16", param_dtype: str = "float32", remat: bool = False
) -> ml_collections.ConfigDict:
    """The backbone: a size name from `memr1.models.config.SIZES` plus numerics overrides.

    `dtype` is the compute dtype of matmuls and activations; `param_dtype` the storage dtype
    of the weights (float32 master weights for training, bfloat16 is enough for sampling).
    """
    return ml_collections.ConfigDict(
        {"size": size, "dtype": dtype, "param_dtype": param_dtype, "remat": remat}
    )


def mesh_section(data: int = 1, fsdp: int = -1, tensor: int = 1) -> ml_collections.ConfigDict:
    """Device mesh shape over (data, fsdp, tensor); -1 takes all devices left over."""
    return ml_collections.ConfigDict({"data": data, "fsdp": fsdp, "tensor": tensor})


def sampling_section(
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    max_new_tokens: int = 256,
) -> ml_collections.ConfigDict:
    """Rollout sampling; temperature 0 is greedy and top_k 0 disables the top-k filter."""
    return ml_collections.ConfigDict(
        {
            "temperature": temperature,
            "top_p": top_p,
            "top_k": top_k,
            "max_new_tokens": max_new_tokens,
        }
    )


def hf_dir_field() -> config_dict.FieldReference:
    """A local HF checkpoint directory, unset by default (random init), typed as a string."""
    return config_dict.placeholder(str)


def parse_arg(arg: str | None, defaults: dict[str, object]) -> dict[str, object]:
    """Parses "key=value,key=value" into a copy of `defaults`.

    A bare key (e.g. "runlocal") sets a boolean default to True. Unknown keys raise a ValueError
    that lists the valid ones, so a typo never silently falls back to a default.
    """
    out = dict(defaults)
    for item in filter(None, (part.strip() for part in (arg or "").split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if key not in defaults:
            raise ValueError(
                f"unknown config arg key {key!r} in {arg!r}; valid: {sorted(defaults)}"
            )
        if isinstance(defaults[key], bool):
            if sep and value.strip().lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"config arg {key!r} takes true/false, got {value!r}")
            out[key] = not sep or value.strip().lower() in ("true", "1")
        elif not sep:
            raise ValueError(f"config arg {key!r} needs a value ({key}=...)")
        else:
            out[key] = value.strip()
    return out
