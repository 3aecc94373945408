"""The reading probe tells a reader from a policy that answers from the world's prior."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from experiments.cpu_demo.answer_teacher import CarelessAnswerTeacher, RuleReader
from experiments.cpu_demo.reading import is_readable, reading_scores
from memr1.env.policy import Completion
from memr1.tuples.schema import AnswerMemory, AnswerTuple

WHEN = "1:56 pm on 8 May, 2023"


def _tuple(question, answer, texts):
    memories = tuple(
        AnswerMemory(speaker=name, id=i, when=WHEN, text=text, score=1.0)
        for i, (name, text) in enumerate(texts)
    )
    return AnswerTuple(
        sample_id="c0",
        qa_index=0,
        question=question,
        answer=answer,
        category=1,
        evidence=(),
        speakers=("Ana", "Bo"),
        memories=memories,
        builder="test",
    )


TUPLES = [
    # readable: the gold is written in Ana's memory
    _tuple(
        "Where does Ana live?",
        "Austin",
        [("Ana", "Ana lives in Austin."), ("Bo", "Bo lives in Denver.")],
    ),
    _tuple(
        "What does Bo do for a living?",
        "chef",
        [("Ana", "Ana works as a nurse."), ("Bo", "Bo works as a chef.")],
    ),
    # unreadable: the bank lost the current value
    _tuple(
        "Where does Bo live?", "Denver", [("Ana", "Ana lives in Austin."), ("Bo", "Bo likes jazz.")]
    ),
]
CFG = SimpleNamespace(distill=False, style="compact", sampling=None)


class Constant:
    """A policy that always answers the same: the world's prior, read from no memory."""

    def __init__(self, answer):
        self.text = f"**Answer:** {answer}"

    def complete(self, chats, sampling=None, *, key=None):
        empty = np.zeros(0, np.int32)
        return [
            [Completion(self.text, empty, empty, np.zeros(0, np.float32), finished=True)]
        ] * len(chats)


def test_is_readable_means_the_gold_is_written_in_a_shown_memory():
    assert [is_readable(t) for t in TUPLES] == [True, True, False]


def test_a_reader_scores_on_readable_questions_and_a_prior_does_not():
    teacher = CarelessAnswerTeacher(0, stale_bias=0.5, person_blind=True, hedge=1.0)
    reader = reading_scores(TUPLES, RuleReader(style="compact"), CFG, teacher)
    assert reader["questions"] == 3
    assert reader["groups"]["readable"] == pytest.approx(
        # the person-blind hedging teacher answers "Austin or Denver", "nurse or chef"
        {"n": 2, "em": 1.0, "teacher_em": 0.0, "agrees_with_teacher": 0.0}
    )
    assert reader["groups"]["unreadable"]["em"] == 0.0
    assert reader["readable_by_kind"] == {"city": {"n": 1, "em": 1.0}, "job": {"n": 1, "em": 1.0}}
    prior = reading_scores(TUPLES, Constant("Denver"), CFG, teacher)
    assert prior["groups"]["readable"]["em"] == 0.0
    assert prior["groups"]["unreadable"]["em"] == 1.0  # right where the bank cannot tell it
