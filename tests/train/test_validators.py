"""The validation passes on scripted policies: greedy, the whole set in one sampler call, and
scored by the stage's own reward path (answer EM / F1; the manager's EM through the frozen
answerer, its malformed share and op mix)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from memr1.env import rollout
from memr1.env.manager_reward import ManagerState
from memr1.train import validators
from tests.fake_devices import xla_flags
from tests.train.test_manager_reward import OUTPUTS, STATE, RuleAnswerer, env


class Scripted:
    """A policy whose reply to a prompt is `reply(prompt text)`; it records its calls."""

    def __init__(self, reply, batch_size=2):
        self.reply, self.batch_size, self.calls = reply, batch_size, []

    def with_batch_size(self, n):
        clone = Scripted(self.reply, n)
        clone.calls = self.calls  # one record of the calls
        return clone

    def decode_copy(self, params=None):
        return self  # a rollout lays its weights out once; a scripted policy has none

    last_run = None  # a scripted policy runs no engine

    def complete(self, chats, sampling, *, key, num_samples=1, params=None):
        assert len(chats) <= self.batch_size
        self.calls.append((len(chats), sampling.temperature, num_samples))
        text = lambda chat: self.reply(chat[-1]["content"])
        ids = np.zeros(2, np.int32)
        return [
            [SimpleNamespace(text=text(c), ids=ids, finished=True, prompt_truncated=False)]
            * num_samples
            for c in chats
        ]


class Answerer(RuleAnswerer):
    def with_batch_size(self, n):
        self.batch_size = n
        return self

    def decode_copy(self, params=None):
        return self


PEOPLE = (("Ann", "Paris"), ("Bo", "New Rome"), ("Cy", "Oslo"))
REPLIES = {"Ann": "**Answer:** Paris", "Bo": "**Answer:** Rome", "Cy": "no idea"}


def answer_states(people):
    return [
        rollout.AnswerState(
            question=f"Where does {name} live?",
            gold=city,
            memories=((name, (("1 May 2023", f"{name} lives in {city}"),)), ("Jo", ())),
        )
        for name, city in people
    ]


def test_the_answer_pass_scores_greedy_replies_in_one_call():
    policy = Scripted(lambda prompt: next(v for k, v in REPLIES.items() if k in prompt))
    validate = validators.answer_validator(
        policy, answer_states(PEOPLE), max_new_tokens=8, style="compact", distill=True
    )
    got = validate(None, 0)
    assert policy.calls == [(3, 0.0, 1)]  # the whole set, greedily, one sample each
    assert got["val/em"] == pytest.approx(1 / 3)
    assert got["val/f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)  # "Rome" vs "New Rome": F1 2/3
    assert got["val/no_marker_frac"] == pytest.approx(1 / 3)
    assert all(k.startswith("val/") for k in got) and "val/time_sample_s" not in got
    with pytest.raises(ValueError, match="no validation states"):
        validators.answer_validator(policy, [], max_new_tokens=8, style="compact", distill=True)


def test_the_manager_pass_scores_through_the_frozen_answerer():
    no_qa = ManagerState(**{**STATE.__dict__, "qa": ()})
    other = ManagerState(**{**STATE.__dict__, "turn": 30005})
    answerer = Answerer()
    # The right UPDATE for the first state, an unreadable reply for the second.
    replies = iter([OUTPUTS[0], OUTPUTS[2]])
    policy = Scripted(lambda prompt: next(replies))
    validate = validators.manager_validator(
        policy, [STATE, no_qa, other], env(answerer), max_new_tokens=32, style="compact"
    )
    got = validate(None, 0)
    assert policy.calls == [(2, 0.0, 1)]  # the turns with questions, in one greedy call
    assert answerer.batch_size >= 2 and len(answerer.samplings) == 1  # one answerer call
    assert got["val/em"] == pytest.approx(0.5)  # the malformed reply scores 0
    assert got["val/malformed_frac"] == pytest.approx(0.5)
    assert got["val/op_update_frac"] > 0
    with pytest.raises(ValueError, match="no validation turn has a linked question"):
        validators.manager_validator(
            policy, [no_qa], env(answerer), max_new_tokens=32, style="compact"
        )


def test_shares_of_several_processes_combine_into_the_means_over_all_states(monkeypatch):
    shares = [{"n": 3, "sums": {"em": 2.0}}, {"n": 1, "sums": {"em": 0.0, "op_add_frac": 1.0}}]
    monkeypatch.setattr(validators.multihost, "gather", lambda value: shares)
    got = validators.combine(3, {"em": 2 / 3})
    assert got == {"val/em": 0.5, "val/op_add_frac": 0.25}
    assert jax.process_count() == 1


@pytest.mark.slow
def test_two_processes_score_their_uneven_shares_and_log_the_same_means(tmp_path):
    """3 states over 2 processes (shares of 1 and 2): each samples only its share, and both
    return the means over all 3, those of one process scoring the whole set."""
    root = Path(__file__).resolve().parents[2]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for pid in range(2):
        env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(root))
        env.update(
            JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2",
            JAX_PROCESS_ID=str(pid), XLA_FLAGS=xla_flags(1),
        )  # fmt: skip
        command = [sys.executable, "-m", "tests.train.multiprocess_validation", str(tmp_path)]
        procs.append(
            subprocess.Popen(
                command,
                cwd=root,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )  # fmt: skip
        )
    try:
        outs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, text in zip(procs, outs, strict=True):
        assert p.returncode == 0, text[-3000:]
    got = [json.loads((tmp_path / f"val-p{i}.json").read_text()) for i in range(2)]
    assert [g["calls"] for g in got] == [[[1, 0.0, 1]], [[2, 0.0, 1]]]
    policy = Scripted(lambda prompt: next(v for k, v in REPLIES.items() if k in prompt))
    one = validators.answer_validator(
        policy, answer_states(PEOPLE), max_new_tokens=8, style="compact", distill=True
    )(None, 0)
    for g in got:
        assert g["scores"].keys() == one.keys()
        for key, value in one.items():
            assert g["scores"][key] == pytest.approx(value, rel=1e-6), key  # float32 means
