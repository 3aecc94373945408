"""Faults in the training loop itself: NaN/inf steps under skip and stop, runs killed between or
right after checkpoints, impossible loop settings, and run-to-run determinism.

Every run goes through `loop.run_sft` with real Orbax checkpoints and a real metrics.jsonl; the
poisoned steps run a twin of the update built with `memr1.train.faults` (the same step, its loss or
gradients scaled by NaN/inf), so the NaN/inf guard under test is the production
one, and every other step runs the production step itself.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import numpy as np
import pytest

from memr1.train import faults, loop, mesh, sft, state
from memr1.train.checkpoint import Checkpointer
from memr1.train.metrics_log import MetricsWriter, NonFiniteError, is_wall_clock, read_jsonl
from tests.reliability.conftest import LENGTH, OPTIM, SFT_CFG
from tests.train import tiny

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow


class Killed(Exception):
    """Stands in for SIGKILL: the run stops where it is, with nothing cleaned up by the loop."""


def _run(policy, pairs, workdir, *, steps, every=1, seed=0, s0=None, step_fn=None,
         checkpointer=Checkpointer, inject_nonfinite=(), **cfg):  # fmt: skip
    setup, initial, step = policy
    if inject_nonfinite:
        # The compiled production step for ordinary steps, a poisoned twin for the others.
        spec = sft.sft_spec(setup, SFT_CFG)
        step_fn = faults.inject_nonfinite(setup, spec, inject_nonfinite, clean=step)
    loop_cfg = tiny.loop_config(seed=seed, steps=steps, batch_size=4, checkpoint_every=every, **cfg)
    with (
        checkpointer(workdir / "ckpt", keep=20) as ckpt,
        MetricsWriter(workdir / "logs", tensorboard=False) as writer,
    ):
        return loop.run_sft(
            setup,
            tiny.copy_tree(initial if s0 is None else s0),
            step_fn or step,
            pairs,
            cfg=loop_cfg,
            length=LENGTH,
            pad_id=0,
            checkpointer=ckpt,
            writer=writer,
        )


def _restore(setup, workdir, step):
    with Checkpointer(workdir / "ckpt") as ckpt:
        return ckpt.restore(step, setup.abstract_state)[0]


def _deterministic(records):
    # Wall-clock metrics differ between any two runs; everything else must be reproduced exactly.
    return [{k: v for k, v in r.items() if not is_wall_clock(k)} for r in records]


def _records(workdir):
    return _deterministic(read_jsonl(workdir / "logs" / "metrics.jsonl"))


def test_skip_refuses_poisoned_steps_logs_them_and_finishes(sft_policy, pairs, tmp_path):
    setup = sft_policy[0]
    final = _run(sft_policy, pairs, tmp_path, steps=6, inject_nonfinite=((2, "loss"), (4, "grads")))
    records = _records(tmp_path)
    assert [r["step"] for r in records] == list(range(6))
    assert [r["train/update_refused"] for r in records] == [0, 0, 1, 0, 1, 0]
    assert math.isnan(records[2]["train/loss"]) and math.isfinite(records[2]["train/grad_norm"])
    assert math.isfinite(records[4]["train/loss"]) and not math.isfinite(
        records[4]["train/grad_norm"]
    )
    # Checkpoint k holds the state after steps 0..k-1: a refused step k leaves k + 1 equal to k
    # (weights and Adam moments), while the good step before it did move the weights.
    ckpt = {k: _restore(setup, tmp_path, k) for k in range(1, 7)}
    for refused in (2, 4):
        assert tiny.leaves_equal(ckpt[refused + 1].params, ckpt[refused].params)
        assert tiny.leaves_equal(ckpt[refused + 1].opt_state, ckpt[refused].opt_state)
        assert not tiny.leaves_equal(ckpt[refused].params, ckpt[refused - 1].params)
    assert int(final.step) == 6 and int(final.n_refused) == 2
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(final.params))


ASYNC = functools.partial(Checkpointer, async_save=True)  # as `memr1.train` saves


@pytest.mark.parametrize(
    ("kind", "saving"), [("loss", "sync"), ("grads", "sync"), ("loss", "async")]
)
def test_stop_exits_at_the_poisoned_step_and_keeps_the_last_good_checkpoint(
    sft_policy, pairs, tmp_path, kind, saving
):
    setup = sft_policy[0]
    checkpointer = ASYNC if saving == "async" else Checkpointer
    with pytest.raises(NonFiniteError, match="step 3: non-finite"):
        _run(sft_policy, pairs, tmp_path / "stop", steps=6, inject_nonfinite=((3, kind),),
             on_nonfinite="stop", checkpointer=checkpointer)  # fmt: skip
    with Checkpointer(tmp_path / "stop" / "ckpt") as ckpt:
        assert ckpt.all_steps() == [1, 2, 3], "a checkpoint holding the refused step was saved"
    records = _records(tmp_path / "stop")
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert records[-1]["train/update_refused"] == 1.0, "the refused step was not logged"
    clean = _run(sft_policy, pairs, tmp_path / "clean", steps=3)
    assert tiny.leaves_equal(_restore(setup, tmp_path / "stop", 3).params, clean.params)


def test_an_async_saving_run_checkpoints_the_states_a_synchronous_one_does(
    sft_policy, pairs, tmp_path
):
    setup = sft_policy[0]
    finals = {}
    for name, checkpointer in (("sync", Checkpointer), ("async", ASYNC)):
        finals[name] = _run(sft_policy, pairs, tmp_path / name, steps=5, every=2,
                            checkpointer=checkpointer)  # fmt: skip
    with Checkpointer(tmp_path / "async" / "ckpt") as ckpt:
        assert ckpt.all_steps() == [2, 4, 5]
    for step in (2, 4, 5):
        want, got = (_restore(setup, tmp_path / n, step) for n in ("sync", "async"))
        assert tiny.leaves_equal(got, want), f"checkpoint {step} differs"
    assert tiny.leaves_equal(finals["async"], finals["sync"])
    assert _records(tmp_path / "async") == _records(tmp_path / "sync")


@pytest.fixture(scope="module")
def straight(sft_policy, pairs, tmp_path_factory):
    """An uninterrupted 7-step run checkpointing every 3 steps: (final state, its records)."""
    workdir = tmp_path_factory.mktemp("straight")
    final = _run(sft_policy, pairs, workdir, steps=7, every=3)
    return final, _records(workdir)


class KilledAfterSave(Checkpointer):
    def save(self, step, *args, **kwargs):
        saved = super().save(step, *args, **kwargs)
        if step == 3:
            raise Killed
        return saved


@pytest.mark.parametrize("moment", ["right_after_a_save", "between_saves"])
def test_a_killed_run_resumes_to_the_same_state_and_the_same_log(
    sft_policy, pairs, straight, tmp_path, moment
):
    if moment == "right_after_a_save":
        # Step 2's metrics are still in the one-step lag when checkpoint 3 is written.
        kw = {"checkpointer": KilledAfterSave}
    else:
        # Steps 3 and 4 ran after checkpoint 3 and step 3 was logged: the resumed run replays
        # both, so the log must not keep the first copy of step 3.
        calls = []

        def step_fn(s, batch):
            if len(calls) == 5:
                raise Killed
            calls.append(1)
            return sft_policy[2](s, batch)

        kw = {"step_fn": step_fn}
    with pytest.raises(Killed):
        _run(sft_policy, pairs, tmp_path, steps=7, every=3, **kw)
    with open(tmp_path / "logs" / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 4, "train/lo')  # a line torn by the kill
    resumed = _run(sft_policy, pairs, tmp_path, steps=7, every=3)
    final, records = straight
    assert _records(tmp_path) == _deterministic(records)
    assert tiny.leaves_equal(resumed.params, final.params)
    assert tiny.leaves_equal(resumed.opt_state, final.opt_state)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"checkpoint_every": 0}, "train.checkpoint_every=0"),
        ({"steps": -1}, "train.steps=-1"),
        ({"batch_size": 0}, "train.batch_size=0"),
        ({"group_size": 1.5}, "train.group_size=1.5"),
        ({"on_nonfinite": "ignore"}, "train.on_nonfinite='ignore'"),
    ],
)
def test_impossible_loop_settings_are_refused_by_name(change, field):
    with pytest.raises(ValueError) as caught:
        dataclasses.replace(tiny.loop_config(steps=4, batch_size=2), **change)
    assert field in str(caught.value)


def test_same_seed_same_params_and_metrics(sft_policy, pairs, tmp_path):
    """Two runs from freshly initialised states with one seed agree bit for bit; another data
    seed does not (so the comparison can fail)."""
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[tiny.CFG])
    runs = []
    for name in ("a", "b"):
        _, fresh = state.create_train_state(m, tiny.CFG, OPTIM, seed=0)
        runs.append(_run(sft_policy, pairs, tmp_path / name, steps=2, seed=0, s0=fresh))
    runs.append(_run(sft_policy, pairs, tmp_path / "other", steps=2, seed=1))
    assert tiny.leaves_equal(runs[0].params, runs[1].params)
    assert tiny.leaves_equal(runs[0].opt_state, runs[1].opt_state)
    assert _records(tmp_path / "a") == _records(tmp_path / "b")
    assert not tiny.leaves_equal(runs[0].params, runs[2].params)
