"""Backbone hyper-parameters and the size table.

One `ModelConfig` describes both families: Qwen-2/2.5 (q/k/v bias, tied embeddings on the small
models, RoPE theta 1e6) and LLaMA-3.1 (no bias, untied, RoPE with the "llama3" frequency scaling).
The size table lives here, next to the model, so configs and tools name sizes rather than copy
numbers. Parameter counts of every size are checked against the published checkpoints in tests.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

# Attention kernels (memr1.models.attention): "auto" picks one per call by backend and shape.
ATTENTION_IMPLEMENTATIONS = ("auto", "einsum", "chunked", "cudnn", "splash", "flash")
REMAT_POLICIES = ("full", "minimal")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """LLaMA-3.1's piecewise rescaling of the RoPE inverse frequencies."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of one decoder-only transformer."""

    family: str  # "qwen2" or "llama"
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    rope_theta: float = 10_000.0
    rope_scaling: RopeScaling | None = None
    rms_eps: float = 1e-6
    qkv_bias: bool = False
    tie_embeddings: bool = False
    max_position: int = 32_768
    param_dtype: str = "float32"
    dtype: str = "float32"  # compute dtype of matmuls and activations
    # Recompute each block's activations in the backward pass instead of storing them.
    remat: bool = False
    # What a rematerialised block keeps from its forward pass (MaxText's `remat_policy` names):
    # "full" only the block's input, so the backward recomputes the whole block (~8N FLOPs a
    # token for training instead of 6N); "minimal" also the outputs of its weight matmuls
    # (`jax.checkpoint_policies.dots_with_no_batch_dims_saveable`: q, k, v, the attention
    # output's projection, gate, up and down), so only attention and the elementwise ops are
    # recomputed, at ~2 x (3D + 2F + 2KN) bytes a token and block more memory in bf16.
    remat_policy: str = "full"
    # Run the blocks of a cache-free forward pass (training, scoring) as one `lax.scan` over
    # their stacked weights. XLA:CPU removes the optimisation barriers of `jax.checkpoint` early
    # (its cse_barrier_expander pass, before scheduling), so in the unrolled layer loop each
    # block's recomputation is merged back or hoisted and remat saves almost nothing; a scan's
    # backward loop can only recompute one block per iteration. The stored parameters keep
    # their per-layer layout; see `Transformer._scan_blocks` and docs/benchmarks.md.
    scan_layers: bool = False
    # The attention kernel of passes with more than one query position (prefill, training; decode
    # steps use einsum): "auto" (packed GRPO rows: flash on GPU, splash on TPU; other passes:
    # cuDNN on GPU, splash on TPU; chunked elsewhere), "einsum" (float32 scores [B, K, T*G, S]
    # at once), "chunked" (blocks of `attention_chunk` query positions), "cudnn", "splash" or
    # "flash" (Pallas/Triton, skips the packed mask's dead blocks). See
    # `memr1.models.attention`. A pass of at most `attention_chunk` positions is one block,
    # i.e. exactly the einsum program.
    attention: str = "auto"
    attention_chunk: int = 512

    def __post_init__(self):
        if self.family not in ("qwen2", "llama"):
            raise ValueError(
                f"unsupported model family {self.family!r}; expected 'qwen2' or 'llama'"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} must be even for rotary embeddings")
        if self.attention not in ATTENTION_IMPLEMENTATIONS:
            raise ValueError(
                f"attention={self.attention!r} is not one of {list(ATTENTION_IMPLEMENTATIONS)}"
            )
        if self.remat_policy not in REMAT_POLICIES:
            raise ValueError(
                f"remat_policy={self.remat_policy!r} is not one of {list(REMAT_POLICIES)}"
            )
        if self.attention_chunk < 1:
            raise ValueError(f"attention_chunk={self.attention_chunk} must be >= 1")
        for name in ("param_dtype", "dtype"):
            if getattr(self, name) not in ("float32", "bfloat16", "float16"):
                raise ValueError(f"{name}={getattr(self, name)!r} is not a supported dtype")

    @property
    def jnp_param_dtype(self) -> Any:
        return jnp.dtype(self.param_dtype)

    @property
    def jnp_dtype(self) -> Any:
        return jnp.dtype(self.dtype)

    def replace(self, **kwargs) -> ModelConfig:
        return dataclasses.replace(self, **kwargs)


def _qwen(vocab, d, layers, heads, kv, ff, tie) -> ModelConfig:
    return ModelConfig(
        family="qwen2",
        vocab_size=vocab,
        d_model=d,
        n_layers=layers,
        n_heads=heads,
        n_kv_heads=kv,
        head_dim=d // heads,
        d_ff=ff,
        rope_theta=1_000_000.0,
        rms_eps=1e-6,
        qkv_bias=True,
        tie_embeddings=tie,
    )


# Published shapes; the expected parameter counts are the checkpoints' own totals.
SIZES: dict[str, ModelConfig] = {
    # A few million parameters: tests and the CPU demo. Odd-ish GQA ratio on purpose.
    "tiny": ModelConfig(
        family="qwen2",
        vocab_size=4096,
        d_model=192,
        n_layers=4,
        n_heads=6,
        n_kv_heads=2,
        head_dim=32,
        d_ff=576,
        rope_theta=10_000.0,
        qkv_bias=True,
        tie_embeddings=True,
        max_position=4096,
    ),
    "qwen2.5-3b": _qwen(151_936, 2048, 36, 16, 2, 11_008, tie=True),
    "qwen2.5-7b": _qwen(152_064, 3584, 28, 28, 4, 18_944, tie=False),
    "qwen2.5-14b": _qwen(152_064, 5120, 48, 40, 8, 13_824, tie=False),
    "llama3.1-8b": ModelConfig(
        family="llama",
        vocab_size=128_256,
        d_model=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        d_ff=14_336,
        rope_theta=500_000.0,
        rope_scaling=RopeScaling(),
        rms_eps=1e-5,
        qkv_bias=False,
        tie_embeddings=False,
        max_position=131_072,
    ),
}

PUBLISHED_PARAM_COUNTS: dict[str, int] = {
    "qwen2.5-3b": 3_085_938_688,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-14b": 14_770_033_664,
    "llama3.1-8b": 8_030_261_248,
}


def get_size(name: str, **overrides) -> ModelConfig:
    """Returns the named size, optionally with fields overridden (e.g. dtype="bfloat16")."""
    if name not in SIZES:
        raise ValueError(f"unknown backbone size {name!r}; expected one of {sorted(SIZES)}")
    return SIZES[name].replace(**overrides)
