"""The manager stage's reward path: G candidate outputs -> G banks -> frozen answerer -> EM."""

from __future__ import annotations

import re
from types import SimpleNamespace

import jax
import numpy as np

from memr1 import memory as mem
from memr1.train import manager_reward as mr

DIM = 64


def bag_of_words(texts):
    """A deterministic stand-in encoder: hashed bag of words, L2-normalised."""
    out = np.zeros((len(texts), DIM), np.float32)
    for i, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            out[i, sum(map(ord, word)) % DIM] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)


class RuleAnswerer:
    """Answers 'names of X's dogs' from the rendered memories: the names in the dog memory."""

    def __init__(self):
        self.prompts = []

    def complete(self, chats, sampling, key):
        outs = []
        for chat in chats:
            user = chat[-1]["content"]
            self.prompts.append(user)
            names = []
            for line in user.splitlines():
                if "dog" in line:
                    names += re.findall(r"named ((?:[A-Z]\w+)(?: and [A-Z]\w+)*)", line)
            answer = names[-1] if names else "unknown"
            outs.append([SimpleNamespace(text=f"- memory\n**Answer:** {answer}")])
        return outs


STATE = mr.ManagerState(
    speakers=("Andrew", "Jo"),
    owner=0,
    session_date="2:00 pm on 1 May, 2023",
    timestamp=1682949600,
    turn=30004,
    facts=("Andrew adopted another dog named Buddy.",),
    bank=(
        {"id": 7, "text": "Andrew has a dog named Toby", "owner": 0, "updated": 1680000000},
        {"id": 9, "text": "Jo likes hiking", "owner": 1, "updated": 1680000000},
        {"id": 11, "text": "Andrew works as a chef", "owner": 0, "updated": 1680000000},
    ),
    retrieved=(7, 11),
    qa=(("What are the names of Andrew's dogs?", "Toby and Buddy"),),
)

OUTPUTS = [
    # The right move: merge the new dog into the existing memory.
    '{"memory": [{"id": "0", "text": "Andrew has two dogs named Toby and Buddy", '
    '"event": "UPDATE", "old_memory": "Andrew has a dog named Toby"}]}',
    # The naive move: delete the old memory and add the new fact alone (loses Toby).
    '{"memory": [{"id": "0", "text": "x", "event": "DELETE"}, '
    '{"id": "2", "text": "Andrew adopted a dog named Buddy", "event": "ADD"}]}',
    # Unparseable: the bank stays as it was.
    "I think we should update things",
    # An id outside the shown set may not touch the other speaker's memory.
    '{"memory": [{"id": "5", "text": "gone", "event": "DELETE"}]}',
]


def _rewards(state, outputs, answerer):
    return mr.manager_rewards(
        state,
        outputs,
        answerer=answerer,
        embed=bag_of_words,
        k_per_speaker=5,
        capacity=16,
        text_bytes=96,
        key=jax.random.key(0),
    )


def test_rewards_follow_the_bank_each_candidate_builds():
    answerer = RuleAnswerer()
    rewards, parsed = _rewards(STATE, OUTPUTS, answerer)
    np.testing.assert_array_equal(rewards, [1.0, 0.0, 0.0, 0.0])
    assert [op.kind for op in parsed[0] if op.invalid is None] == ["UPDATE"]
    assert parsed[3][0].invalid == "unknown_id"
    # Each candidate's prompt shows the other speaker's memory untouched.
    assert all("Jo likes hiking" in p for p in answerer.prompts)


def test_a_malformed_reply_scores_zero_where_doing_nothing_scores_the_bank():
    state = mr.ManagerState(**{**STATE.__dict__, "qa": (("Names of Andrew's dogs?", "Toby"),)})
    outputs = [
        '{"memory": []}',  # validly nothing to do: the bank already answers "Toby"
        '{"memory": [{"id": "0", "text": "", "event": "NONE"}]}',  # the same, said with NONE
        "I think we should update things",  # unparseable
        '{"memory": [{"id": "0", "text": "Andrew has a do',  # cut off before any whole entry
    ]
    rewards, parsed = _rewards(state, outputs, RuleAnswerer())
    np.testing.assert_array_equal(rewards, [1.0, 1.0, 0.0, 0.0])
    assert [mr.is_malformed(ops) for ops in parsed] == [False, False, True, True]


def test_vmapped_candidates_equal_a_python_loop():
    bank, id_of = mr.base_bank(STATE, 16, 96, bag_of_words)
    id_map = dict(enumerate(id_of[i] for i in STATE.retrieved))
    groups = [mr.candidate_ops(STATE, t, id_map, bank, bag_of_words)[0] for t in OUTPUTS]
    batched = mr._apply_candidates(bank, mr._pad_ops(groups, bank))
    for g, ops in enumerate(groups):
        one = bank
        for op in ops:
            one = mem.apply_op(one, op)
        got = jax.tree.map(lambda x, g=g: x[g], batched)
        assert mem.text_view(got) == mem.text_view(one)


def test_no_linked_questions_gives_zero_reward():
    state = mr.ManagerState(**{**STATE.__dict__, "qa": ()})
    rewards, _ = _rewards(state, OUTPUTS[:2], RuleAnswerer())
    np.testing.assert_array_equal(rewards, [0.0, 0.0])
