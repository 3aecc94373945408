"""The decoder-only transformer shared by the Qwen-2 and LLaMA-3.1 families (Flax NNX).

At a jit boundary the model is a pure function of its parameter state:
``forward(params, tokens_BT, positions_BT, mask_BTS, cache, cache_index)`` merges the static
graph definition with the given parameters, so samplers and update steps can donate, shard and
checkpoint parameters as plain pytrees.

Attention takes an explicit boolean mask [B, T, S] (query position t may read key slot s), built by
the caller from left/right padding and causality (see `memr1.models.masks`), or for packed GRPO
rows a `masks.PackedMask` (their segment ids, which the block-skipping kernels read). With a KV
cache, the T new keys/values are written at slots [cache_index, cache_index + T) of a
preallocated [B, K, S, N] buffer and attention reads all S slots through the mask. The attention
kernel (`cfg.attention`) is chosen per call in `memr1.models.attention`.
A layer's cache may instead be an object with an `attend(q_BTHN, k_BTKN, v_BTKN) -> (out_BTHN,
new cache)` method (a pytree): it stores the new keys and values where it keeps them and runs its
own attention; the rollout engine's paged cache (`memr1.sampling.paged`) is one.

With `cfg.scan_layers`, a forward pass without a cache runs the blocks as one `lax.scan` over
their weights stacked inside the call (the parameters keep one `Block` per layer); that is what
makes `cfg.remat` bound activation memory on XLA:CPU (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from memr1.models import attention
from memr1.models.config import ModelConfig
from memr1.models.rope import apply_rope, inverse_frequencies
from memr1.sharding import constrain

KVCache = list[dict[str, jax.Array]]  # one {"k": [B,K,S,N], "v": [B,K,S,N]} per layer


def _param(rngs: nnx.Rngs | None, shape, names, cfg: ModelConfig, init: str = "normal"):
    """Creates a parameter with logical axis names (sharding is applied by the trainer)."""
    dtype = cfg.jnp_param_dtype
    if init == "normal":
        value = 0.02 * jax.random.normal(rngs.params(), shape, dtype)
    elif init == "zeros":
        value = jnp.zeros(shape, dtype)
    else:
        value = jnp.ones(shape, dtype)
    return nnx.Param(value, out_sharding=tuple(names), eager_sharding=False)


class RMSNorm(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.eps = cfg.rms_eps
        self.scale = _param(rngs, (cfg.d_model,), ("norm",), cfg, init="ones")

    def __call__(self, x_BTD: jax.Array) -> jax.Array:
        # Normalise in float32 and scale in the activation dtype, as the HF reference does.
        x = x_BTD.astype(jnp.float32)
        x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
        return self.scale[...].astype(x_BTD.dtype) * x.astype(x_BTD.dtype)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        d, h, k, n = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.cfg = cfg
        self.wq = _param(rngs, (d, h, n), ("embed", "q_heads", "head_dim"), cfg)
        self.wk = _param(rngs, (d, k, n), ("embed", "kv_heads", "head_dim"), cfg)
        self.wv = _param(rngs, (d, k, n), ("embed", "kv_heads", "head_dim"), cfg)
        self.wo = _param(rngs, (h, n, d), ("q_heads", "head_dim", "embed"), cfg)
        if cfg.qkv_bias:
            self.bq = _param(rngs, (h, n), ("q_heads", "head_dim"), cfg, init="zeros")
            self.bk = _param(rngs, (k, n), ("kv_heads", "head_dim"), cfg, init="zeros")
            self.bv = _param(rngs, (k, n), ("kv_heads", "head_dim"), cfg, init="zeros")

    def __call__(self, x_BTD, positions_BT, mask_BTS, cache: dict | None, cache_index):
        cfg, dt = self.cfg, self.cfg.jnp_dtype
        q_BTHN = jnp.einsum("btd,dhn->bthn", x_BTD, self.wq[...].astype(dt))
        k_BTKN = jnp.einsum("btd,dkn->btkn", x_BTD, self.wk[...].astype(dt))
        v_BTKN = jnp.einsum("btd,dkn->btkn", x_BTD, self.wv[...].astype(dt))
        if cfg.qkv_bias:
            q_BTHN = q_BTHN + self.bq[...].astype(dt)
            k_BTKN = k_BTKN + self.bk[...].astype(dt)
            v_BTKN = v_BTKN + self.bv[...].astype(dt)
        inv_freq = inverse_frequencies(cfg)  # numpy, folded into the trace as a constant
        q_BTHN = apply_rope(q_BTHN, positions_BT, inv_freq)
        k_BTKN = apply_rope(k_BTKN, positions_BT, inv_freq)

        # Keys and values are kept head-major, [B, K, S, N], so the attention matmuls read the
        # cache as a plain batch of [S, N] matrices: with [B, S, K, N], XLA re-laid out the whole
        # cache of every layer at every decode step.
        if cache is not None and not isinstance(cache, dict):
            # A cache that is not a dense buffer (the rollout engine's pages,
            # `memr1.sampling.paged`) stores the new keys and values and attends itself.
            out_BTHN, new_cache = cache.attend(q_BTHN, k_BTKN, v_BTKN)
            out_BTD = jnp.einsum("bthn,hnd->btd", out_BTHN, self.wo[...].astype(dt))
            return out_BTD, new_cache
        k_BKTN = k_BTKN.transpose(0, 2, 1, 3)
        v_BKTN = v_BTKN.transpose(0, 2, 1, 3)
        if cache is None:
            k_BKSN, v_BKSN, new_cache = k_BKTN, v_BKTN, None
        else:
            start = (0, 0, cache_index, 0)
            k_BKSN = jax.lax.dynamic_update_slice(
                cache["k"], k_BKTN.astype(cache["k"].dtype), start
            )
            v_BKSN = jax.lax.dynamic_update_slice(
                cache["v"], v_BKTN.astype(cache["v"].dtype), start
            )
            new_cache = {"k": k_BKSN, "v": v_BKSN}
            k_BKSN, v_BKSN = k_BKSN.astype(dt), v_BKSN.astype(dt)

        out_BTHN = attention.attend(
            q_BTHN,
            k_BKSN,
            v_BKSN,
            mask_BTS,
            implementation=cfg.attention,
            chunk=cfg.attention_chunk,
        )
        out_BTD = jnp.einsum("bthn,hnd->btd", out_BTHN, self.wo[...].astype(dt))
        return out_BTD, new_cache


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        self.gate = _param(rngs, (cfg.d_model, cfg.d_ff), ("embed", "mlp"), cfg)
        self.up = _param(rngs, (cfg.d_model, cfg.d_ff), ("embed", "mlp"), cfg)
        self.down = _param(rngs, (cfg.d_ff, cfg.d_model), ("mlp", "embed"), cfg)

    def __call__(self, x_BTD):
        dt = self.cfg.jnp_dtype
        gate_BTF = jnp.einsum("btd,df->btf", x_BTD, self.gate[...].astype(dt))
        up_BTF = jnp.einsum("btd,df->btf", x_BTD, self.up[...].astype(dt))
        h_BTF = constrain(jax.nn.silu(gate_BTF) * up_BTF, ("batch", "length", "mlp"))
        return jnp.einsum("btf,fd->btd", h_BTF, self.down[...].astype(dt))


class Block(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.attn_norm = RMSNorm(cfg, rngs)
        self.attn = Attention(cfg, rngs)
        self.mlp_norm = RMSNorm(cfg, rngs)
        self.mlp = MLP(cfg, rngs)

    def __call__(self, x_BTD, positions_BT, mask_BTS, cache, cache_index):
        attn_out, new_cache = self.attn(
            self.attn_norm(x_BTD), positions_BT, mask_BTS, cache, cache_index
        )
        x_BTD = constrain(x_BTD + attn_out, ("batch", "length", "embed"))
        x_BTD = constrain(x_BTD + self.mlp(self.mlp_norm(x_BTD)), ("batch", "length", "embed"))
        return x_BTD, new_cache


class Transformer(nnx.Module):
    """Token embedding, a stack of pre-norm blocks, a final norm and the LM head."""

    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        self.embed = _param(rngs, (cfg.vocab_size, cfg.d_model), ("vocab", "embed"), cfg)
        self.layers = nnx.List([Block(cfg, rngs) for _ in range(cfg.n_layers)])
        self.final_norm = RMSNorm(cfg, rngs)
        if not cfg.tie_embeddings:
            self.lm_head = _param(rngs, (cfg.d_model, cfg.vocab_size), ("embed", "vocab"), cfg)

    def __call__(
        self,
        tokens_BT: jax.Array,
        positions_BT: jax.Array,
        mask_BTS: jax.Array,
        cache: KVCache | None = None,
        cache_index: jax.Array | int = 0,
    ) -> tuple[jax.Array, KVCache | None]:
        """Returns the final hidden states [B, T, D] (after the final norm) and the new cache."""
        dt = self.cfg.jnp_dtype
        # Ids outside the table are clamped into it rather than read as NaN (jnp.take's default):
        # padding may hold a pad id past `vocab_size` (some tokenizers add one), and padded
        # positions are masked, so their embedding never reaches a real token. Real tokens are
        # checked at the host boundary (`memr1.models.vocab.check_token_ids`).
        x_BTD = jnp.take(self.embed[...], tokens_BT, axis=0, mode="clip").astype(dt)
        x_BTD = constrain(x_BTD, ("batch", "length", "embed"))
        if self.cfg.scan_layers and cache is None:
            return self.final_norm(self._scan_blocks(x_BTD, positions_BT, mask_BTS)), None
        new_cache = [] if cache is not None else None
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache[i]
            if self.cfg.remat:
                # Recompute each block's activations in the backward pass instead of storing them.
                x_BTD, c = nnx.remat(Block.__call__, policy=remat_policy(self.cfg))(
                    layer, x_BTD, positions_BT, mask_BTS, layer_cache, cache_index
                )
            else:
                x_BTD, c = layer(x_BTD, positions_BT, mask_BTS, layer_cache, cache_index)
            if new_cache is not None:
                new_cache.append(c)
        return self.final_norm(x_BTD), new_cache

    def _scan_blocks(self, x_BTD, positions_BT, mask_BTS) -> jax.Array:
        """The blocks as one `lax.scan` over their weights stacked along a leading layer axis.

        The model keeps one `Block` per layer (checkpoints, HF import/export and LoRA paths see
        the per-layer layout); the stacked copy exists only inside the traced call, and the
        gradient of `jnp.stack` hands each layer its own slice back. With `cfg.remat` the scanned
        body is checkpointed, so the forward loop stores only each block's input [B, T, D] and
        the backward loop recomputes one block per iteration: a loop body cannot be hoisted the
        way XLA:CPU hoists the recomputations of an unrolled layer loop.
        """
        graphdef = nnx.graphdef(self.layers[0])
        layers = [
            jax.tree.flatten(nnx.state(layer), is_leaf=lambda v: isinstance(v, nnx.Variable))
            for layer in self.layers
        ]
        var_treedef = layers[0][1]
        for i, (_, treedef) in enumerate(layers):
            if treedef != var_treedef:
                raise ValueError(
                    f"scan_layers needs blocks with the same parameters, but layer {i} differs "
                    "from layer 0 (e.g. LoRA on some layers only): turn scan_layers off"
                )
        stacked = []
        for variables in zip(*(v for v, _ in layers), strict=True):
            names = variables[0].get_metadata().get("out_sharding") or ()
            value = jnp.stack([v.get_value() for v in variables])
            if len(names) == value.ndim - 1:  # the layer axis is not sharded
                value = constrain(value, (None, *names))
            stacked.append(variables[0].replace(value=value))

        def body(x_BTD, variables):
            block = nnx.merge(graphdef, jax.tree.unflatten(var_treedef, variables))
            return block(x_BTD, positions_BT, mask_BTS, None, 0)[0], None

        if self.cfg.remat:
            # Inside a scan the recomputation cannot be merged with the forward pass, so the
            # CSE barrier is not needed (and would only restrict XLA, see `jax.checkpoint`).
            body = jax.checkpoint(body, prevent_cse=False, policy=remat_policy(self.cfg))
        x_BTD, _ = jax.lax.scan(body, x_BTD, stacked)
        return x_BTD

    def unembed(self, h_BTD: jax.Array) -> jax.Array:
        """Projects hidden states to vocabulary logits [B, T, V] in float32.

        The operands are in the compute dtype but the products accumulate in float32
        (`preferred_element_type`): logits rounded to bfloat16 would move top-token log-probs by
        up to ~0.1 nats, and the sampler and the trainer (both call this) would then disagree
        by rounding noise that the PPO clip acts on.
        """
        dt = self.cfg.jnp_dtype
        f32 = jnp.float32
        if self.cfg.tie_embeddings:
            w, spec = self.embed[...].astype(dt), "btd,vd->btv"
        else:
            w, spec = self.lm_head[...].astype(dt), "btd,dv->btv"
        return jnp.einsum(spec, h_BTD, w, preferred_element_type=f32).astype(f32)


def remat_policy(cfg: ModelConfig) -> Callable | None:
    """The `jax.checkpoint` policy of `cfg.remat_policy` (None: save nothing but the inputs)."""
    if cfg.remat_policy == "minimal":
        return jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    return None


# ----------------------------------------------------------------------------------------------
# Pure-function view used at jit boundaries.
# ----------------------------------------------------------------------------------------------


def init_model(cfg: ModelConfig, seed: int = 0) -> tuple[nnx.GraphDef, nnx.State]:
    """Builds a randomly initialised model and splits it into (graphdef, params)."""
    return nnx.split(Transformer(cfg, nnx.Rngs(params=seed)))


def abstract_model(cfg: ModelConfig) -> tuple[nnx.GraphDef, nnx.State]:
    """Shapes and dtypes of the parameters, without allocating them (for counts and sharding)."""
    return nnx.split(nnx.eval_shape(lambda: Transformer(cfg, nnx.Rngs(params=0))))


def with_config(graphdef: nnx.GraphDef, params: Any, **changes) -> nnx.GraphDef:
    """The same model's graph definition with `changes` to every module's `ModelConfig`.

    `params` (arrays, tracers or ShapeDtypeStructs) only serve to rebuild the module tree.
    """
    model = nnx.merge(graphdef, params)
    changed = False
    for _, module in nnx.iter_modules(model):
        cfg = getattr(module, "cfg", None)
        if isinstance(cfg, ModelConfig) and any(getattr(cfg, k) != v for k, v in changes.items()):
            module.cfg = cfg.replace(**changes)
            changed = True
    return nnx.graphdef(model) if changed else graphdef


def without_remat(graphdef: nnx.GraphDef, params: Any) -> nnx.GraphDef:
    """The same model's graph definition with `cfg.remat` off (parameters and scan_layers kept).

    Remat only matters where gradients are taken; the sampler's decode loop must not run
    `nnx.remat`, which refuses the loop body's parameters (they come from the enclosing trace).
    """
    return with_config(graphdef, params, remat=False)


def count_params(params: Any) -> int:
    return sum(int(x.size) for x in jax.tree.leaves(params))


def forward(graphdef, params, tokens_BT, positions_BT, mask_BTS, cache=None, cache_index=0):
    """Hidden states [B, T, D] and the new cache, as a pure function of `params`."""
    model = nnx.merge(graphdef, params)
    return model(tokens_BT, positions_BT, mask_BTS, cache, cache_index)


def logits_fn(graphdef, params, h_BTD):
    """Vocabulary logits [B, T, V] (float32) for hidden states, as a pure function of `params`."""
    return nnx.merge(graphdef, params).unembed(h_BTD)


def init_cache(cfg: ModelConfig, batch: int, length: int, dtype=None) -> KVCache:
    """A zeroed KV cache of `length` slots per row."""
    dtype = dtype or cfg.jnp_dtype
    shape = (batch, cfg.n_kv_heads, length, cfg.head_dim)
    return [
        {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)} for _ in range(cfg.n_layers)
    ]
