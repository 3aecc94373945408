"""Golden values of one GRPO and one PPO update on fixed weights and a fixed batch.

A refactor must leave these numbers unchanged (to float32 rounding). When a change to the maths
is intended (a loss term, a normalisation, the optimiser), regenerate the file with
`MEMR1_REGEN_GOLDEN=1 pytest tests/train/test_golden_steps.py` and say why in the commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jax
import numpy as np
import pytest

from memr1.train import mesh, state, steps
from tests.train import tiny

GOLDEN = Path(__file__).with_name("golden_steps.json")
METRICS = ("loss", "pg_loss", "kl", "value_loss", "grad_norm", "critic_grad_norm", "clip_frac")


def _summary(before, after, metrics) -> dict[str, float]:
    """The step's metrics and the update's size: sum |Δθ| and sum Δθ over all parameters."""
    out = {k: float(metrics[k]) for k in METRICS if k in metrics}
    deltas = jax.tree.leaves(
        jax.tree.map(lambda a, b: np.asarray(b - a, np.float64), before, after)
    )
    out["delta_abs_sum"] = float(sum(np.abs(d).sum() for d in deltas))
    out["delta_sum"] = float(sum(d.sum() for d in deltas))
    return out


def grpo_numbers() -> dict[str, float]:
    m = mesh.build_mesh(1, 1, 1)
    setup, s0 = state.create_train_state(m, tiny.CFG, tiny.optim(lr=3e-3), seed=3)
    # A reference other than the policy, so that the KL term and its gradient are not zero.
    other = state.create_train_state(m, tiny.CFG, tiny.optim(), seed=4)[1]
    reference = state.make_reference(setup, other.params)
    cfg = tiny.grpo_config(n_micro=2, kl_beta=0.05)
    before = tiny.copy_tree(s0.params)
    batch = tiny.with_reference(setup, cfg, tiny.grpo_batch(seed=5), reference)
    s1, metrics = steps.make_grpo_step(setup, cfg)(s0, batch)
    return _summary(before, s1.params, metrics)


def ppo_numbers() -> dict[str, float]:
    m = mesh.build_mesh(1, 1, 1)
    setup, s0 = state.create_train_state(
        m, tiny.CFG, tiny.optim(lr=3e-3), seed=3, critic_cfg=tiny.CFG,
        critic_optim=tiny.optim(critic=True, critic_lr=5e-3),
    )  # fmt: skip
    cfg = tiny.ppo_config(n_micro=2, lam=0.9)
    raw = tiny.grpo_batch(seed=5)
    raw = {k: v for k, v in raw.items() if k != "advantages"}
    raw["rewards"] = np.linspace(-1.0, 1.0, tiny.ROWS, dtype=np.float32)
    batch, _ = steps.make_ppo_prepare(setup, cfg)(s0, raw)
    before = tiny.copy_tree((s0.params, s0.critic_params))
    s1, metrics = steps.make_ppo_step(setup, cfg)(s0, batch)
    return _summary(before, (s1.params, s1.critic_params), metrics)


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_one_step_matches_its_golden_values(algo):
    got = {"grpo": grpo_numbers, "ppo": ppo_numbers}[algo]()
    if os.environ.get("MEMR1_REGEN_GOLDEN"):
        stored = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        stored[algo] = got
        GOLDEN.write_text(json.dumps(stored, indent=2, sort_keys=True) + "\n")
        pytest.skip(f"regenerated {GOLDEN.name}[{algo}]")
    want = json.loads(GOLDEN.read_text())[algo]
    assert set(got) == set(want), f"{algo}: metrics {sorted(got)} != golden {sorted(want)}"
    for key, value in want.items():
        np.testing.assert_allclose(
            got[key], value, rtol=2e-4, atol=1e-7,
            err_msg=f"{algo} step's {key} moved from its golden value: if the maths changed on "
            "purpose, regenerate (see the module docstring) and say why in the commit",
        )  # fmt: skip
