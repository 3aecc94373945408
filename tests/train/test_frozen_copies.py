"""Weights that are only read in the compute dtype are kept in it: the KL reference and the copy
a rollout decodes from. (The manager stage's frozen Answer Agent: lora_multidevice_check.py, in a
subprocess, since the train CLI's flags clash with memr1.evaluate's in one process.)"""

from __future__ import annotations

import jax
import numpy as np

from memr1.env.policy import SamplingConfig, TextPolicy
from memr1.train import mesh, state
from tests.train import tiny

BF16 = np.dtype("bfloat16")


def _cast_equal(copy, master) -> bool:
    pairs = zip(jax.tree.leaves(copy), jax.tree.leaves(master), strict=True)
    return all(
        np.array_equal(np.asarray(c), np.asarray(m.astype(c.dtype))) and c.dtype == BF16
        for c, m in pairs
    )


def test_the_kl_reference_is_kept_in_the_compute_dtype():
    cfg = tiny.CFG.replace(dtype="bfloat16")
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[cfg])
    setup, s0 = state.create_train_state(m, cfg, tiny.optim(), seed=0)
    ref = state.make_reference(setup, s0.params)
    assert _cast_equal(ref, s0.params)
    shardings = jax.tree.leaves(setup.param_shardings)
    assert [x.sharding for x in jax.tree.leaves(ref)] == shardings
    assert {x.dtype for x in jax.tree.leaves(s0.params)} == {np.dtype("float32")}


def test_a_policy_decodes_from_a_compute_dtype_copy(tmp_path):
    from tests.models.tiny_hf import make_tokenizer

    tok = make_tokenizer(tmp_path / "tok")
    cfg = tiny.HF_CFG.replace(dtype="bfloat16")
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[cfg])
    setup, s0 = state.create_train_state(m, cfg, tiny.optim(), seed=0)
    policy = TextPolicy(
        cfg, setup.graphdef, s0.params, tok, eos_ids=[tok.eos_token_id], pad_id=0, batch_size=2
    )
    seen = []
    generate = policy.engine.generate
    policy.engine.generate = lambda params, *a, **k: (
        seen.append(params) or generate(params, *a, **k)
    )
    prompts = [(np.asarray([5, 6, 7], np.int32), False)]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=3)
    policy.complete_ids(prompts, greedy, key=jax.random.key(0))
    (params,) = seen
    assert _cast_equal(params, s0.params)
