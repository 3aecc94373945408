"""The multi-host launch path, for real: two processes on this machine join one JAX runtime
through `mesh.maybe_initialize_distributed()` and run the trainer's own loops on a mesh that
spans both (tests/train/multiprocess_check.py). Each process feeds only its own rows: SFT and
both RL stages end with the parameters of the same loops on one device over all the rows, the
RL processes roll out disjoint slices of each step's states, and one metrics file is written."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from memr1.models.tokenizer import load_tokenizer
from memr1.train import loop, mesh, state
from memr1.train.checkpoint import Checkpointer
from memr1.train.metrics_log import read_jsonl
from tests.fake_devices import xla_flags
from tests.train import multiprocess_check as check
from tests.train import multiprocess_rl as rl

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# Metrics that the two-process run and the one-device reference must agree on.
SAME = (
    "loss",
    "grad_norm",
    "n_tokens",
    "reward",
    "reward_mean",
    "zero_signal_frac",
    "response_length",
    "signal_groups_frac",
    "kept_groups_frac",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> Path:
    """Runs multiprocess_check in two processes; returns their output directory."""
    out = tmp_path_factory.mktemp("multiprocess")
    rl.make_tokenizer(out / "tokenizer")
    port = _free_port()
    procs = []
    for pid in range(2):
        env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
        env.update(
            XLA_FLAGS=xla_flags(2),
            JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
            JAX_NUM_PROCESSES="2",
            JAX_PROCESS_ID=str(pid),
        )
        command = [sys.executable, "-m", "tests.train.multiprocess_check", out, out / "tokenizer"]
        procs.append(
            subprocess.Popen(
                list(map(str, command)),
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
            outs.append(p.communicate(timeout=1500)[0])
    finally:
        for p in procs:
            p.kill()
    for p, text in zip(procs, outs, strict=True):
        assert p.returncode == 0, f"a process failed:\n{text[-4000:]}"
    return out


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _assert_same_run(two: Path, one: Path, params_two: list, params_one: list, first: list):
    """Equal logged metrics (one record per step: process 0 alone writes) and parameters, and
    the parameters moved."""
    records, reference = read_jsonl(two / "metrics.jsonl"), read_jsonl(one / "metrics.jsonl")
    assert [r["step"] for r in records] == [r["step"] for r in reference] == [0, 1]
    for got, want in zip(records, reference, strict=True):
        for name in SAME:
            key = f"train/{name}"
            assert (key in got) == (key in want), key
            if key in want:
                assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), (key, got, want)
    for got, want in zip(params_two, params_one, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    moved = max(float(np.abs(a - b).max()) for a, b in zip(params_one, first, strict=True))
    assert moved > 1e-3, moved


@pytest.mark.slow
def test_two_processes_train_sft_like_one_device(two_processes, tmp_path):
    setup, s0 = state.create_train_state(
        mesh.build_mesh(1, 1, 1, model_cfgs=[check.CFG]), check.CFG, check.OPTIM, seed=0
    )
    first = _leaves(s0.params)
    final = check.run_sft(setup, s0, tmp_path)
    two = rl.load_params(two_processes / "sft-params.npz")
    _assert_same_run(two_processes / "sft", tmp_path, two, _leaves(final.params), first)


@pytest.mark.slow
@pytest.mark.parametrize("stage", rl.STAGES)
def test_two_processes_roll_out_their_own_states_and_update_like_one_device(
    two_processes, stage, tmp_path
):
    records = [json.loads((two_processes / f"{stage}-p{p}.json").read_text()) for p in (0, 1)]
    cfg = rl.LOOPS[stage]
    per_step = cfg.batch_size * cfg.oversample
    for step in range(cfg.steps):
        # The step's states are one pure function of (seed, step); each process drew its half.
        idx = loop.batch_indices(len(rl.STATES[stage]), per_step, step, cfg.seed).tolist()
        drawn = [records[p][step]["states"] for p in (0, 1)]
        assert drawn == [idx[: per_step // 2], idx[per_step // 2 :]]
        assert not set(drawn[0]) & set(drawn[1])
    # One device updates on the rows both processes sampled, through the same loop.
    tok = load_tokenizer(str(two_processes / "tokenizer"))
    model_cfg = rl.model_config(tok)
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[model_cfg])
    setup, s0 = state.create_train_state(m, model_cfg, rl.OPTIM, seed=3)
    first = _leaves(s0.params)
    replay = rl.replay(stage, records)
    final = rl.run_stage(stage, setup, s0, replay, tmp_path, pad_id=tok.pad_token_id)
    two = rl.load_params(two_processes / f"{stage}-params.npz")
    _assert_same_run(
        two_processes / stage / "logs", tmp_path / "logs", two, _leaves(final.params), first
    )
    # The processes sampled with the weights being trained (step 1: after the first update).
    for r in read_jsonl(two_processes / stage / "logs" / "metrics.jsonl"):
        assert r["train/logprob_gap_abs"] < 1e-5, r
    if stage == "manager":  # both processes wrote their shards of one checkpoint
        with Checkpointer(two_processes / stage / "ckpt") as ckpt:
            assert ckpt.all_steps() == [cfg.steps]
            saved = ckpt.restore_params(setup.abstract_state.params)
        for got, want in zip(_leaves(saved), two, strict=True):
            np.testing.assert_array_equal(got, want)
