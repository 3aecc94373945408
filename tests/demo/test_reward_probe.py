"""The reward probe's fixed behaviours and grouping (experiments/cpu_demo/reward_probe.py); the
quick-demo test runs the tool whole through a real frozen Answer Agent."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from experiments.cpu_demo.answer_teacher import RuleReader
from experiments.cpu_demo.reward_probe import (
    BEHAVIOURS,
    behaviour_replies,
    gold_group,
    probe_rewards,
    spread_table,
)
from memr1.env.answer import AnswerConfig
from memr1.env.manager_io import ADD, DELETE, UPDATE, parse_manager_output
from memr1.env.manager_reward import RewardEnv
from memr1.env.memory_store import BankSpec
from memr1.env.policy import Completion
from memr1.train.stages import linked_questions
from memr1.tuples.schema import LinkedQA, ManagerTuple, MemoryRecord
from tests.demo.turns import Turn
from tests.train import tiny


def _ops(turn, reply):
    _, id_map = turn.manager_input(style="compact")
    parsed = parse_manager_output(reply, id_map, new_fact_count=len(turn.facts))
    return [(op.kind, op.target, op.text) for op in parsed.effective()]


def test_behaviours_on_a_list_item_a_change_and_a_repeat():
    toby, home = "Andrew adopted a dog named Toby yesterday.", "Andrew lives in Chicago."
    item = Turn(("Andrew adopted another dog named Buddy today.",), ((7, toby), (2, home)))
    replies = behaviour_replies(item)
    assert set(replies) == set(BEHAVIOURS)
    assert _ops(item, replies["clean"]) == [(UPDATE, 7, "Andrew has two dogs: Toby and Buddy.")]
    assert _ops(item, replies["add"]) == [(ADD, None, item.facts[0])]
    assert _ops(item, replies["delete_add"]) == [(DELETE, 7, ""), (ADD, None, item.facts[0])]
    assert _ops(item, replies["none"]) == []
    assert _ops(item, replies["overwrite"]) == [(UPDATE, 7, item.facts[0])]
    alone = Turn(("Andrew works as a baker.",), ())
    assert _ops(alone, behaviour_replies(alone)["overwrite"]) == [(ADD, None, alone.facts[0])]

    move = Turn(("Andrew moved from Chicago to Seattle two days ago.",), ((2, home),))
    replies = behaviour_replies(move)
    assert _ops(move, replies["clean"]) == [(UPDATE, 2, "Andrew moved to Seattle two days ago.")]
    assert _ops(move, replies["add"]) == [(ADD, None, move.facts[0])]

    repeat = Turn((home,), ((2, home),))
    replies = behaviour_replies(repeat)
    assert _ops(repeat, replies["clean"]) == [] and _ops(repeat, replies["delete_add"]) == []
    assert _ops(repeat, replies["add"]) == [(ADD, None, home)]  # the duplicate


def test_gold_groups_split_updates_into_lists_and_changes():
    assert gold_group({"op": "UPDATE", "delete_add_ok": True}) == "UPDATE-change"
    assert gold_group({"op": "UPDATE", "delete_add_ok": False}) == "UPDATE-list"
    assert gold_group({"op": "NOOP", "delete_add_ok": False}) == "NOOP"


def _words(texts):
    """A bag-of-words embedder: enough for retrieval to find a speaker's memories by topic."""
    vocab = "andrew maria dog dogs toby buddy lives chicago names trip rome planning travel".split()
    out = np.zeros((len(texts), len(vocab) + 1), np.float32)
    for row, text in enumerate(texts):
        for word in text.lower().replace(".", " ").replace("?", " ").replace("'s", " ").split():
            out[row, vocab.index(word) if word in vocab else -1] += 1.0
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _state(fact, memories, question, answer):
    """A manager-stage state of Andrew's turn D2:1: the bank holds ``memories`` (Andrew's, all
    shown to the manager), the turn states ``fact``, one linked question."""
    bank = tuple(
        MemoryRecord(id=i, text=text, owner=0, updated=1_683_000_000, dia_id=f"D1:{i + 2}")
        for i, text in enumerate(memories)
    )
    return ManagerTuple(
        sample_id="s",
        dia_id="D2:1",
        turn_index=5,
        speaker="Andrew",
        owner=0,
        speakers=("Andrew", "Maria"),
        session_date="1:56 pm on 8 May, 2023",
        timestamp=1_683_554_160,
        window_start=0,
        facts=(fact,),
        retrieved=tuple((m.id, m.text) for m in bank),
        bank=bank,
        qa=(LinkedQA(0, question, answer, 1, ("D2:1",)),),
        builder="test",
    )


def _probe(state, op, delete_add_ok=False):
    """(gold group, mean reward per behaviour) of one state through the careful rule reader."""
    config = tiny.config()
    config.memory.update(k_per_speaker=2, capacity=8, text_bytes=64, retriever="exact_numpy")
    config.agents.update(style="compact", distill=True, temperature=0.0)
    config.agents.answer_max_new_tokens = 256
    env = RewardEnv(
        answerer=RuleReader(),
        embed=_words,
        answer=AnswerConfig.from_config(config),
        bank=BankSpec.from_config(config),
    )
    got = probe_rewards([state], {("s", "D2:1"): {"op": op, "delete_add_ok": delete_add_ok}}, env)
    assert got["states"] == 1
    ((group, result),) = got["groups"].items()
    assert result["n"] == 1
    return group, result["reward"]


def test_through_a_careful_reader_only_the_merge_answers_the_list_question():
    state = _state(
        "Andrew adopted another dog named Buddy today.",
        ("Andrew adopted a dog named Toby yesterday.", "Andrew lives in Chicago."),
        "What are the names of Andrew's dogs?",
        "Toby and Buddy",
    )
    # Merged: "Andrew has two dogs: Toby and Buddy." Split, lost or written over Toby, the
    # newest dog memory names Buddy alone; with no write, Toby alone.
    assert _probe(state, "UPDATE") == (
        "UPDATE-list",
        {"clean": 1.0, "add": 0.0, "delete_add": 0.0, "overwrite": 0.0, "none": 0.0},
    )


def test_through_a_careful_reader_a_kept_plan_answers_a_cancellation_wrongly():
    state = _state(
        "Andrew cancelled the trip to Rome.",
        ("Andrew is planning a trip to Rome.", "Andrew lives in Chicago."),
        "Where is Andrew planning to travel?",
        "nowhere",
    )
    # Deleted, or the cancellation stored as the newer memory: "nowhere". Kept alone: "Rome".
    assert _probe(state, "DELETE") == (
        "DELETE",
        {"clean": 1.0, "add": 1.0, "delete_add": 1.0, "overwrite": 1.0, "none": 0.0},
    )


def test_through_a_careful_reader_a_repeat_stored_again_hides_the_merged_list():
    state = _state(
        "Andrew has a dog named Toby.",
        ("Andrew has two dogs: Toby and Buddy.", "Andrew lives in Chicago."),
        "What are the names of Andrew's dogs?",
        "Toby and Buddy",
    )
    # NONE keeps the bank; the duplicate ADD is the newest dog memory, and it names Toby alone.
    assert _probe(state, "NOOP") == (
        "NOOP",
        {"clean": 1.0, "add": 0.0, "delete_add": 1.0, "overwrite": 0.0, "none": 1.0},
    )


def test_only_the_shown_memories_questions_make_an_overwrite_cost():
    state = _state(
        "Andrew's favorite food is tacos.",
        ("Andrew lives in Chicago.",),
        "What is Andrew's favorite food?",
        "tacos",
    )
    home = LinkedQA(1, "Where does Andrew live?", "Chicago", 1, ("D1:2",))
    writer = dataclasses.replace(state, dia_id="D1:2", facts=("Andrew lives in Chicago.",))
    records = [dataclasses.replace(writer, qa=(home,)), state]
    # The turn's own question: the new fact written over the home memory answers it as an ADD.
    (own,) = [r for r in linked_questions(records, "answerable") if r.dia_id == "D2:1"]
    assert _probe(own, "ADD")[1]["overwrite"] == 1.0
    # With the shown memory's question read too, the overwrite loses what that memory answered.
    (shown,) = [r for r in linked_questions(records, "shown") if r.dia_id == "D2:1"]
    assert shown.qa == (state.qa[0], home)
    assert _probe(shown, "ADD")[1] == {
        "clean": 1.0,
        "add": 1.0,
        "delete_add": 1.0,
        "overwrite": 0.5,
        "none": 0.5,
    }


def test_a_state_without_a_gold_label_is_named():
    turn = Turn(("Andrew lives in Boston.",), (), sample_id="conv-9", dia_id="D3:4")
    with pytest.raises(KeyError, match="conv-9 D3:4"):
        probe_rewards([turn], {}, None)


class _Constant:
    """An Answer Agent that answers every question with one text, whatever it is shown."""

    batch_size = 8

    def __init__(self, answer):
        self.answer = answer

    def complete(self, chats, sampling=None, *, key=None, num_samples=1):
        text = f"**Answer:** {self.answer}"
        done = Completion(text, np.zeros(1, np.int32), np.zeros(1, np.int32),
                          np.zeros(1, np.float32), finished=True)  # fmt: skip
        return [[done] * num_samples for _ in chats]


def _env(answerer):
    config = tiny.config()
    config.memory.update(k_per_speaker=1, capacity=8, text_bytes=64, retriever="exact_numpy")
    config.agents.update(style="compact", distill=True, temperature=0.0)
    config.agents.answer_max_new_tokens = 256
    return RewardEnv(
        answerer=answerer,
        embed=_words,
        answer=AnswerConfig.from_config(config),
        bank=BankSpec.from_config(config),
    )


def test_the_spread_table_tells_an_unread_group_from_an_unseen_one():
    dogs = _state(
        "Andrew adopted another dog named Buddy today.",
        ("Andrew adopted a dog named Toby yesterday.", "Andrew lives in Chicago."),
        "What are the names of Andrew's dogs?",
        "Toby and Buddy",
    )
    merge = (
        '{"memory": [{"event": "UPDATE", "id": "0", '
        '"text": "Andrew has two dogs: Toby and Buddy."}]}'
    )
    nothing = '{"memory": []}'
    # The merge changes the memory the dog question retrieves, the empty reply does not: the rule
    # reader ranks them (1 / 0); an agent that answers "Toby" whatever it reads scores both 0,
    # one that answers "Toby and Buddy" scores both 1.
    replies = [[merge, nothing], [nothing, nothing]]
    rules = _env(RuleReader())
    got = spread_table([dogs, dogs], replies, _env(_Constant("Toby")), rules)
    assert got == {
        "groups": 2, "group_size": 2, "reader": 0.0, "rules": 0.5,
        "rules_only_reader_zero": 0.5, "rules_only_reader_flat": 0.0, "reader_only": 0.0,
        "unseen": 0.5,
    }  # fmt: skip
    flat = spread_table([dogs], replies[:1], _env(_Constant("Toby and Buddy")), rules)
    assert flat["rules_only_reader_flat"] == 1.0 and flat["unseen"] == 0.0
    # Through the rule reader itself every ranked group is the reader's.
    same = spread_table([dogs], replies[:1], rules, rules)
    assert same["reader"] == same["rules"] == 1.0 and same["reader_only"] == 0.0
    with pytest.raises(ValueError, match="1 groups of replies for 2 states"):
        spread_table([dogs, dogs], replies[:1], rules, rules)
