"""Fault injection builds a step from an update's spec (memr1.train.faults): the production step
has no fault input, and the built step poisons exactly the chosen steps, where the real NaN/inf
guard refuses the update and keeps the state bitwise."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from memr1.train import faults, loop, sft
from memr1.train.update import shard_batch
from tests.train import tiny
from tests.train.conftest import GRPO_CFG

SFT_CFG = sft.SFTConfig(n_micro=2, logprob_chunk=tiny.CHUNK)  # the `sft_step` fixture's


def test_the_production_step_takes_no_fault_input(policy, sft_step):
    setup, s0 = policy
    batch = shard_batch(setup, tiny.sft_batch())
    args = sft_step.lower(tiny.copy_tree(s0), batch).args_info
    assert len(jax.tree.leaves(args)) == len(jax.tree.leaves(s0)) + len(batch)
    # A NaN scale riding along in the batch is not read: the update is the plain one.
    plain, plain_metrics = sft_step(tiny.copy_tree(s0), batch)
    rows = tiny.sft_batch()["tokens"].shape[0]
    poisoned = {**tiny.sft_batch(), "fault_scale": np.full((rows, 2), np.nan, np.float32)}
    out, metrics = sft_step(tiny.copy_tree(s0), shard_batch(setup, poisoned))
    assert float(metrics["update_refused"]) == 0.0
    assert float(metrics["loss"]) == float(plain_metrics["loss"])
    assert tiny.leaves_equal(out.params, plain.params)


@pytest.mark.parametrize("kind", ["loss", "grads"])
def test_the_guard_refuses_the_poisoned_step_and_keeps_the_state(policy, sft_step, kind):
    setup, s0 = policy
    # The compiled production step for ordinary steps, a poisoned twin of its spec for step 1.
    spec = sft.sft_spec(setup, SFT_CFG)
    step = faults.inject_nonfinite(setup, spec, [(1, kind)], clean=sft_step)
    batches = [shard_batch(setup, tiny.sft_batch(i)) for i in range(3)]
    s1, m0 = step(tiny.copy_tree(s0), batches[0])
    clean, _ = sft_step(tiny.copy_tree(s0), batches[0])
    assert tiny.leaves_equal(s1.params, clean.params), "an unpoisoned step was changed"
    before = tiny.copy_tree(s1)
    s2, m1 = step(s1, batches[1])
    assert float(m1["update_refused"]) == 1.0
    assert (int(s2.step), int(s2.n_refused)) == (2, 1)
    assert tiny.leaves_equal(s2.params, before.params)
    assert tiny.leaves_equal(s2.opt_state, before.opt_state)
    loss, grad_norm = float(m1["loss"]), float(m1["grad_norm"])
    if kind == "loss":
        assert math.isnan(loss) and math.isfinite(grad_norm)
    else:
        assert math.isfinite(loss) and not math.isfinite(grad_norm)
    s3, m2 = step(s2, batches[2])
    assert float(m0["update_refused"]) == float(m2["update_refused"]) == 0.0
    assert not tiny.leaves_equal(s3.params, before.params)


def test_an_rl_update_is_poisoned_through_the_loop_wrapper(policy, reference):
    setup, s0 = policy
    build = faults.wrapper([(0, "grads")])
    update = loop.make_rl_update(
        setup, "grpo", grpo_cfg=GRPO_CFG, ref_params=reference, build_step=build
    )
    s1, metrics = update(tiny.copy_tree(s0), tiny.grpo_batch())
    assert float(metrics["update_refused"]) == 1.0 and int(s1.n_refused) == 1
    assert tiny.leaves_equal(s1.params, s0.params)


@pytest.mark.parametrize(
    ("faults_", "message"),
    [
        (((2, "weights"),), "inject_nonfinite (2, 'weights')"),
        (((-1, "loss"),), "inject_nonfinite (-1, 'loss')"),
        (((1.5, "grads"),), "inject_nonfinite (1.5, 'grads')"),
    ],
)
def test_bad_faults_are_refused_by_name_before_any_step_is_built(faults_, message):
    with pytest.raises(ValueError) as caught:
        faults.wrapper(faults_)
    assert message in str(caught.value)


def test_the_cli_syntax():
    assert faults.parse_faults("3, 7:grads") == ((3, "loss"), (7, "grads"))
    assert faults.parse_faults(None) == ()
    with pytest.raises(ValueError, match="'x:loss'"):
        faults.parse_faults("x:loss")
    with pytest.raises(ValueError, match="inject_nonfinite"):
        faults.parse_faults("2:weights")
