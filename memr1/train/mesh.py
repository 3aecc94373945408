"""The device mesh (data × fsdp × tensor), checked against the model before any compute.

Every array of the trainer is placed by logical axis names (see `memr1.sharding`); this module
decides how many devices each mesh axis gets. A wrong mesh would otherwise surface as an XLA
error deep inside the first compile (or, worse, as a silently replicated parameter), so
`build_mesh` checks the sizes against the device count and the model's dimensions first and
raises a ValueError that says which dimension does not divide.

Multi-host runs must call `maybe_initialize_distributed()` before anything touches
`jax.devices()`; on a single host it does nothing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

from memr1.models.config import ModelConfig
from memr1.sharding import MESH_AXES


def resolve_mesh_shape(data: int, fsdp: int, tensor: int, n_devices: int) -> tuple[int, int, int]:
    """Returns concrete (data, fsdp, tensor) sizes; at most one of them may be -1 (the rest).

    Raises:
      ValueError: if a size is not positive (or -1), more than one is -1, or the product does not
        equal `n_devices`.
    """
    sizes = {"data": int(data), "fsdp": int(fsdp), "tensor": int(tensor)}
    for name, size in sizes.items():
        if size == 0 or size < -1:
            raise ValueError(f"mesh.{name}={size}: a mesh axis size is a positive int or -1")
    free = [name for name, size in sizes.items() if size == -1]
    if len(free) > 1:
        raise ValueError(f"mesh axes {free} are all -1; at most one axis may take the rest")
    fixed = math.prod(size for size in sizes.values() if size != -1)
    if free:
        if n_devices % fixed:
            raise ValueError(
                f"mesh {sizes}: the fixed axes use {fixed} devices, which does not divide the "
                f"{n_devices} available devices"
            )
        sizes[free[0]] = n_devices // fixed
    if math.prod(sizes.values()) != n_devices:
        raise ValueError(
            f"mesh {sizes} needs {math.prod(sizes.values())} devices but {n_devices} are "
            f"available; the product of data × fsdp × tensor must equal the device count"
        )
    return sizes["data"], sizes["fsdp"], sizes["tensor"]


def check_model_fits_mesh(cfg: ModelConfig, data: int, fsdp: int, tensor: int) -> None:
    """Raises a ValueError naming the model dimension that a mesh axis does not divide.

    The tensor axis splits attention heads, key/value heads, the feed-forward width and the
    vocabulary (see `memr1.sharding.DEFAULT_RULES`); the fsdp axis splits the model dimension.
    """
    problems = []
    for field in ("n_heads", "n_kv_heads", "d_ff", "vocab_size"):
        value = getattr(cfg, field)
        if value % tensor:
            problems.append(f"tensor={tensor} does not divide {field}={value}")
    if cfg.d_model % fsdp:
        problems.append(f"fsdp={fsdp} does not divide d_model={cfg.d_model}")
    if problems:
        raise ValueError(
            f"mesh (data={data}, fsdp={fsdp}, tensor={tensor}) does not fit the "
            f"{cfg.family} model: " + "; ".join(problems)
        )


def build_mesh(
    data: int = 1,
    fsdp: int = -1,
    tensor: int = 1,
    *,
    model_cfgs: Sequence[ModelConfig] = (),
    devices: Sequence[jax.Device] | None = None,
) -> Mesh:
    """A named mesh over (data, fsdp, tensor), validated before any compute.

    Args:
      data, fsdp, tensor: axis sizes; one may be -1 to take the devices left over.
      model_cfgs: the models to be sharded on this mesh (policy, critic); each is checked.
      devices: defaults to all devices of all processes.
    Returns:
      A Mesh with Auto axis types: the compiler propagates shardings from the step's explicit
      in/out shardings and the model's `constrain` calls (the model is not written for the
      Explicit "sharding in types" mode, which `jax.make_mesh` defaults to at this JAX version).
    """
    devices = list(jax.devices() if devices is None else devices)
    shape = resolve_mesh_shape(data, fsdp, tensor, len(devices))
    for cfg in model_cfgs:
        check_model_fits_mesh(cfg, *shape)
    axis_types = (AxisType.Auto,) * len(MESH_AXES)
    if len(devices) == len(jax.devices()):
        # make_mesh orders devices by the physical topology (ICI rings on TPU, NVLink on GPU).
        return jax.make_mesh(shape, MESH_AXES, axis_types, devices=devices)
    return Mesh(np.asarray(devices).reshape(shape), MESH_AXES, axis_types)


def mesh_from_config(mesh_cfg: Mapping, model_cfgs: Sequence[ModelConfig] = ()) -> Mesh:
    """`build_mesh` from a config section with fields data / fsdp / tensor."""
    return build_mesh(
        int(mesh_cfg["data"]),
        int(mesh_cfg["fsdp"]),
        int(mesh_cfg["tensor"]),
        model_cfgs=model_cfgs,
    )


def batch_divisor(mesh: Mesh) -> int:
    """Rows of a batch must be a multiple of this: the batch dimension spans data × fsdp."""
    return mesh.shape["data"] * mesh.shape["fsdp"]


def micro_batch_count(rows: int, *, group: int, micro_rows: int, shards: int) -> int:
    """How many micro-batches split `rows` rows into `micro_rows` rows per data x fsdp shard.

    A micro-batch must spread evenly over the `shards` and hold whole groups of `group` rows
    (pass 1 where rows are independent, packed GRPO rows included: there a row is a group): its
    size is the least common multiple of `micro_rows * shards` and `group`.

    Raises:
      ValueError: naming the numbers, when the rows do not split into such micro-batches.
    """
    for name, value in (("rows", rows), ("group", group), ("micro_rows", micro_rows)):
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"{name}={value!r}: must be an integer >= 1")
    size = math.lcm(micro_rows * shards, group)
    if rows % size:
        raise ValueError(
            f"{rows} rows do not split into micro-batches of {micro_rows} rows on each of "
            f"{shards} data x fsdp shards holding whole groups of {group} ({size} rows each)"
        )
    return rows // size


def resolve_micro_batches(config) -> None:
    """Sets `train.n_micro` from `train.micro_rows` and the mesh (when micro_rows > 0)."""
    t = config.train
    if t.micro_rows == 0:
        return
    if t.n_micro != 1:
        raise ValueError(
            f"config train.n_micro={t.n_micro} and train.micro_rows={t.micro_rows} both size "
            "the micro-batches: set one of them"
        )
    data, fsdp, _ = resolve_mesh_shape(
        config.mesh.data, config.mesh.fsdp, config.mesh.tensor, jax.device_count()
    )
    # Packed GRPO (train.shared_prompt): one row a group, so micro_rows counts packed groups.
    packed = config.algo == "grpo" and t.shared_prompt
    rows = t.batch_size * (t.group_size if config.algo != "sft" and not packed else 1)
    t.n_micro = micro_batch_count(rows, group=1, micro_rows=t.micro_rows, shards=data * fsdp)


# ----------------------------------------------------------------------------------------------
# Multi-host start-up.
# ----------------------------------------------------------------------------------------------


def _cluster_kind(env: Mapping[str, str]) -> str | None:
    """Which multi-process launcher set up this process, or None for a single process."""
    if env.get("JAX_COORDINATOR_ADDRESS") and int(env.get("JAX_NUM_PROCESSES", "1")) > 1:
        return "explicit"
    if "SLURM_JOB_ID" in env and int(env.get("SLURM_NTASKS", "1")) > 1:
        return "slurm"
    if "OMPI_MCA_orte_hnp_uri" in env and int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1:
        return "openmpi"
    if len([h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]) > 1:
        return "tpu_pod"
    return None


def maybe_initialize_distributed(
    env: Mapping[str, str] | None = None,
    initialize: Callable[..., None] | None = None,
) -> bool:
    """Calls `jax.distributed.initialize()` when launched as one of several processes.

    Recognised launchers (by their environment variables):
      explicit  JAX_COORDINATOR_ADDRESS=host:port with JAX_NUM_PROCESSES > 1 and JAX_PROCESS_ID
                (optionally JAX_LOCAL_DEVICE_IDS); the values are passed on explicitly.
      slurm     SLURM_JOB_ID with SLURM_NTASKS > 1 (srun also sets SLURM_STEP_NODELIST,
                SLURM_PROCID and SLURM_LOCALID, which JAX's own detection reads).
      openmpi   OMPI_MCA_orte_hnp_uri with OMPI_COMM_WORLD_SIZE > 1 (mpirun).
      tpu_pod   TPU_WORKER_HOSTNAMES listing more than one host (multi-host Cloud TPU).
    Otherwise (one process) nothing happens. Must run before the first `jax.devices()` call.

    Args:
      env: the environment to inspect (defaults to os.environ).
      initialize: the function to call (defaults to jax.distributed.initialize; tests pass a fake).
    Returns:
      True if the distributed runtime was initialised by this call.
    """
    env = os.environ if env is None else env
    initialize = jax.distributed.initialize if initialize is None else initialize
    kind = _cluster_kind(env)
    if kind is None or jax.distributed.is_initialized():
        return False
    if kind == "explicit":
        if "JAX_PROCESS_ID" not in env:
            raise ValueError(
                "JAX_COORDINATOR_ADDRESS and JAX_NUM_PROCESSES are set but JAX_PROCESS_ID is not; "
                "each process needs its own id in [0, JAX_NUM_PROCESSES)"
            )
        initialize(
            coordinator_address=env["JAX_COORDINATOR_ADDRESS"],
            num_processes=int(env["JAX_NUM_PROCESSES"]),
            process_id=int(env["JAX_PROCESS_ID"]),
        )
    else:
        # JAX detects the coordinator, process count and ids of these launchers itself.
        initialize()
    return True
