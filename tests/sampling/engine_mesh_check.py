"""Run as a script by test_engine_mesh.py: the rollout engine on 8 fake CPU devices.

XLA reads its flags once, when the backend starts, so this runs in its own process with the
device count set before JAX is imported. It exits non-zero (an assertion) on any failed check
and prints one JSON line of measurements on success.

What is checked, for the decode copy of a model (`rollout_params`):
- the engine's replies on three meshes (fsdp 8; fsdp 4 × tensor 2; data 2 × fsdp 2 × tensor 2)
  equal one device's (float32, sampled: tokens equal, log-probs within 1e-5), with more rows
  than slots, so slots refill on every device; with the Pallas kernel (interpreted, in a
  shard_map over the row devices) on fsdp 8 too, and refused with a tensor axis;
- the compiled round moves no weight inside its decode loop and gathers none, and each device's
  loop carries only its own slice of the page pool (a leading D axis of 1 a device).
"""

from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import json

import jax
import numpy as np
from jax.sharding import NamedSharding

from memr1.models.config import get_size
from memr1.sampling.engine import Engine, EngineSettings
from memr1.sampling.layout import decode_dtype, decode_spec, rollout_params, row_devices
from memr1.train import mesh, state
from tests.sampling.hlo_text import Module, elements
from tests.train import tiny

# layout_check.py's model: no activation of the programs has a weight's element count.
CFG = get_size("tiny", vocab_size=264, d_model=136, n_layers=2, n_heads=4, head_dim=40,
               d_ff=344, tie_embeddings=False, max_position=512, dtype="bfloat16")  # fmt: skip

PROMPTS = [[5, 17, 3, 9], [9, 1, 44, 2, 71, 30], [33, 2], [8, 8, 8], [1, 2, 3], [4], [7, 6], [2],
           [11, 12, 13, 14, 15], [6, 5], [3, 3, 3, 3], [19, 18, 17]]  # fmt: skip
G, NEW = 2, 8
SETTINGS = EngineSettings(page_size=4, round_steps=3)
PALLAS = EngineSettings(page_size=4, round_steps=3, attention="pallas")


def weight_sizes(abstract) -> set[int]:
    """Element counts of every weight matrix, whole and as one device's shard."""
    out = set()
    for x in jax.tree.leaves(abstract):
        if x.ndim >= 2 and CFG.d_model in x.shape:
            out |= {elements(x.shape), elements(x.sharding.shard_shape(x.shape))}
    return out


def decode_copy(x: jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
    """What `rollout_params` makes of a training parameter, abstractly."""
    sharding = NamedSharding(x.sharding.mesh, decode_spec(x.sharding.spec))
    return jax.ShapeDtypeStruct(x.shape, decode_dtype(CFG), sharding=sharding)


def check_outputs() -> dict:
    cfg = CFG.replace(dtype="float32")
    one = mesh.build_mesh(1, 1, 1, devices=jax.devices()[:1])
    setup1, s1 = state.create_train_state(one, cfg, tiny.optim(), seed=0)
    engine = Engine(cfg, setup1.graphdef, settings=SETTINGS)
    kw = dict(key=jax.random.key(1), max_new_tokens=NEW, num_samples=G, temperature=1.0,
              eos_ids=[3, 7], slots=8)  # fmt: skip
    ref = engine.generate(s1.params, PROMPTS, **kw)
    assert ref.stats.slot_occupancy < 1.0 and (ref.lengths < NEW).any()
    diffs = {}
    for shape in ((1, 8, 1), (1, 4, 2), (2, 2, 2)):
        m = mesh.build_mesh(*shape, model_cfgs=[cfg])
        setup, _ = state.create_train_state(m, cfg, tiny.optim(), materialize=False)
        copy = rollout_params(jax.device_put(s1.params, setup.param_shardings), cfg)
        devices, split = row_devices(copy)
        assert devices == shape[0] * shape[1] and split is not None
        out = engine.generate(copy, PROMPTS, **kw)
        np.testing.assert_array_equal(out.tokens, ref.tokens)
        np.testing.assert_array_equal(out.lengths, ref.lengths)
        diff = float(np.abs(out.logprobs - ref.logprobs).max())
        assert diff < 1e-5, (shape, diff)
        diffs["x".join(map(str, shape))] = diff
        # The Pallas kernel (interpreted) in a shard_map over the row devices: the same rows.
        kernel = Engine(cfg, setup1.graphdef, settings=PALLAS)
        if shape[2] == 1:
            out = kernel.generate(copy, PROMPTS, **kw)
            np.testing.assert_array_equal(out.tokens, ref.tokens)
            diffs["pallas_" + "x".join(map(str, shape))] = float(
                np.abs(out.logprobs - ref.logprobs).max()
            )
        else:
            try:
                kernel.generate(copy, PROMPTS, **kw)
            except ValueError as err:
                assert "tensor axis" in str(err), err
            else:
                raise AssertionError("pallas with a tensor axis must be refused")
    return {"logprob_max_diff": diffs}


def loop_report(module: Module, sizes: set[int]) -> dict:
    loop = max(module.loops(), key=lambda i: len(i.arrays()))
    inside = module.loop_computations(loop)
    moved = [
        f"{i.op} {d}{list(s)}"
        for i in module.instructions(inside)
        if i.op in ("all-gather", "convert", "copy", "all-to-all", "collective-permute")
        for d, s in i.arrays()
        if elements(s) in sizes
    ]
    collectives = [i.op for i in module.instructions(inside) if i.op.startswith(("all-", "coll"))]
    gathers = [
        f"{d}{list(s)}"
        for i in module.instructions()
        if i.op == "all-gather"
        for d, s in i.arrays()
        if elements(s) in sizes
    ]
    pools = sorted({s for _, s in loop.arrays() if len(s) == 5 and s[-1] == CFG.head_dim})
    return {
        "weight_moves_in_loop": moved,
        "collectives_in_loop": len(collectives),
        "weight_gathers": gathers,
        "pool_shapes_per_device": [list(s) for s in pools],
    }


def check_hlo() -> dict:
    out = {}
    for shape in ((1, 8, 1), (1, 4, 2)):
        m = mesh.build_mesh(*shape, model_cfgs=[CFG])
        setup, _ = state.create_train_state(m, CFG, tiny.optim(), materialize=False)
        abstract = setup.abstract_state.params
        decode = jax.tree.map(decode_copy, abstract)
        engine = Engine(CFG, setup.graphdef, settings=SETTINGS)
        devices = shape[0] * shape[1]
        plan = engine.plan([6], num_samples=G, max_new_tokens=NEW, slots=2 * devices,
                           devices=devices)  # fmt: skip
        module = Module.parse(engine.lower_round(decode, plan).compile().as_text())
        report = loop_report(module, weight_sizes(abstract))
        assert not report["weight_moves_in_loop"], report
        assert not report["weight_gathers"], report
        # Each device carries its own D slice of every layer's pages.
        assert report["pool_shapes_per_device"] and all(
            s[0] == 1 for s in report["pool_shapes_per_device"]
        ), report
        out["x".join(map(str, shape))] = report
    return out


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    report = {**check_outputs(), **check_hlo()}
    print("ENGINE_MESH_OK " + json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
