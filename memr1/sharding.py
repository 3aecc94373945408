"""Logical axis names and their mapping onto a device mesh.

Parameters carry logical axis names as metadata (``out_sharding``) and key activations pass
through `constrain`. Both are mapped to mesh axes (data × fsdp × tensor) by a rule table, so a
model is written once and sharded by configuration. Outside a `use_mesh` context `constrain` is a
no-op, which keeps single-device code (tests, the CPU demo, sampling) free of sharding concerns.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

MESH_AXES = ("data", "fsdp", "tensor")

# Logical name -> mesh axis (or a tuple of mesh axes, or None for replicated).
DEFAULT_RULES: tuple[tuple[str, str | tuple[str, ...] | None], ...] = (
    ("batch", ("data", "fsdp")),
    ("length", None),
    ("cache_length", None),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("mlp", "tensor"),
    ("q_heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("norm", None),
)

_ACTIVE: contextvars.ContextVar[tuple[Mesh, dict] | None] = contextvars.ContextVar(
    "memr1_mesh", default=None
)


def logical_to_spec(names: Sequence[str | None], rules=DEFAULT_RULES) -> PartitionSpec:
    """Maps logical axis names to a PartitionSpec; unknown or None names are replicated."""
    table = dict(rules)
    used: set[str] = set()
    out = []
    for name in names:
        axis = table.get(name) if name is not None else None
        # A mesh axis may shard only one dimension of an array; later uses are dropped.
        axes = (axis,) if isinstance(axis, str) else tuple(axis or ())
        axes = tuple(a for a in axes if a not in used)
        used.update(axes)
        out.append(axes[0] if len(axes) == 1 else (axes or None))
    return PartitionSpec(*out)


@contextlib.contextmanager
def use_mesh(mesh: Mesh, rules=DEFAULT_RULES) -> Iterator[None]:
    """Activates activation sharding constraints for code traced inside this context."""
    token = _ACTIVE.set((mesh, tuple(rules)))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_mesh() -> Mesh | None:
    """The mesh of the enclosing `use_mesh` context, or None outside one."""
    active = _ACTIVE.get()
    return None if active is None else active[0]


def active_rules() -> tuple:
    """The logical-to-mesh rules of the enclosing `use_mesh` context (the defaults outside)."""
    active = _ACTIVE.get()
    return DEFAULT_RULES if active is None else active[1]


def constrain(x: jax.Array, names: Sequence[str | None]) -> jax.Array:
    """Constrains an activation's sharding by logical names (no-op without an active mesh)."""
    active = _ACTIVE.get()
    if active is None:
        return x
    mesh, rules = active
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, logical_to_spec(names, rules)))
