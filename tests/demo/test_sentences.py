"""Every sentence the generator writes reads back, and so do the teachers' merged memories."""

from __future__ import annotations

from experiments.cpu_demo.sentences import (
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
