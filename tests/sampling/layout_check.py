"""Run as a script by test_layout.py: the rollout's decode copy on 8 fake CPU devices.

XLA reads its flags once, when the backend starts, so this runs in its own process with the
device count (and a dump of the layout program after SPMD partitioning) set before JAX is
imported. It exits non-zero (an assertion) on any failed check and prints one JSON line of
measurements on success.

What is checked, for a float32-master / bfloat16-compute model:
- the layout program (`rollout_params`) casts every shard before gathering it: after SPMD
  partitioning every weight-sized all-gather is bfloat16 and no float32 weight exists whole.
  (XLA:CPU then emulates bfloat16 collectives in float32; GPUs and TPUs gather bfloat16.)
- the decode loop over that copy (fsdp = 8, and tensor = 2 beside fsdp = 4) gathers and converts
  no weight-sized array, and each device holds only its own rows of the KV cache;
- the same loop over the training shards does not pass these checks (so they can fail);
- tokens and log-probs decoded from the copy on three meshes equal one device's; prompts that
  do not split over data × fsdp stay whole on every device, with a warning.
"""

from __future__ import annotations

import os
import sys
import tempfile

DUMP = tempfile.mkdtemp(prefix="layout-hlo-")
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_force_host_platform_device_count=8"
    + f" --xla_dump_to={DUMP} --xla_dump_hlo_module_re=jit_layout"
    + " --xla_dump_hlo_pass_re=spmd-partitioning"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The dump is written while XLA compiles; a persistent-cache hit (the test run shares one cache,
# tests/conftest.py) would load the program without compiling it and dump nothing.
os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"

import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

from memr1.models.config import (  # noqa: E402
    get_size,
)
from memr1.sampling import Sampler  # noqa: E402
from memr1.sampling.layout import (  # noqa: E402
    decode_dtype,
    decode_spec,
    lower_rollout_params,
    rollout_params,
    row_sharding,
)
from memr1.train import mesh, state  # noqa: E402
from tests.sampling.hlo_text import Module, elements  # noqa: E402
from tests.train import tiny  # noqa: E402

# Dimensions chosen so that no activation of the programs below has a weight's element count.
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
PROMPTS = [[5, 17, 3, 9], [9, 1, 44, 2, 71, 30], [33, 2], [8, 8, 8], [1, 2, 3], [4], [7, 6], [2]]
G, NEW = 2, 8


def weight_sizes(abstract) -> set[int]:
    """Element counts of every weight matrix (those with a d_model axis: biases and norm
    scales are as small as activations), whole and as one device's shard."""
    out = set()
    for x in jax.tree.leaves(abstract):
        if x.ndim >= 2 and CFG.d_model in x.shape:
            out |= {elements(x.shape), elements(x.sharding.shard_shape(x.shape))}
    return out


def decode_copy(x: jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
    """What `rollout_params` makes of a training parameter, abstractly."""
    sharding = NamedSharding(x.sharding.mesh, decode_spec(x.sharding.spec))
    return jax.ShapeDtypeStruct(x.shape, decode_dtype(CFG), sharding=sharding)


def decode_hlo(sampler, params) -> Module:
    low = sampler.lower(
        params, PROMPTS, key=jax.random.key(0), max_new_tokens=NEW, num_samples=G, eos_ids=[3]
    )
    return Module.parse(low.compile().as_text())


def loop_report(module: Module, sizes: set[int]) -> dict:
    """What the decode loop (the while loop carrying the KV cache) does each step."""
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
    cache_rows = sorted({s[0] for d, s in loop.arrays() if len(s) == 4 and s[-1] == CFG.head_dim})
    return {
        "weight_moves_in_loop": moved,
        "collectives_in_loop": len(collectives),
        "weight_gathers": gathers,
        "cache_rows_per_device": cache_rows,
    }


def check_layout_program(abstract, sizes_whole: set[int]) -> dict:
    compiled = lower_rollout_params(abstract, CFG).compile()
    (after,) = Path(DUMP).glob("*jit_layout*after_spmd-partitioning*.txt")
    module = Module.parse(after.read_text())
    gathers = [(d, s) for i in module.instructions() if i.op == "all-gather" for d, s in i.arrays()]
    assert gathers and all(d == "bf16" for d, _ in gathers), gathers
    # Inputs aside (a weight that training replicates, such as a bias, arrives whole).
    whole_f32 = [
        (i.op, s)
        for i in module.instructions()
        if i.op != "parameter"
        for d, s in i.arrays()
        if d == "f32" and elements(s) in sizes_whole
    ]
    assert not whole_f32, f"a float32 weight exists whole in the layout program: {whole_f32}"
    memory = compiled.memory_analysis()
    return {
        "layout_all_gathers": len(gathers),
        "layout_output_bytes": int(memory.output_size_in_bytes),
        "layout_temp_bytes": int(memory.temp_size_in_bytes),
    }


def check_hlo() -> dict:
    out = {}
    for shape in ((1, 8, 1), (1, 4, 2)):
        m = mesh.build_mesh(*shape, model_cfgs=[CFG])
        setup, _ = state.create_train_state(m, CFG, tiny.optim(), materialize=False)
        abstract = setup.abstract_state.params
        sizes = weight_sizes(abstract)
        whole = {elements(x.shape) for x in jax.tree.leaves(abstract) if CFG.d_model in x.shape}
        sampler = Sampler(CFG, setup.graphdef)
        name = "x".join(map(str, shape))
        if shape == (1, 8, 1):
            out.update(check_layout_program(abstract, whole))
            # Decoding straight from the training shards: the checks below must catch it.
            old = loop_report(decode_hlo(sampler, abstract), sizes)
            assert old["collectives_in_loop"] >= 2 * CFG.n_layers, old
            assert old["cache_rows_per_device"] == [len(PROMPTS) * G], old
            out[f"training_shards_{name}"] = old
        decode = jax.tree.map(decode_copy, abstract)
        new = loop_report(decode_hlo(sampler, decode), sizes)
        rows = len(PROMPTS) * G // (shape[0] * shape[1])
        assert not new["weight_moves_in_loop"], new
        assert not new["weight_gathers"], new
        assert new["cache_rows_per_device"] == [rows], new
        if shape[2] == 1:  # no tensor axis: only the all-rows-stopped test communicates
            assert new["collectives_in_loop"] == 1, new
        out[f"decode_copy_{name}"] = new
    return out


def check_outputs() -> dict:
    """The decode copy on several meshes samples what one device samples (float32 compute)."""
    cfg = CFG.replace(dtype="float32")
    one = mesh.build_mesh(1, 1, 1, devices=jax.devices()[:1])
    setup1, s1 = state.create_train_state(one, cfg, tiny.optim(), seed=0)
    sampler = Sampler(cfg, setup1.graphdef)
    kw = dict(key=jax.random.key(1), max_new_tokens=NEW, num_samples=G, temperature=1.0)
    ref = sampler.generate(s1.params, PROMPTS, **kw)
    diffs = {}
    for shape in ((1, 8, 1), (1, 4, 2), (2, 2, 2)):
        m = mesh.build_mesh(*shape, model_cfgs=[cfg])
        setup, _ = state.create_train_state(m, cfg, tiny.optim(), materialize=False)
        params = jax.device_put(s1.params, setup.param_shardings)  # the training shards
        copy = rollout_params(params, cfg)
        out = sampler.generate(copy, PROMPTS, **kw)
        np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
        np.testing.assert_array_equal(np.asarray(out.lengths), np.asarray(ref.lengths))
        diff = float(np.abs(np.asarray(out.logprobs) - np.asarray(ref.logprobs)).max())
        assert diff < 1e-5, (shape, diff)
        diffs["x".join(map(str, shape))] = diff
        assert row_sharding(copy, 8) is not None and row_sharding(params, 8) is None
    with _warnings() as seen:  # rows that do not split: whole on every device, and said so
        assert row_sharding(copy, 9) is None
    assert "9 prompts per sampler call do not split over the 4 data x fsdp" in "".join(seen)
    return {"logprob_max_diff": diffs}


@contextlib.contextmanager
def _warnings():
    """Collects the layout module's log messages."""
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("memr1.sampling.layout")
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    report = {**check_hlo(), **check_outputs()}
    print("LAYOUT_OK " + json.dumps(report))


if __name__ == "__main__":
    sys.exit(main())
