"""The multi-host launch path, for real: two processes on this machine join one JAX runtime
through `mesh.maybe_initialize_distributed()` and train on a mesh that spans both, each feeding
its own rows; the losses and parameters equal one device's on all the rows."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from memr1.train import mesh, sft, state
from memr1.train.update import shard_batch
from tests.train import multiprocess_check as check
from tests.train import tiny

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_device() -> tuple[list[float], float]:
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[check.CFG])
    setup, s0 = state.create_train_state(m, check.CFG, check.OPTIM, seed=0)
    step = sft.make_sft_step(setup, sft.SFTConfig(n_micro=1, logprob_chunk=tiny.CHUNK))
    s, losses = s0, []
    for i in range(check.STEPS):
        s, metrics = step(s, shard_batch(setup, tiny.sft_batch(step=i)))
        losses.append(float(metrics["loss"]))
    leaves = [np.asarray(x) for x in jax.tree.leaves(s.params)]
    return losses, float(sum(np.abs(x).sum() for x in leaves))


@pytest.mark.slow
def test_two_processes_train_like_one_device():
    port = _free_port()
    procs = []
    for pid in range(2):
        env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
        env.update(
            XLA_FLAGS="--xla_force_host_platform_device_count=2",
            JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
            JAX_NUM_PROCESSES="2",
            JAX_PROCESS_ID=str(pid),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.train.multiprocess_check"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=600)[0])
    finally:
        for p in procs:
            p.kill()
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"a process failed:\n{out[-4000:]}"
    line = next(x for x in outs[0].splitlines() if x.startswith("MULTIPROCESS_OK "))
    report = json.loads(line.removeprefix("MULTIPROCESS_OK "))
    losses, checksum = _one_device()
    np.testing.assert_allclose(report["losses"], losses, rtol=1e-5)
    assert report["losses"][1] != report["losses"][0]  # the first update changed the weights
    assert report["param_abs_sum"] == pytest.approx(checksum, rel=1e-5)
