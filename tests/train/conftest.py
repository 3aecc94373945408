"""Session fixtures: the tiny policy and its compiled steps, built once per test worker.

Compiling a step is the slow part of these tests (seconds on two CPU cores), so every test that
can share one does. Steps donate their input state: tests pass `tiny.copy_tree(state)`.
"""

from __future__ import annotations

import pytest

from memr1.train import mesh, sft, state, steps
from tests.train import tiny

OPTIM = state.OptimConfig(lr=3e-3, warmup_steps=2)
GRPO_CFG = tiny.grpo_config(n_micro=2, kl_beta=0.05)


@pytest.fixture(scope="session")
def policy():
    """(setup, initial state) of the tiny policy on a one-device mesh."""
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[tiny.CFG])
    return state.create_train_state(m, tiny.CFG, OPTIM, seed=0)


@pytest.fixture(scope="session")
def reference(policy):
    setup, s0 = policy
    return state.make_reference(setup, s0.params)


@pytest.fixture(scope="session")
def sft_step(policy):
    """SFT with gradient accumulation over 2 micro-batches."""
    return sft.make_sft_step(policy[0], tiny.sft_config(n_micro=2))


@pytest.fixture(scope="session")
def grpo_step(policy):
    """GRPO with KL β > 0 over 2 micro-batches, as `step(state, batch, reference)` (the
    reference's log-probs scored first, as the loop does)."""
    step = steps.make_grpo_step(policy[0], GRPO_CFG)
    return tiny.with_reference_step(policy[0], GRPO_CFG, step)
