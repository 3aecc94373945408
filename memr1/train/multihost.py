"""What an RL step needs when it spans several processes (multi-host training).

Every process runs the same loop and computes the same step's states (`loop.batch_indices` is a
pure function of seed and step). Process p then samples and scores only its contiguous slice of
them (`process_slice`), whole states, so every GRPO group lies within one process; its rows are
the rows its devices hold of the global batch that `update.shard_batch` stitches together.

Sampling is process-local: each process decodes its own prompts with its own copy of the weights
(`local_replica`) and a key of its own (`process_key`). No process waits on another inside the
decode loop, and processes may make different numbers of sampler calls (the manager stage's
frozen answerer is asked as many questions as each state links). What needs every process's
values goes through `gather` (a collective: every process calls it at the same point of the
step): a prompt width common to all (a global array has one shape), group choices made over the
whole step's batch (`gather_rows`), and the step's logged metrics (`mean_over_processes`).

On one process every function here is the identity or a plain computation: no collective runs
and a single-host run is unchanged.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from memr1.sampling.layout import rollout_params
from memr1.sharding import MESH_AXES


def process_slice(
    n: int, what: str = "rows", *, index: int | None = None, count: int | None = None
) -> slice:
    """This process's contiguous share [p·n/P, (p+1)·n/P) of n states or rows.

    Args:
      n: how many states (or rows) the whole step has.
      what: names them in the error message.
      index, count: the process index and count (default: this runtime's).
    Raises:
      ValueError: if n does not split evenly over the processes.
    """
    index = jax.process_index() if index is None else index
    count = jax.process_count() if count is None else count
    if n % count:
        raise ValueError(f"{what}: {n} do not split evenly over {count} processes")
    size = n // count
    return slice(index * size, (index + 1) * size)


def check_batch_axes(mesh: Mesh) -> None:
    """Refuses a mesh whose batch axes (data × fsdp) do not give every process its own rows.

    A process feeds `shard_batch` the rows of its own devices; when the tensor axis spans
    processes, two processes hold the same rows and a process-local rollout cannot fill them.
    """
    batch_devices = mesh.shape["data"] * mesh.shape["fsdp"]
    if batch_devices % jax.process_count():
        raise ValueError(
            f"mesh data×fsdp = {batch_devices} devices cannot split the batch over "
            f"{jax.process_count()} processes; keep the tensor axis within a host"
        )


def process_key(key: jax.Array) -> jax.Array:
    """This process's sampling key: `key` itself on one process, else fold_in(key, p).

    Processes that decode different prompts with the same key draw the same noise, which
    correlates their samples. The folded key is also placed on the host, not on the devices of
    every process as a key of the train state is, so that it can enter a process-local sampler.
    """
    if jax.process_count() == 1:
        return key
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        data = np.asarray(jax.random.key_data(key))
        host = jax.random.wrap_key_data(data, impl=jax.random.key_impl(key))
    else:  # a raw uint32 key (jax.random.PRNGKey), as the train state holds
        host = np.asarray(key)
    return jax.random.fold_in(host, jax.process_index())


def local_replica(tree: Any) -> Any:
    """The arrays of `tree` whole on every device of this process, as process-local arrays.

    One process: `tree` itself. Several: sharded leaves are all-gathered once (a collective on
    the whole mesh, so every process calls this at the same point) and every leaf is then
    re-wrapped over this process's devices, so that a sampler fed with the result runs on this
    process alone. Those devices form a mesh of the training axes with all of them on fsdp
    (1 × n × 1), so the sampler splits its rows over them (`memr1.sampling.layout.row_sharding`
    finds the row axes): each device decodes its share of the process's rows. A leaf that is
    already replicated is wrapped without a copy: the result shares its buffers, so the source
    must stay alive (not donated) while the result is used. Memory: one whole copy of the
    weights per device, in their stored dtype; pass a compute-dtype copy of them to halve it.
    """
    if jax.process_count() == 1:
        return tree
    leaves, treedef = jax.tree.flatten(tree)
    sharded = [i for i, x in enumerate(leaves) if not x.sharding.is_fully_replicated]
    if sharded:
        mesh = leaves[sharded[0]].sharding.mesh
        gathered = _replicate(mesh)([leaves[i] for i in sharded])
        for i, x in zip(sharded, gathered, strict=True):
            leaves[i] = x
    return jax.tree.unflatten(treedef, [_wrap_local(x) for x in leaves])


def rollout_replica(params: Any, cfg) -> Any:
    """What a process samples its rollout with: the policy's own `params` on one process (the
    sampler lays out its compute-dtype decode copy per call and frees it on return, so in the
    manager stage the policy's and the frozen answerer's copies never coexist); on several, a
    process-local replica of the compute-dtype decode copy, so no process gathers float32
    weights. `cfg` is the model config (`memr1.sampling.layout.rollout_params`)."""
    if jax.process_count() == 1:
        return params
    return local_replica(rollout_params(params, cfg))


@functools.lru_cache(maxsize=8)
def _replicate(mesh: Mesh):
    return jax.jit(lambda xs: xs, out_shardings=NamedSharding(mesh, PartitionSpec()))


def _wrap_local(x: jax.Array) -> jax.Array:
    shards = x.addressable_shards
    devices = tuple(s.device for s in shards)
    return jax.make_array_from_single_device_arrays(
        x.shape, _local_sharding(devices), [s.data for s in shards]
    )


@functools.lru_cache(maxsize=8)
def _local_sharding(devices: tuple) -> NamedSharding:
    """Whole on each of this process's devices, on a mesh with the training axes (data, fsdp,
    tensor) = (1, n, 1): a mesh of one "local" axis has no row axes, and every device then
    decoded all of the process's rows (8x the FLOPs and KV cache on a host of 8)."""
    grid = np.asarray(devices, dtype=object).reshape(1, len(devices), 1)
    return NamedSharding(Mesh(grid, MESH_AXES), PartitionSpec())


def gather(value: Any) -> list[Any]:
    """Every process's `value` (JSON-serialisable), in process order; a collective."""
    if jax.process_count() == 1:
        return [value]
    data = np.frombuffer(json.dumps(value).encode(), np.uint8)
    longest = int(np.max(multihost_utils.process_allgather(np.int32(len(data)))))
    width = 1 << max(0, longest - 1).bit_length()  # a few padded widths: few compiled gathers
    padded = np.zeros(width, np.uint8)
    padded[: len(data)] = data
    rows = np.asarray(multihost_utils.process_allgather(padded))
    return [json.loads(bytes(row).rstrip(b"\0")) for row in rows]


def gather_rows(batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The whole step's batch: every process's rows, concatenated in process order."""
    if jax.process_count() == 1:
        return dict(batch)
    out = multihost_utils.process_allgather(dict(batch), tiled=True)
    return {k: np.asarray(v) for k, v in out.items()}


def merge_stats(per_process: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """One step's metrics from every process's: their mean, the slowest `time_*` value.

    Each process's metrics are means over its own rows, and every process has equally many, so
    their mean is the mean over all rows. A metric a process lacks (an operation kind its
    samples never produced) counts as 0 there. Timings are the slowest process's: the step
    waits for it.
    """
    names = sorted({k for stats in per_process for k in stats})
    out = {}
    for k in names:
        values = [float(stats.get(k, 0.0)) for stats in per_process]
        out[k] = max(values) if k.startswith("time_") else float(np.mean(values))
    return out


def mean_over_processes(stats: Mapping[str, float]) -> dict[str, float]:
    """`merge_stats` of every process's `stats` (a collective; `stats` itself on one process)."""
    if jax.process_count() == 1:
        return dict(stats)
    return merge_stats(gather({k: float(v) for k, v in stats.items()}))
