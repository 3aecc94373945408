"""The answer reading rows: real renderer and formatter, answers found only in the prompt."""

from __future__ import annotations

import collections

import pytest

from experiments.cpu_demo.answer_teacher import CarelessAnswerTeacher
from experiments.cpu_demo.read_rows import answer_read_rows
from memr1.env.answer_io import extract_final_answer, parse_answer_input

WORDS = ["Kalo", "Mivu", "Tesa", "rope", "dusk", "tide", "sand", "mint", "fern", "moss"]


@pytest.mark.parametrize("k", [1, 2])
def test_rows_are_answered_by_a_careful_reader_of_their_prompt(k):
    rows = answer_read_rows(WORDS, 200, k, seed=3, style="compact")
    reader = CarelessAnswerTeacher(0, stale_bias=0.0, newest=True)
    answers = collections.Counter()
    for row in rows:
        question, memories = parse_answer_input(row["messages"], style="compact")
        assert [len(m) for m in memories.values()] == [k, k]
        answer, _ = extract_final_answer(row["target"])
        # The careful rule reader, reading the rendered chat, gives the row's answer: each row is
        # consistent with the demo's question and memory templates.
        assert reader(question, memories)[1] == answer, (question, memories)
        if question.startswith(("What are", "What hobbies")):
            assert "," in answer or " and " in answer  # a whole list of two or three
        else:
            answers["none" if answer in ("nowhere", "nothing") else "value"] += 1
    # Half of the plan rows (a quarter of the value rows) answer that there is no plan.
    assert 15 <= answers["none"] <= 35 and sum(answers.values()) == 100, answers


def test_rows_need_words_of_both_cases():
    with pytest.raises(ValueError, match="capitalised"):
        answer_read_rows(["rope", "dusk", "tide"], 4, 1, seed=0, style="compact")
