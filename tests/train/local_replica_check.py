"""Run as a script by test_multihost.py: on 8 fake CPU devices, the decode of a process-local
replica splits the process's rows over its devices, as the single-process decode copy does.

On one process `multihost.local_replica` returns its input unchanged, so this script makes the
runtime report two processes (`jax.process_count` patched around the replica calls only): the
replica then takes the multi-host path, gathering the sharded leaves and re-wrapping every leaf
over this process's 8 devices, exactly what each process of a pod does with its own devices.
Checked, for a float32-master / bfloat16-compute model laid out over fsdp = 8:
- per-device compiled sampler FLOPs and temporary bytes (the KV cache) on the policy's
  rollout replica (`rollout_replica`) and on a frozen copy's replica (`local_replica`, the
  manager stage's answerer) equal those of the single-process decode copy (`rollout_params`);
- tokens and log-probs decoded from the replicas equal the decode copy's (float32 compute).
Prints one JSON line of measurements on success; an assertion fails otherwise.
"""

from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import contextlib
import json
from unittest import mock

import jax
import numpy as np

from memr1.models.config import get_size
from memr1.sampling import Sampler
from memr1.sampling.layout import rollout_params, row_sharding
from memr1.train import mesh, multihost, state
from tests.train import tiny

CFG = get_size(
    "tiny",
    vocab_size=264,
    d_model=136,
    n_layers=2,
    n_heads=4,
    head_dim=40,
    d_ff=344,
    tie_embeddings=False,
    max_position=512,
    dtype="bfloat16",
)
# The case: 8 prompts x G = 4 on a host of 8 devices.
PROMPTS = [[5, 17, 3, 9], [9, 1, 44, 2, 71, 30], [33, 2], [8, 8, 8], [1, 2, 3], [4], [7, 6], [2]]
G, NEW = 4, 8


@contextlib.contextmanager
def two_processes():
    """The runtime as one of two processes would see it (its own 8 devices all addressable)."""
    with mock.patch.object(jax, "process_count", lambda *a, **k: 2):
        yield


def per_device_cost(sampler, params) -> dict:
    """Compiled per-device FLOPs and temporary bytes (the KV cache, mostly) of one sampler
    call, and the rows each device decodes."""
    kw = dict(key=jax.random.key(0), max_new_tokens=NEW, num_samples=G, eos_ids=[3])
    compiled = sampler.lower(params, PROMPTS, **kw).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    split = row_sharding(params, len(PROMPTS))
    rows = len(PROMPTS) * G // (1 if split is None else split.mesh.devices.size)
    temp = int(compiled.memory_analysis().temp_size_in_bytes)
    return {"flops": float(cost["flops"]), "temp_bytes": temp, "rows_per_device": rows}


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    m = mesh.build_mesh(1, 8, 1, model_cfgs=[CFG])
    setup, s0 = state.create_train_state(m, CFG, tiny.optim(), seed=0)
    sampler = Sampler(CFG, setup.graphdef)
    copy = rollout_params(s0.params, CFG)  # the single-process decode copy
    with two_processes():
        policy = multihost.rollout_replica(s0.params, CFG)
        frozen = multihost.local_replica(copy)
    assert all(x.is_fully_addressable for x in jax.tree.leaves(policy))
    report = {
        name: per_device_cost(sampler, params)
        for name, params in (("decode_copy", copy), ("rollout_replica", policy), ("local", frozen))
    }
    for name in ("rollout_replica", "local"):
        assert report[name] == report["decode_copy"], report
    assert report["decode_copy"]["rows_per_device"] == len(PROMPTS) * G // 8, report

    # The same tokens and log-probs from the replicas as from the decode copy.
    cfg = CFG.replace(dtype="float32")
    f32 = Sampler(cfg, setup.graphdef)
    kw = dict(key=jax.random.key(1), max_new_tokens=NEW, num_samples=G, temperature=1.0)
    ref = f32.generate(rollout_params(s0.params, cfg), PROMPTS, **kw)
    with two_processes():
        replica = multihost.rollout_replica(s0.params, cfg)
    out = f32.generate(replica, PROMPTS, **kw)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
    diff = float(np.abs(np.asarray(out.logprobs) - np.asarray(ref.logprobs)).max())
    assert diff < 1e-5, diff
    report["logprob_max_diff"] = diff
    print("LOCAL_REPLICA_OK " + json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
