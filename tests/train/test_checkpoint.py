"""Checkpoints: an interrupted and resumed run ends bitwise where an uninterrupted one does, and
half-written steps are never restored."""

import os
import shutil

import jax
import numpy as np
import pytest

from memr1.models.transformer import abstract_model
from memr1.train import checkpoint, mesh, state
from tests.train import tiny

N_STEPS, CUT = 4, 2


def _grpo_batch(s: state.TrainState, step: int) -> dict:
    """Advantages drawn from fold_in(rng, step), so the restored RNG key matters."""
    batch = tiny.grpo_batch(step)
    key = state.step_key(s.rng, step)
    batch["advantages"] = np.asarray(jax.random.normal(key, (tiny.ROWS,)), np.float32)
    return batch


def _run(step_fn, s, start, stop, make_batch, extra=()):
    for i in range(start, stop):
        s, _ = step_fn(s, make_batch(s, i), *extra)
    return s


@pytest.mark.parametrize("algo", ["sft", "grpo"])
def test_resume_is_bitwise_identical_to_an_uninterrupted_run(
    algo, policy, reference, sft_step, grpo_step, tmp_path
):
    setup, s0 = policy
    if algo == "sft":
        step_fn, extra = sft_step, ()
        make_batch = lambda s, i: tiny.sft_batch(step=i)
    else:
        step_fn, extra = grpo_step, (reference,)
        make_batch = _grpo_batch
    straight = _run(step_fn, tiny.copy_tree(s0), 0, N_STEPS, make_batch, extra)

    with checkpoint.Checkpointer(tmp_path / algo, keep=2) as ckpt:
        first = _run(step_fn, tiny.copy_tree(s0), 0, CUT, make_batch, extra)
        assert ckpt.save(CUT, first, {"next_batch": CUT, "epoch": 0})
        del first  # the resumed run must not lean on anything the first process held
    with checkpoint.Checkpointer(tmp_path / algo) as ckpt:
        restored, data = ckpt.restore_latest(setup.abstract_state)
    assert data == {"next_batch": CUT, "epoch": 0}
    assert int(restored.step) == CUT
    assert jax.tree.structure(restored) == jax.tree.structure(straight)
    resumed = _run(step_fn, restored, data["next_batch"], N_STEPS, make_batch, extra)

    assert tiny.leaves_equal(resumed.params, straight.params), "resumed params differ"
    assert tiny.leaves_equal(resumed.opt_state, straight.opt_state), "resumed Adam state differs"
    assert int(resumed.step) == N_STEPS
    assert not tiny.leaves_equal(resumed.params, s0.params)


def test_restore_places_arrays_in_the_target_shardings(policy, tmp_path):
    setup, s0 = policy
    with checkpoint.Checkpointer(tmp_path) as ckpt:
        ckpt.save(1, s0, {})
        restored, _ = ckpt.restore_latest(setup.abstract_state, setup.state_shardings)
    got = jax.tree.leaves(jax.tree.map(lambda x: x.sharding, restored))
    want = jax.tree.leaves(setup.state_shardings)
    assert got == want
    assert tiny.leaves_equal(restored, s0)


def test_unfinalised_and_unmarked_steps_are_ignored(policy, tmp_path):
    setup, s0 = policy
    later = s0.replace(step=s0.step + 7)
    with checkpoint.Checkpointer(tmp_path, keep=5) as ckpt:
        ckpt.save(1, s0, {"next_batch": 1})
        ckpt.save(2, later, {"next_batch": 2})
    final = tmp_path / "2"
    assert (final / checkpoint.COMMIT_MARKER).exists()  # how Orbax marks a finished step here
    # A save that died before Orbax's final rename: a complete-looking temporary directory.
    shutil.copytree(final, tmp_path / "3.orbax-checkpoint-tmp-1700000000")
    os.remove(tmp_path / "3.orbax-checkpoint-tmp-1700000000" / checkpoint.COMMIT_MARKER)
    # A step directory copied in by hand and cut short: the right name, no commit marker.
    shutil.copytree(final, tmp_path / "4")
    os.remove(tmp_path / "4" / checkpoint.COMMIT_MARKER)

    with checkpoint.Checkpointer(tmp_path, keep=5) as ckpt:
        assert ckpt.all_steps() == [1, 2]
        assert ckpt.latest_step() == 2
        restored, data = ckpt.restore_latest(setup.abstract_state)
    assert data == {"next_batch": 2}
    assert int(restored.step) == int(later.step)


def test_keeps_only_the_last_n_and_an_empty_directory_restores_nothing(policy, tmp_path):
    setup, s0 = policy
    with checkpoint.Checkpointer(tmp_path / "empty") as ckpt:
        assert ckpt.restore_latest(setup.abstract_state) is None
    with checkpoint.Checkpointer(tmp_path / "run", keep=2) as ckpt:
        for step in (10, 20, 30):
            ckpt.save(step, s0, {"step": step})
        assert ckpt.all_steps() == [20, 30]
    assert sorted(os.listdir(tmp_path / "run")) == ["20", "30"]


def test_async_save_is_complete_after_wait(policy, tmp_path):
    setup, s0 = policy
    with checkpoint.Checkpointer(tmp_path, async_save=True) as ckpt:
        ckpt.save(5, s0, {"next_batch": 5})
        ckpt.wait()
        assert ckpt.latest_step() == 5
        restored, data = ckpt.restore_latest(setup.abstract_state)
    assert data == {"next_batch": 5} and tiny.leaves_equal(restored, s0)


def test_async_saves_are_seen_by_readers_and_pruned_only_once_final(policy, tmp_path):
    """Under async saving a reader waits for the save under way (no explicit `wait`), and
    keep_best's pruning never deletes a step before the newer one is final."""
    setup, s0 = policy
    later = s0.replace(step=s0.step + 3)
    with checkpoint.Checkpointer(tmp_path, keep=1, keep_best=True, async_save=True) as ckpt:
        best = {"best": {"step": 1, "value": 0.5, "metric": "val/em"}}
        ckpt.save(1, s0, {"next_step": 1, **best})
        assert ckpt.latest_step() == 1  # waited for the write
        ckpt.save(2, s0, {"next_step": 2, **best})
        ckpt.save(3, later, {"next_step": 3, **best})
        assert ckpt.all_steps() == [1, 3]  # step 2 pruned once 3 was final; 1 is the best
        assert ckpt.position(3) == {"next_step": 3, **best}
        restored, data = ckpt.restore_latest(setup.abstract_state)
    assert data["next_step"] == 3 and tiny.leaves_equal(restored, later)


def test_a_save_that_dies_mid_write_keeps_the_previous_checkpoint(policy, tmp_path, monkeypatch):
    """An async write that fails before its final rename (a process killed there leaves the
    same directory) is never listed: the previous step is the latest and restores whole."""
    from orbax.checkpoint._src.path import atomicity

    setup, s0 = policy
    finalize = atomicity.AtomicRenameTemporaryPath.finalize

    async def dies_at_step_2(self, *args, **kwargs):
        if self.get_final().name == "2":
            raise OSError("killed mid-save")
        return await finalize(self, *args, **kwargs)

    monkeypatch.setattr(atomicity.AtomicRenameTemporaryPath, "finalize", dies_at_step_2)
    ckpt = checkpoint.Checkpointer(tmp_path, keep=3, async_save=True)
    ckpt.save(1, s0, {"next_step": 1})
    ckpt.save(2, s0.replace(step=s0.step + 2), {"next_step": 2})
    with pytest.raises(Exception, match="killed mid-save"):
        ckpt.wait()
    monkeypatch.undo()
    with checkpoint.Checkpointer(tmp_path) as again:
        assert again.all_steps() == [1]
        restored, data = again.restore_latest(setup.abstract_state)
    assert data == {"next_step": 1} and tiny.leaves_equal(restored, s0)
    assert any(".orbax-checkpoint-tmp" in name for name in os.listdir(tmp_path))


def test_policy_parameters_alone_restore_from_a_ppo_checkpoint(tmp_path):
    """A sampler or an evaluation reads just the weights, without building optimiser state."""
    m = mesh.build_mesh(1, 1, 1)
    setup, s0 = state.create_train_state(
        m, tiny.CFG, tiny.optim(), critic_cfg=tiny.CFG, critic_optim=tiny.optim(critic=True), seed=3
    )
    with checkpoint.Checkpointer(tmp_path) as ckpt:
        ckpt.save(4, s0, {})
    _, abstract_params = abstract_model(tiny.CFG)
    with checkpoint.Checkpointer(tmp_path) as ckpt:
        params = ckpt.restore_params(abstract_params, setup.param_shardings)
    assert tiny.leaves_equal(params, s0.params)
    assert jax.tree.leaves(params)[0].sharding == jax.tree.leaves(setup.param_shardings)[0]
    with checkpoint.Checkpointer(tmp_path / "none") as empty:
        with pytest.raises(FileNotFoundError, match="no finalised checkpoint"):
            empty.restore_params(abstract_params, setup.param_shardings)
