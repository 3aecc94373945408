"""The manager stage's reward path: G candidate outputs -> G banks -> frozen answerer -> EM."""

from __future__ import annotations

import re
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from memr1 import memory as mem
from memr1.env import manager_reward as mr
from memr1.env.answer import AnswerConfig
from memr1.env.memory_store import BankSpec
from memr1.env.policy import SamplingConfig
from tests.train import tiny

DIM = 64


def bag_of_words(texts):
    """A deterministic stand-in encoder: hashed bag of words, L2-normalised."""
    out = np.zeros((len(texts), DIM), np.float32)
    for i, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            out[i, sum(map(ord, word)) % DIM] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)


def reply(text, finished=True):
    return SimpleNamespace(
        text=text, ids=np.zeros(3, np.int32), finished=finished, prompt_truncated=False
    )


class RuleAnswerer:
    """Answers 'names of X's dogs' from the rendered memories: the names in the dog memory."""

    batch_size = 3  # smaller than the items of a call: retrieval batches them
    last_run = None  # a rule runs no engine

    def __init__(self):
        self.prompts = []
        self.samplings = []

    def complete(self, chats, sampling, key, progress=None):
        self.samplings.append(sampling)
        if progress is not None:
            progress(list(range(len(chats))))
        outs = []
        for chat in chats:
            user = chat[-1]["content"]
            self.prompts.append(user)
            names = []
            for line in user.splitlines():
                if "dog" in line:
                    names += re.findall(r"named ((?:[A-Z]\w+)(?: and [A-Z]\w+)*)", line)
            answer = names[-1] if names else "unknown"
            outs.append([reply(f"- memory\n**Answer:** {answer}")])
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


SAMPLING = SamplingConfig(temperature=0.0, max_new_tokens=77)


def env(
    answerer,
    retriever="exact_numpy",
    overflow="evict_oldest",
    capacity=16,
    *,
    k_per_speaker=5,
    text_bytes=96,
    sampling=SAMPLING,
):
    """The manager reward's settings over the bag-of-words encoder (shared by the RL tests),
    from the tiny config as the train CLI builds them."""
    config = tiny.config()
    config.memory.update(retriever=retriever, overflow=overflow, capacity=capacity)
    config.memory.update(k_per_speaker=k_per_speaker, text_bytes=text_bytes)
    config.agents.update(style="compact", distill=True, temperature=sampling.temperature)
    config.agents.answer_max_new_tokens = sampling.max_new_tokens
    return mr.RewardEnv(
        answerer=answerer,
        embed=bag_of_words,
        answer=AnswerConfig.from_config(config),
        bank=BankSpec.from_config(config),
    )


def _rewards(state, outputs, answerer, **kw):
    got = mr.manager_rewards([state], [outputs], env(answerer, **kw), key=jax.random.key(0))
    return got.rewards[0], got.parsed[0]


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
    bank, id_of = mr.base_bank(STATE, env(None).bank, bag_of_words)
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


def test_the_frozen_answerer_answers_with_the_configured_sampling_and_retriever():
    answerer = RuleAnswerer()
    exact, _ = _rewards(STATE, OUTPUTS, answerer)
    assert answerer.samplings and all(s == SAMPLING for s in answerer.samplings)
    # ScaNN (brute force at this size) reads the candidate banks as the exact backend does.
    scann_answerer = RuleAnswerer()
    scann, _ = _rewards(STATE, OUTPUTS, scann_answerer, retriever="scann")
    np.testing.assert_array_equal(exact, scann)
    assert scann_answerer.prompts == answerer.prompts


def test_states_of_a_step_are_answered_together_and_keep_their_order():
    other = mr.ManagerState(**{**STATE.__dict__, "qa": (("Names of Andrew's dogs?", "Toby"),)})
    answerer = RuleAnswerer()
    got = mr.manager_rewards(
        [STATE, other], [OUTPUTS[:2], OUTPUTS[:2]], env(answerer), key=jax.random.key(0)
    )
    np.testing.assert_array_equal(got.rewards, [[1.0, 0.0], [0.0, 0.0]])
    # 2 states x 2 candidates x 1 question, retrieved in batches of 3, answered in one run.
    assert len(answerer.samplings) == 1
    with pytest.raises(ValueError, match="group sizes"):
        mr.manager_rewards([STATE, other], [OUTPUTS[:2], OUTPUTS[:3]], env(answerer), key=None)


class CutAnswerer(RuleAnswerer):
    """Writes memory lines until the budget runs out, never reaching **Answer:**."""

    def complete(self, chats, sampling, key, progress=None):
        self.samplings.append(sampling)
        return [[reply("- Andrew has a dog named Toby\n- Andrew", finished=False)] for _ in chats]


def test_replies_cut_before_the_answer_and_malformed_replies_are_counted():
    got = mr.manager_rewards([STATE], [OUTPUTS], env(CutAnswerer()), key=jax.random.key(0))
    np.testing.assert_array_equal(got.rewards, [[0.0, 0.0, 0.0, 0.0]])
    assert got.stats["answerer_cut_frac"] == 1.0
    assert got.stats["answerer_no_marker_frac"] == 1.0
    assert got.stats["malformed_frac"] == 0.25  # the "I think we should update things" reply
    fine = mr.manager_rewards([STATE], [OUTPUTS[:2]], env(RuleAnswerer()), key=jax.random.key(0))
    assert fine.stats == {
        "em": 0.5,  # the UPDATE's bank answers right, the DELETE+ADD's wrong
        "malformed_frac": 0.0,
        "duplicate_id_frac": 0.0,
        "extra_add_frac": 0.0,
        "answerer_cut_frac": 0.0,
        "answerer_no_marker_frac": 0.0,
        "answerer_prompt_cut_frac": 0.0,
        "answerer_distinct_frac": 1.0,
    }


# Candidates whose banks differ only in a memory the question does not retrieve at one memory
# a speaker: the answerer reads the same prompt over each.
UNSEEN = [
    '{"memory": []}',
    '{"memory": [{"id": "3", "text": "Andrew enjoys jazz records", "event": "ADD"}]}',
    '{"memory": [{"id": "3", "text": "Andrew enjoys jazz records", "event": "ADD"}]}',
    OUTPUTS[0],
]


@pytest.mark.parametrize("k_per_speaker, distinct", [(1, 2), (5, 3)])
def test_a_recurring_prompt_is_answered_once_under_greedy_decoding(k_per_speaker, distinct):
    """Greedy replies are a function of the prompt: each distinct prompt is answered once and
    every question that has it gets that reply, so the rewards are those of answering each."""
    greedy, sampled = RuleAnswerer(), RuleAnswerer()
    once = mr.manager_rewards(
        [STATE], [UNSEEN], env(greedy, k_per_speaker=k_per_speaker), key=jax.random.key(0)
    )
    hot = SamplingConfig(temperature=1.0, max_new_tokens=77)
    each = mr.manager_rewards(
        [STATE], [UNSEEN], env(sampled, k_per_speaker=k_per_speaker, sampling=hot),
        key=jax.random.key(0),
    )  # fmt: skip
    np.testing.assert_array_equal(once.rewards, each.rewards)
    assert len(greedy.prompts) == distinct and len(set(greedy.prompts)) == distinct
    assert once.stats["answerer_distinct_frac"] == distinct / 4
    # A sampled reply stays one draw per question.
    assert len(sampled.prompts) == 4 and each.stats["answerer_distinct_frac"] == 1.0


def test_answering_reports_progress_per_question_when_prompts_recur():
    from memr1.env.answer import answer_over_banks

    views, _ = mr.candidate_banks(STATE, UNSEEN, env(None, k_per_speaker=1))
    done = []
    answerer = RuleAnswerer()
    _, replies = answer_over_banks(
        [STATE.qa[0][0]] * 4, views, embed=bag_of_words, answerer=answerer,
        cfg=env(answerer, k_per_speaker=1).answer, key=jax.random.key(0), progress=done.append,
    )  # fmt: skip
    assert sum(done) == len(replies) == 4 and len(answerer.prompts) == 2
    assert replies[0] == replies[1] == replies[2] and replies[3].answer == "Toby and Buddy"


def test_a_candidate_that_overflows_a_raising_bank_is_an_error():
    adds = '{"memory": [{"id": "3", "text": "Andrew adopted a dog named Buddy", "event": "ADD"}]}'
    with pytest.raises(mem.BankOverflowError):
        _rewards(STATE, [adds], RuleAnswerer(), overflow="raise", capacity=3)


def test_the_reward_equals_evaluations_score_of_the_same_bank():
    """One Algorithm 3: answering over a candidate bank is answering over a live memory."""
    from memr1.data.records import QA, Conversation
    from memr1.env.answer import answer_questions
    from memr1.env.memory_store import ConversationMemory

    answerer = RuleAnswerer()
    rewards, parsed = _rewards(STATE, OUTPUTS[:1], answerer)
    spec = env(answerer).bank
    memory = ConversationMemory("c", STATE.speakers, spec, 64)
    for m in sorted(STATE.bank, key=lambda m: m["id"]):
        memory.add_texts(
            [m["text"]], owner=m["owner"], timestamp=m["updated"], turn=1, embed=bag_of_words
        )
    ops = [op for op in parsed[0] if op.invalid is None]
    memory.apply(ops, owner=0, timestamp=STATE.timestamp, turn=2, embed=bag_of_words)
    qa = QA(question=STATE.qa[0][0], answer=STATE.qa[0][1], category=1)
    conv = Conversation("c", *STATE.speakers, sessions=(), qa=(qa,), source="test")
    evaluator = RuleAnswerer()
    preds = answer_questions(
        [(conv, 0, qa)],
        {"c": memory},
        embed=bag_of_words,
        answerer=evaluator,
        cfg=env(evaluator).answer,
        key=jax.random.key(0),
    )
    assert preds[0].em == rewards[0] == 1.0
    assert evaluator.prompts == answerer.prompts
