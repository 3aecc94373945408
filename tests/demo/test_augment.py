"""Entity renaming keeps a trace row correct: one consistent permutation, whole words only."""

from __future__ import annotations

import random

import pytest

from experiments.cpu_demo.augment import (
    augment_rows,
    oversampled_answer_states,
    random_renaming,
    rename,
    rename_answer_tuple,
    rename_row,
    renamed_answer_states,
)
from memr1.tuples.schema import AnswerMemory, AnswerTuple

LISTS = (("Andrew", "Jon", "Nadia"), ("Scout", "Toby"), ("Boston", "Denver"))


def test_rename_is_simultaneous_and_whole_word():
    mapping = {"Andrew": "Jon", "Jon": "Andrew", "Scout": "Toby", "Toby": "Scout"}
    text = "Andrew's dog Scout met Jon and Toby; Jonathan and Scouting stay."
    assert (
        rename(text, mapping) == "Jon's dog Toby met Andrew and Scout; Jonathan and Scouting stay."
    )


def test_random_renaming_permutes_within_each_list():
    mapping = random_renaming(LISTS, random.Random(3))
    for words in LISTS:
        assert sorted(mapping[w] for w in words) == sorted(words)
    assert set(mapping) == {w for words in LISTS for w in words}


def test_rename_row_applies_one_mapping_to_prompt_and_target():
    row = {
        "messages": [{"role": "user", "content": "Fact: Andrew moved to Boston."}],
        "target": '{"memory": [{"id": "0", "text": "Andrew moved to Boston.", "event": "ADD"}]}',
    }
    mapping = {"Andrew": "Nadia", "Nadia": "Andrew", "Boston": "Denver", "Denver": "Boston"}
    out = rename_row(row, mapping)
    assert out["messages"] == [{"role": "user", "content": "Fact: Nadia moved to Denver."}]
    assert "Nadia moved to Denver." in out["target"]
    assert row["messages"][0]["content"] == "Fact: Andrew moved to Boston."  # input untouched


def test_augment_rows_renames_about_the_requested_share():
    rows = [{"messages": [{"role": "user", "content": "Andrew"}], "target": "Andrew"}] * 400
    out = augment_rows(rows, LISTS, 0.5, seed=0)
    renamed = sum(r["target"] != "Andrew" for r in out)
    # A renamed row keeps "Andrew" when the permutation fixes it (1 in 3), so ~1/3 of the rows.
    assert 0.25 < renamed / len(rows) < 0.42
    assert all(r["messages"][0]["content"] == r["target"] for r in out)
    assert augment_rows(rows, LISTS, 0.0, seed=0) == rows
    with pytest.raises(ValueError, match="fraction"):
        augment_rows(rows, LISTS, 1.5, seed=0)


def _answer_tuple():
    memories = (
        AnswerMemory("Andrew", 3, "8 May, 2023", "Andrew has two dogs: Scout and Toby.", 0.9),
        AnswerMemory("Nadia", 5, "9 May, 2023", "Nadia moved from Boston to Denver.", 0.7),
    )
    return AnswerTuple(
        "c-1",
        4,
        "What are the names of Andrew's dogs?",
        "Scout and Toby",
        1,
        ("D1:3",),
        ("Andrew", "Nadia"),
        memories,
        "teacher",
    )


def test_rename_answer_tuple_renames_question_answer_speakers_and_memories_alike():
    mapping = {"Andrew": "Jon", "Jon": "Andrew", "Scout": "Toby", "Toby": "Scout"}
    t = rename_answer_tuple(_answer_tuple(), mapping)
    assert t.question == "What are the names of Jon's dogs?"
    assert t.answer == "Toby and Scout"
    assert t.speakers == ("Jon", "Nadia")
    assert t.memories_by_speaker() == {
        "Jon": [("8 May, 2023", "Jon has two dogs: Toby and Scout.")],
        "Nadia": [("9 May, 2023", "Nadia moved from Boston to Denver.")],
    }
    assert (t.sample_id, t.qa_index, t.category, t.evidence) == ("c-1", 4, 1, ("D1:3",))


def test_renamed_answer_states_keeps_the_originals_and_adds_renamed_copies():
    original = _answer_tuple()
    states = renamed_answer_states([original], LISTS, 30, seed=0)
    assert len(states) == 31 and states[0] == original
    # Every copy stays self-consistent: the asked person is a speaker, the answer is in a memory.
    for t in states:
        asked = t.question.split("names of ")[1].split("'")[0]
        assert asked == t.speakers[0]
        assert t.answer.replace(" and ", ": ").split(": ")[0] in t.memories[0].text
    assert len({t.question for t in states}) == 3 and len({t.answer for t in states}) == 2
    assert renamed_answer_states([original], LISTS, 0, seed=0) == [original]
    with pytest.raises(ValueError, match="renamed copies"):
        renamed_answer_states([original], LISTS, -1, seed=0)


def test_oversampled_states_are_renamed_copies_of_the_chosen_templates_only():
    import dataclasses

    lists_question = _answer_tuple()  # "What are the names of Andrew's dogs?": pet_names
    food = dataclasses.replace(
        lists_question, question="What is Andrew's favorite food?", answer="tacos"
    )
    extra = oversampled_answer_states([lists_question, food], ("pet_names",), LISTS, 4, seed=1)
    assert len(extra) == 4
    assert all(t.question.startswith("What are the names of") for t in extra)
    assert lists_question not in extra  # copies only: the originals are the states already
    assert oversampled_answer_states([lists_question, food], ("trip",), LISTS, 4, seed=1) == []
    assert oversampled_answer_states([lists_question], ("pet_names",), LISTS, 0, seed=1) == []
    with pytest.raises(ValueError, match="oversample copies"):
        oversampled_answer_states([lists_question], ("pet_names",), LISTS, -1, seed=1)
