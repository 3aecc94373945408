"""The rollout temperature reaches both updates: on tokens just sampled at T = 0.7 the first
step's ratio is 1 within the sampler-vs-trainer log-prob gap, for GRPO and for PPO, with the
update configured from the train section as the train CLI does and the batch packed as the loop
packs it. Scored at T = 1 instead, the same tokens leave the clip range."""

import types

import jax
import numpy as np
import pytest

from memr1.env.policy import SamplingConfig, TextPolicy
from memr1.models.transformer import init_model
from memr1.rl import grpo, ppo
from memr1.train import loop, mesh, state
from memr1.train.batches import pack_rollout
from tests.train import tiny

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

SAMPLE_T, G, NEW = 0.7, 4, 8
CFG = tiny.CFG.replace(remat=False)


@pytest.fixture(scope="module")
def rollout():
    """(setup, state, host batch): 2 prompts x G samples of the tiny policy at SAMPLE_T."""
    _, params = init_model(CFG, seed=0)
    # Random weights give near-uniform next-token distributions, on which the temperature
    # barely matters; a 3x larger (tied) embedding sharpens them as a trained model's are.
    params["embed"] = params["embed"].replace(params["embed"][...] * 3.0)
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[CFG])
    setup, s0 = state.create_train_state(
        m, CFG, tiny.optim(), params=params, critic_cfg=CFG, critic_optim=tiny.optim(critic=True)
    )
    detok = types.SimpleNamespace(decode=lambda ids, skip_special_tokens=True: "")
    policy = TextPolicy(CFG, setup.graphdef, None, detok, eos_ids=[1], pad_id=0, batch_size=2)
    prompts = [
        (np.array([5, 9, 13, 2], np.int32), False),
        (np.arange(20, 26, dtype=np.int32), False),
    ]
    groups = policy.complete_ids(
        prompts,
        SamplingConfig(temperature=SAMPLE_T, max_new_tokens=NEW),
        key=jax.random.key(0),
        num_samples=G,
        params=s0.params,
    )
    rewards = np.array([[1, 0, 1, 0], [0, 1, 1, 0]], np.float32)
    batch, _ = pack_rollout(groups, rewards, response_width=NEW, pad_id=0)
    assert batch["response_mask"].sum() > 40
    return setup, s0, batch


def _first_step(rollout, algo: str, temperature: float) -> dict:
    setup, s0, batch = rollout
    config = tiny.config(f"stage=answer,algo={algo}", temperature=temperature, group_size=G)
    ref = state.make_reference(setup, s0.params) if config.train.kl_beta > 0 else None
    if algo == "grpo":
        update = loop.make_rl_update(
            setup, algo, grpo_cfg=grpo.GRPOConfig.from_config(config), ref_params=ref
        )
    else:
        update = loop.make_rl_update(
            setup, algo, ppo_cfg=ppo.PPOConfig.from_config(config), ref_params=ref
        )
    _, metrics = update(tiny.copy_tree(s0), batch)
    return {k: float(v) for k, v in jax.device_get(metrics).items()}


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_first_step_ratio_is_one_at_the_rollout_temperature(rollout, algo):
    m = _first_step(rollout, algo, SAMPLE_T)
    gap = m["logprob_gap_abs"]
    assert gap < 1e-4, m  # float32 on CPU: sampler and trainer agree to rounding
    assert abs(m["ratio_mean"] - 1.0) <= 2 * gap + 1e-6, m
    assert m["clip_frac"] == 0.0, m
    assert m["approx_kl"] < 1e-6, m


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_scoring_at_another_temperature_leaves_the_clip_range(rollout, algo):
    m = _first_step(rollout, algo, 1.0)
    assert m["logprob_gap_abs"] > 0.1, m
    assert m["clip_frac"] > 0.05, m
    assert m["approx_kl"] > 0.01, m
