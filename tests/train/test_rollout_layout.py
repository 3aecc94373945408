"""A rollout lays each weight copy out for decoding once (issue 25 §2), however many engine
runs it makes: the policy's for its own run, then the frozen answerer's for the reward's.
Counted as the layout programs `rollout_params` runs (a bf16-compute model with float32
weights, so each layout is a real copy)."""

from __future__ import annotations

import types

import jax
import numpy as np
import pytest

from memr1.env import policy as policy_mod
from memr1.env import rollout
from memr1.env.manager_reward import RewardEnv, Rewards
from memr1.env.policy import SamplingConfig, TextPolicy
from memr1.models.transformer import init_model
from memr1.sampling.layout import rollout_params
from tests.train import tiny

pytestmark = pytest.mark.slow  # compiles the tiny sampler

CFG = tiny.CFG.replace(remat=False, dtype="bfloat16")
TOKENS = types.SimpleNamespace(
    chat_template=None,
    encode=lambda text, add_special_tokens=True: [5 + len(text) % 7, 9, 13],
    decode=lambda ids, skip_special_tokens=True: "**Answer:** x",
)
STATE = rollout.AnswerState(
    question="Where does Ann live?", gold="x", memories=(("Ann", (("1 May", "in Paris"),)),)
)
SAMPLING = SamplingConfig(temperature=1.0, max_new_tokens=2)


@pytest.fixture
def copies(monkeypatch):
    made = []
    real = policy_mod.rollout_params

    def counting(params, cfg):
        out = real(params, cfg)
        if out is not params:
            made.append(out)
        return out

    monkeypatch.setattr(policy_mod, "rollout_params", counting)
    return made


def _policy(params, name):
    graphdef, _ = init_model(CFG, seed=0)
    kw = dict(eos_ids=[1], pad_id=0, batch_size=1, max_prompt_tokens=64, name=name)
    return TextPolicy(CFG, graphdef, params, TOKENS, **kw)


def test_one_layout_per_rollout_for_three_sampler_calls(copies):
    _, params = init_model(CFG, seed=0)
    policy = _policy(None, "answer")
    groups, rewards, _ = rollout.answer_rollout(
        policy, params, [STATE] * 3, group_size=2, sampling=SAMPLING, key=jax.random.key(0),
        style="compact",
    )  # fmt: skip
    assert len(groups) == 3 and rewards.shape == (3, 2)
    assert len(copies) == 1  # three calls of one prompt each, one decode copy


def test_the_manager_rollout_lays_out_the_answerer_once_for_the_reward(copies, monkeypatch):
    _, params = init_model(CFG, seed=0)
    _, frozen = init_model(CFG, seed=1)
    seen = {}

    def rewards(states, outputs, env, *, key):
        # As answer_over_banks does: one `complete` per batch of questions.
        for i in range(3):
            chat = [{"role": "user", "content": f"question {i}"}]
            env.answerer.complete([chat], SAMPLING, key=jax.random.key(i))
        seen["answerer"] = env.answerer.params
        return Rewards(np.zeros((len(states), 2), np.float32), [[[]] * 2] * len(states), {})

    monkeypatch.setattr(rollout, "manager_rewards", rewards)
    monkeypatch.setattr(
        rollout,
        "manager_messages",
        lambda s, style, show_date: [{"role": "user", "content": "facts"}],
    )
    env = RewardEnv(answerer=_policy(frozen, "frozen answerer"), embed=None, answer=None, bank=None)
    rollout.manager_rollout(
        _policy(None, "manager"), params, [None] * 3, group_size=2, sampling=SAMPLING,
        key=jax.random.key(0), style="compact", env=env,
    )  # fmt: skip
    # The policy's copy, then one of the answerer's for the reward's three calls (not three).
    assert len(copies) == 2 and copies[1] is seen["answerer"]
    assert rollout_params(seen["answerer"], CFG) is seen["answerer"]


@pytest.mark.parametrize("rows, slots", [(0, 6), (2, 4)])
def test_the_rollout_batch_is_a_training_setting(monkeypatch, rows, slots):
    """train.rollout_batch_size, not evaluation's agents.batch_size (1 here), sets a rollout's
    decode slots (prompts × G): 0 = the process's 3 states at once. Either way the rollout is
    one engine run."""
    from memr1.train import stages
    from memr1.tuples import io as tuples_io

    monkeypatch.setattr(tuples_io, "read_tuples", lambda source, kind: [STATE] * 3)
    monkeypatch.setattr(rollout, "answer_state_from_tuple", lambda x: x)
    config = tiny.config("runlocal,stage=answer", group_size=2, rollout_batch_size=rows)
    config.agents.update(batch_size=1, answer_max_new_tokens=2)
    policy = _policy(None, "answer")
    seen = []
    real = policy.engine.generate

    def generate(params, prompts, **kw):
        seen.append((len(prompts), kw["slots"]))
        return real(params, prompts, **kw)

    monkeypatch.setattr(policy.engine, "generate", generate)
    states, do_rollout = stages.rl_states(config, None, policy, "tuples")
    _, params = init_model(CFG, seed=0)
    groups, _, stats = do_rollout(params, states, jax.random.key(0))
    assert len(groups) == 3 and seen == [(3, slots)]
    assert 0.0 < stats["slot_occupancy"] <= 1.0


def test_more_prompts_than_slots_are_one_run_that_refills_its_slots(monkeypatch):
    """3 prompts at a batch of 2 (4 slots for G = 2): one engine run, whose slots take the third
    prompt's rows as the first ones end; every row comes back."""
    _, params = init_model(CFG, seed=0)
    policy = _policy(params, "answer").with_batch_size(2)
    seen = []
    real = policy.engine.generate

    def generate(params, prompts, **kw):
        out = real(params, prompts, **kw)
        seen.append((len(prompts), kw["slots"], out))
        return out

    monkeypatch.setattr(policy.engine, "generate", generate)
    prompts = [(np.asarray([5 + i, 9, 13], np.int32), False) for i in range(3)]
    groups = policy.complete_ids(prompts, SAMPLING, key=jax.random.key(0), num_samples=2)
    assert len(groups) == 3 and all(len(g) == 2 for g in groups)
    ((n, slots, out),) = seen
    assert (n, slots) == (3, 4) and out.stats.slots == 4
    assert (out.lengths > 0).all() and policy.last_run is out.stats
