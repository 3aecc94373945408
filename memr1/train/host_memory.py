"""Arrays moved into their devices' host memory space: what an asynchronous checkpoint save
writes from (`memr1.train.checkpoint`), so that the device keeps nothing for it while the next,
donating step runs."""

from __future__ import annotations

import logging
from typing import Any

import jax

HOST_MEMORY = "pinned_host"  # the memory space an asynchronous save's copy lives in


def has_host_memory() -> bool:
    """Whether every local device has a `HOST_MEMORY` space (CPU, GPU and TPU backends do)."""
    return all(
        any(m.kind == HOST_MEMORY for m in d.addressable_memories()) for d in jax.local_devices()
    )


def host_copy(tree: Any) -> Any:
    """A copy of `tree`'s arrays in their devices' host memory (`HOST_MEMORY`), each in its own
    sharding, complete when this returns: what an asynchronous save writes from, so that the
    device arrays are free for the next (donating) step. It takes no device memory: each shard
    moves straight into host memory. Leaves that are not jax arrays, or already in host memory,
    are kept as they are. On a backend without that memory space the tree is returned as it is
    (Orbax then copies to the host itself) and a warning says so."""
    if not has_host_memory():
        logging.warning(
            "checkpoint: the devices have no %r memory; an asynchronous save writes from "
            "Orbax's own host transfer, which may keep the saved arrays on the device",
            HOST_MEMORY,
        )
        return tree

    def target(x):
        if not isinstance(x, jax.Array) or x.sharding.memory_kind == HOST_MEMORY:
            return None
        return x.sharding.with_memory_kind(HOST_MEMORY)

    leaves, treedef = jax.tree.flatten(tree)
    moves = [(i, x, target(x)) for i, x in enumerate(leaves)]
    moves = [(i, x, s) for i, x, s in moves if s is not None]
    if moves:
        idx, arrays, shardings = zip(*moves, strict=True)
        copies = jax.block_until_ready(jax.device_put(list(arrays), list(shardings)))
        for i, copy in zip(idx, copies, strict=True):
            leaves[i] = copy
    return jax.tree.unflatten(treedef, leaves)
