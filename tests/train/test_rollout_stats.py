"""A rollout logs the share of prompts cut to agents.max_prompt_tokens (prompt_truncated_frac),
apart from the share of replies cut at the budget (truncated_frac)."""

from __future__ import annotations

import types

import jax
import numpy as np

from memr1.env import rollout
from memr1.env.policy import Completion, SamplingConfig

STATE = rollout.AnswerState(
    question="Where does Ann live?",
    gold="Paris",
    memories=(("Ann", (("1 May 2023", "Ann lives in Paris"),)), ("Jo", ())),
)


def test_answer_rollout_logs_cut_prompts_apart_from_cut_replies():
    # Two states x G 2: three of the four prompts were cut, one reply ran out of its budget.
    cut = iter([True, True, False, True])
    done = iter([True, False, True, True])

    def complete(chats, sampling, *, key, num_samples):
        return [
            [
                Completion(
                    "**Answer:** Paris",
                    np.array([5]),
                    np.array([7]),
                    np.zeros(1),
                    next(done),
                    prompt_truncated=next(cut),
                )  # fmt: skip
                for _ in range(num_samples)
            ]
            for _ in chats
        ]

    policy = types.SimpleNamespace(complete=complete, last_run=types.SimpleNamespace())
    policy.last_run.slot_occupancy = 0.5
    policy.decode_copy = lambda params: policy
    _, rewards, stats = rollout.answer_rollout(
        policy,
        None,
        [STATE, STATE],
        group_size=2,
        sampling=SamplingConfig(temperature=1.0, max_new_tokens=4),
        key=jax.random.key(0),
        style="compact",
    )
    assert stats["prompt_truncated_frac"] == 0.75
    assert stats["truncated_frac"] == 0.25
    assert stats["slot_occupancy"] == 0.5  # the engine run's, logged as train/slot_occupancy
    assert rewards.shape == (2, 2)
