"""The tiny SFT policy the training-fault tests share, compiled once per test worker.

The model is `tests.train.tiny.CFG` (one block, odd-free dimensions small enough to compile in
seconds); the data are random token pairs, a pure function of their index.
"""

from __future__ import annotations

import numpy as np
import pytest

from memr1.train import mesh, sft, state
from tests.train import tiny

OPTIM = state.OptimConfig(lr=3e-3, warmup_steps=2)
LENGTH = 16
SFT_CFG = tiny.sft_config()


@pytest.fixture(scope="session")
def sft_policy():
    """(setup, initial state, compiled SFT step) on a one-device mesh."""
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[tiny.CFG])
    setup, s0 = state.create_train_state(m, tiny.CFG, OPTIM, seed=0)
    step = sft.make_sft_step(setup, SFT_CFG)
    return setup, s0, step


@pytest.fixture(scope="session")
def pairs():
    """24 (prompt, target) token pairs that fit LENGTH."""
    rng = np.random.default_rng(7)
    out = []
    for _ in range(24):
        p, t = int(rng.integers(3, 7)), int(rng.integers(3, 9))
        out.append((rng.integers(1, tiny.CFG.vocab_size, p).tolist(),
                    rng.integers(1, tiny.CFG.vocab_size, t).tolist()))  # fmt: skip
    return out
