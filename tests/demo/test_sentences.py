"""Every sentence the generator writes reads back, and so do the teachers' merged memories."""

from __future__ import annotations

import pytest

from experiments.cpu_demo.sentences import (
    current_form,
    merged_hobbies,
    merged_pets,
    parse_question,
    parse_sentence,
    split_items,
)
from memr1.data.synthloco.generate import generate_dataset
from memr1.data.synthloco.world import get_preset


def test_every_observation_and_question_of_a_generated_world_parses():
    dataset = generate_dataset(get_preset("demo", 0))
    facts = questions = 0
    for records in dataset.splits.values():
        for record in records:
            for session in record["observation"].values():
                for speaker, entries in session.items():
                    for fact, _ in entries:
                        parsed = parse_sentence(fact)
                        assert parsed is not None, fact
                        assert parsed.name == speaker, fact
                        facts += 1
            for qa in record["qa"]:
                if qa["category"] != 5:
                    assert parse_question(qa["question"]) is not None, qa["question"]
                    questions += 1
    assert facts > 1000 and questions > 500


def test_merged_memories_read_back_as_lists():
    pets = parse_sentence(merged_pets("Gina", "cat", ("Luna", "Milo", "Coco")))
    assert (pets.key, pets.kind, pets.items, pets.species) == (
        "pets",
        "merged",
        ("Luna", "Milo", "Coco"),
        "cat",
    )
    assert merged_pets("Gina", "cat", ("Luna",)) == "Gina has one cat: Luna."
    hobbies = parse_sentence(merged_hobbies("Gina", ("hiking", "baking")))
    assert (hobbies.key, hobbies.items) == ("hobbies", ("hiking", "baking"))
    assert split_items("a, b and c") == ("a", "b", "c") and split_items("a") == ("a",)
    assert parse_sentence("Gina likes the weather.") is None


@pytest.mark.parametrize(
    "change, now",
    [
        ("Gina moved from Boston to Denver yesterday.", "Gina moved to Denver yesterday."),
        (
            "Gina left the job as a nurse and started working as an engineer last month.",
            "Gina started working as an engineer last month.",
        ),
        (
            "Gina is now planning a trip to Rome instead of Oslo.",
            "Gina is planning a trip to Rome.",
        ),
        (
            "Gina now plans to go to a concert instead of the fair.",
            "Gina plans to go to a concert.",
        ),
    ],
)
def test_a_change_now_holds_the_new_value_alone_and_reads_back_as_its_state(change, now):
    parsed = parse_sentence(change)
    assert current_form(parsed) == now
    state = parse_sentence(now)
    assert (state.name, state.key, state.kind, state.value) == (
        "Gina",
        parsed.key,
        "state",
        parsed.value,
    )
    assert state.when == parsed.when and parsed.old not in now


def test_every_change_of_a_generated_world_has_a_current_form():
    dataset = generate_dataset(get_preset("demo", 1))
    changes = 0
    for records in dataset.splits.values():
        for record in records:
            for session in record["observation"].values():
                for entries in session.values():
                    for fact, _ in entries:
                        parsed = parse_sentence(fact)
                        if parsed.kind == "change":
                            now = parse_sentence(current_form(parsed))
                            assert now.kind == "state" and now.value == parsed.value, fact
                            changes += 1
    assert changes > 20
    with pytest.raises(ValueError, match="not a change"):
        current_form(parse_sentence("Gina lives in Oslo."))
