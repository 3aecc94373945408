"""Run as one of two processes by test_multiprocess.py: the multi-host path on one machine.

Each process owns 2 fake CPU devices (the launcher sets XLA_FLAGS). The trainer's own call,
`mesh.maybe_initialize_distributed()`, reads JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
JAX_PROCESS_ID from the environment and joins the two into one runtime of 4 devices. The state
is created sharded over a data=2 x fsdp=2 mesh spanning both processes, each process hands
`update.shard_batch` its own half of the rows, and two SFT updates run. Process 0 prints the
losses and a parameter checksum as one JSON line; the test compares them with the same steps on
one device.
"""

from __future__ import annotations

import json

import jax
import numpy as np
from jax.experimental import multihost_utils

from memr1.train import mesh, sft, state
from memr1.train.update import shard_batch
from tests.train import tiny

CFG = tiny.CFG.replace(n_layers=2)
OPTIM = state.OptimConfig(lr=1e-2, warmup_steps=0)
STEPS = 2


def run(setup, s, rows: slice) -> tuple[list[float], float]:
    """STEPS SFT updates on `rows` of each step's batch; the losses and sum |params|."""
    step = sft.make_sft_step(setup, sft.SFTConfig(n_micro=1, logprob_chunk=tiny.CHUNK))
    losses = []
    for i in range(STEPS):
        batch = {k: v[rows] for k, v in tiny.sft_batch(step=i).items()}
        s, metrics = step(s, shard_batch(setup, batch))
        losses.append(float(metrics["loss"]))
    leaves = multihost_utils.process_allgather(s.params, tiled=True)
    return losses, float(sum(np.abs(np.asarray(x)).sum() for x in jax.tree.leaves(leaves)))


def main() -> None:
    assert mesh.maybe_initialize_distributed(), "the launcher's environment was not recognised"
    assert jax.process_count() == 2 and jax.device_count() == 4, jax.devices()
    assert jax.local_device_count() == 2
    m = mesh.build_mesh(2, 2, 1, model_cfgs=[CFG])
    setup, s0 = state.create_train_state(m, CFG, OPTIM, seed=0)
    half = tiny.ROWS // 2
    mine = slice(jax.process_index() * half, (jax.process_index() + 1) * half)
    losses, checksum = run(setup, s0, mine)
    if jax.process_index() == 0:
        print("MULTIPROCESS_OK " + json.dumps({"losses": losses, "param_abs_sum": checksum}))


if __name__ == "__main__":
    main()
