"""The decode copy of the weights: one compute-dtype copy laid out for a rollout.

Training keeps float32 master weights sharded over data × fsdp (and tensor). A decode step reads
every weight, so from those shards XLA must either move activations of every row between all
devices at every step, or gather the weights inside the decode program, where it may hoist the
gathers and casts out of the loop as a float32 replica plus a compute-dtype one that nothing
accounts for. Instead a rollout first lays out its own copy, as Tunix and verl hand their rollout
engines weights of their own: in the compute dtype, replicated over data × fsdp and split over
the tensor axis exactly as in training (heads, MLP width, vocabulary: Megatron-style tensor
parallelism). Each device then decodes its own rows (`row_sharding`) and the loop moves no
weights. The copy is made in one jitted program that casts each shard before gathering it, so
no float32 replica ever exists; it lives until the rollout drops it.

Per device it costs params × compute bytes / tensor (`tools/memory_estimate.py`, "decode").
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from memr1.models.config import ModelConfig

log = logging.getLogger(__name__)

ROW_AXES = ("data", "fsdp")  # mesh axes that hold different rows; weights are whole across them


def decode_dtype(cfg: ModelConfig) -> jnp.dtype:
    """The dtype of frozen and decode copies: the compute dtype, or the storage dtype when that
    is narrower (the model widens it inside each matmul, so narrower storage loses nothing)."""
    stored, compute = cfg.jnp_param_dtype, cfg.jnp_dtype
    return stored if stored.itemsize < compute.itemsize else compute


def decode_spec(spec: PartitionSpec) -> PartitionSpec:
    """`spec` without the row axes (data, fsdp): what stays split is the tensor axis."""
    out = []
    for entry in spec:
        axes = (entry,) if isinstance(entry, str) else tuple(entry or ())
        kept = tuple(a for a in axes if a not in ROW_AXES)
        out.append(kept[0] if len(kept) == 1 else (kept or None))
    return PartitionSpec(*out)


def _decode_sharding(sharding):
    if isinstance(sharding, NamedSharding):
        return NamedSharding(sharding.mesh, decode_spec(sharding.spec))
    return sharding  # a single-device array stays where it is


def _is_float(x) -> bool:
    return jnp.issubdtype(x.dtype, jnp.floating)


def rollout_params(params: Any, cfg: ModelConfig) -> Any:
    """The decode copy of `params` (the policy's float32, FSDP-sharded weights).

    Args:
      params: a parameter pytree whose arrays are placed on a mesh (or on one device).
      cfg: the model config; the copy is in `decode_dtype(cfg)`.
    Returns:
      The same tree in the decode dtype with `decode_spec` shardings. Where that is already
      the layout, `params` itself (no copy): the caller must not donate it during the rollout.
    """
    program = _program(params, cfg)
    if program is None:
        return params
    fn, leaves, treedef = program
    return jax.tree.unflatten(treedef, fn(leaves))


def lower_rollout_params(params: Any, cfg: ModelConfig) -> jax.stages.Lowered | None:
    """The program `rollout_params` runs, lowered (None when it would return `params` as is)."""
    program = _program(params, cfg)
    return None if program is None else program[0].lower(program[1])


def _program(params, cfg):
    dtype = decode_dtype(cfg)
    leaves, treedef = jax.tree.flatten(params)
    src = tuple(x.sharding for x in leaves)
    dst = tuple(_decode_sharding(s) for s in src)
    same = all(
        (not _is_float(x) or x.dtype == dtype) and s.is_equivalent_to(d, x.ndim)
        for x, s, d in zip(leaves, src, dst, strict=True)
    )
    if same:
        return None
    kinds = tuple(_is_float(x) for x in leaves)
    return _layout_fn(src, dst, kinds, jnp.dtype(dtype).name), leaves, treedef


@functools.lru_cache(maxsize=16)
def _layout_fn(src: tuple, dst: tuple, kinds: tuple, dtype: str):
    """One jitted program per (layout, dtype): cast every float shard, then place it."""

    def layout(leaves):
        out = []
        for x, sharding, is_float in zip(leaves, src, kinds, strict=True):
            if is_float:
                # Cast where the shard lives: the gather that follows moves compute-dtype bytes
                # and never builds a float32 replica.
                x = jax.lax.with_sharding_constraint(x.astype(dtype), sharding)
            out.append(x)
        return out

    return jax.jit(layout, out_shardings=list(dst))


def row_sharding(params: Any, rows: int) -> NamedSharding | None:
    """How a decode batch of `rows` prompts is split: over data × fsdp when `params` are a
    decode copy on a mesh with more than one such device and the prompts divide evenly; else
    None (every device decodes every row; logged once when only the division fails)."""
    leaves = jax.tree.leaves(params)
    first = leaves[0].sharding if leaves else None
    if not isinstance(first, NamedSharding):
        return None
    mesh = first.mesh
    if not set(ROW_AXES) <= set(mesh.axis_names):
        return None
    n = mesh.shape["data"] * mesh.shape["fsdp"]
    if n == 1:
        return None
    for x in leaves:
        spec = getattr(x.sharding, "spec", PartitionSpec())
        if decode_spec(spec) != spec:
            return None  # training shards: rows stay whole rather than gathering weights
    if rows % n:
        _warn_whole_rows(rows, n)
        return None
    return NamedSharding(mesh, PartitionSpec(ROW_AXES))


@functools.cache
def _warn_whole_rows(rows: int, devices: int) -> None:
    log.warning(
        "%d prompts per sampler call do not split over the %d data x fsdp devices: every device "
        "decodes every row (set agents.batch_size to a multiple of %d)",
        rows,
        devices,
        devices,
    )


def row_devices(params: Any) -> tuple[int, NamedSharding | None]:
    """(D, sharding): how many data × fsdp devices decode rows of their own from `params`, and
    the sharding that splits a leading axis of D slices over them (None and D = 1 when every
    device decodes every row: one device, or weights that are not a decode copy)."""
    leaves = jax.tree.leaves(params)
    first = leaves[0].sharding if leaves else None
    if not isinstance(first, NamedSharding) or not set(ROW_AXES) <= set(first.mesh.axis_names):
        return 1, None
    n = first.mesh.shape["data"] * first.mesh.shape["fsdp"]
    split = row_sharding(params, n)
    return (n, split) if split is not None else (1, None)
