"""LoRA through qwix: adapters on the policy's attention and MLP weights, base weights frozen.

`qwix.apply_lora_to_model` intercepts the model's weight einsums in the modules whose path
matches `module_path` and adds, for each weight W, an `nnx.LoRAParam` pair (A, B) so that the
layer computes x·W + (alpha / rank)·x·A·B. A holds W's contracting dimensions and the rank
(`[d, r]` for wq `[d, h, n]`), B the rank and W's remaining dimensions (`[r, h, n]`); A starts
He-uniform and B at zero, so an adapted model starts out equal to its base. Both inherit W's
logical axis names (the rank axis unsharded), so they are sharded like W.

Training with LoRA is `create_train_state(..., module_fn=module_fn(cfg, lora, seed),
trainable=nnx.LoRAParam)`: the optimiser state covers only the adapters and the steps
differentiate only them. Checkpoints hold the base weights and the adapters, plus the LoRA
settings as the step's custom metadata (`checkpoint_metadata`); `merge` folds the adapters back
into W + (alpha / rank)·A·B (qwix's scaling: `rule.alpha / rule.rank` in
`qwix/_src/providers/lora.py`), which gives a plain model for evaluation and export.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from memr1.models.config import ModelConfig

SUFFIX_A, SUFFIX_B = "_lora_a", "_lora_b"
METADATA_KEY = "lora"  # key of the LoRA settings in a checkpoint step's custom metadata


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """rank (> 0), alpha (the update is scaled by alpha / rank), module_path (a regex over
    module paths such as `layers/3/attn`): train.lora_rank, lora_alpha, lora_module_path."""

    rank: int
    alpha: float
    module_path: str

    def __post_init__(self):
        if isinstance(self.rank, bool) or int(self.rank) != self.rank or self.rank < 1:
            raise ValueError(f"train.lora_rank={self.rank!r}: must be an integer >= 1 (0 = off)")
        if not float(self.alpha) > 0:
            raise ValueError(f"train.lora_alpha={self.alpha!r}: must be > 0")
        try:
            re.compile(self.module_path)
        except re.error as err:
            raise ValueError(f"train.lora_module_path={self.module_path!r}: {err}") from err

    @property
    def scale(self) -> float:
        return float(self.alpha) / int(self.rank)

    def as_metadata(self) -> dict[str, Any]:
        return {"rank": int(self.rank), "alpha": float(self.alpha), "module_path": self.module_path}

    @classmethod
    def from_config(cls, config) -> LoraConfig | None:
        """The LoRA settings of a `configs/memr1.py` config, or None when train.lora_rank is 0
        (every weight trains); refuses a bad rank, alpha or module regex."""
        t = config.train
        if t.lora_rank == 0:
            return None
        return cls(t.lora_rank, t.lora_alpha, t.lora_module_path)


def checkpoint_metadata(lora: LoraConfig | None) -> dict[str, Any] | None:
    """Custom metadata for the Checkpointer of a run (None without LoRA)."""
    return None if lora is None else {METADATA_KEY: lora.as_metadata()}


def module_fn(cfg: ModelConfig, lora: LoraConfig, seed: int = 0) -> Callable[[], nnx.Module]:
    """Builds the adapted policy: a `Transformer` with qwix LoRA adapters (B = 0)."""

    def build() -> nnx.Module:
        import qwix  # deferred: only LoRA runs need it

        from memr1.models import masks
        from memr1.models.transformer import Transformer

        # qwix creates the adapters during one call on example inputs (their shapes do not
        # matter beyond being valid for the model). That call runs the layers one by one: in a
        # `scan_layers` scan each block is a temporary copy, whose new adapters would be lost.
        model = Transformer(cfg.replace(scan_layers=False), nnx.Rngs(params=seed))
        valid = jnp.ones((1, 2), bool)
        provider = qwix.LoraProvider(
            module_path=lora.module_path, rank=int(lora.rank), alpha=float(lora.alpha)
        )
        adapted = qwix.apply_lora_to_model(
            model,
            provider,
            jnp.zeros((1, 2), jnp.int32),
            masks.positions_from_valid(valid),
            masks.causal_mask(valid),
            rngs=nnx.Rngs(seed + 10_003),
        )
        adapted.cfg = cfg  # the blocks read only shapes and dtypes, which are the same
        n = sum(1 for _ in nnx.to_flat_state(nnx.state(adapted, nnx.LoRAParam)))
        if n == 0:
            raise ValueError(
                f"train.lora_module_path={lora.module_path!r} matches no module with weights "
                "(module paths look like 'layers/0/attn', 'layers/0/mlp')"
            )
        return adapted

    return build


def is_lora_path(path: tuple) -> bool:
    name = str(path[-1])
    return name.endswith(SUFFIX_A) or name.endswith(SUFFIX_B)


def has_adapters(params: Any) -> bool:
    return any(is_lora_path(p) for p, _ in nnx.to_flat_state(params))


def count_adapter_params(params: Any) -> int:
    """Number of LoRA parameters (arrays or ShapeDtypeStructs) in a parameter state."""
    flat = nnx.to_flat_state(params)
    return sum(int(v.get_value().size) for p, v in flat if is_lora_path(p))


def merge(params: nnx.State, scale: float) -> nnx.State:
    """The base parameter state with each adapter pair folded in: W + scale·A·B.

    A is [contracting dims of W..., r] and B [r, remaining dims of W...]; every weight of this
    model lists its contracting dimensions first, so A·B (a tensordot over r) has W's layout.
    The product is taken in float32 and cast to W's dtype. Pure jnp: jit it to keep shardings.
    """
    flat = dict(nnx.to_flat_state(params))
    out = []
    for path, var in flat.items():
        if is_lora_path(path):
            continue
        a_path = path[:-1] + (f"{path[-1]}{SUFFIX_A}",)
        b_path = path[:-1] + (f"{path[-1]}{SUFFIX_B}",)
        if a_path in flat and b_path in flat:
            w = var.get_value()
            a, b = flat[a_path].get_value(), flat[b_path].get_value()
            if a.shape[-1] != b.shape[0] or a.shape[:-1] + b.shape[1:] != w.shape:
                name = "/".join(map(str, path))
                raise ValueError(
                    f"LoRA adapters of {name} {w.shape} have shapes {a.shape} · {b.shape}, "
                    "which do not compose to the weight's layout"
                )
            delta = jnp.tensordot(a.astype(jnp.float32), b.astype(jnp.float32), axes=1)
            var = var.replace(value=(w.astype(jnp.float32) + scale * delta).astype(w.dtype))
        out.append((path, var))
    orphans = [p for p in flat if is_lora_path(p) and p[:-1] + (_base_name(p),) not in flat]
    if orphans:
        raise ValueError(f"LoRA adapters without a base weight: {orphans[:4]}")
    return nnx.from_flat_state(out)


def _base_name(path: tuple) -> str:
    name = str(path[-1])
    return name[: -len(SUFFIX_A)] if name.endswith(SUFFIX_A) else name[: -len(SUFFIX_B)]


def merge_jit(params: nnx.State, scale: float, out_shardings: Any = None) -> nnx.State:
    """`merge` under jit, the result placed by `out_shardings` (e.g. the base shardings)."""
    return jax.jit(lambda p: merge(p, scale), out_shardings=out_shardings)(params)


def base_part(params: nnx.State) -> nnx.State:
    """The parameter state without its adapters (the frozen base weights)."""
    return nnx.split_state(params, nnx.LoRAParam, ...)[1]
