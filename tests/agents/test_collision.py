"""The label-free collision proxy (memr1.env.collision): word overlap of a fact with its top
shown memory, on hand-made facts and memories of each kind of turn."""

from __future__ import annotations

import pytest

from memr1.env.collision import collision_score, collision_states, content_words, word_overlap


def test_content_words_drop_function_words_case_and_possessives():
    assert content_words("Nadia's favorite food is tacos.") == {
        "nadia",
        "favorite",
        "food",
        "tacos",
    }
    assert content_words("The trip to Paris, in 2023!") == {"trip", "paris", "2023"}
    assert content_words("a the of") == frozenset()


@pytest.mark.parametrize(
    "fact, memory, want",
    [
        # a repeat: person and topic shared
        ("Melanie enjoys painting.", "Melanie took up painting as a hobby.", 2 / 3),
        ("Melanie's favorite food is curry.", "Melanie's favorite food is curry.", 1.0),
        # a changed value names the old one
        (
            "Nadia moved from Seattle to Austin yesterday.",
            "Nadia moved to Seattle last year.",
            3 / 5,
        ),
        # a cancelled plan names the plan
        ("Nadia cancelled going to the concert.", "Nadia plans to go to a concert.", 2 / 4),
        # another list item
        ("Melanie took up hiking as another hobby.", "Melanie took up painting as a hobby.", 4 / 5),
        # over the shorter text: a change's new value and date do not dilute it
        (
            "Melanie moved from Portland to Chicago two days ago.",
            "Melanie lives in Portland.",
            2 / 3,
        ),
        # a new fact about another topic shares the name only
        ("Nadia works as a teacher.", "Nadia moved to Seattle last year.", 1 / 3),
        ("Jon works as a baker.", "Nadia moved to Seattle last year.", 0.0),
        ("The.", "Nadia moved to Seattle.", 0.0),  # no content word
        ("Nadia moved to Seattle.", "It is.", 0.0),
    ],
)
def test_word_overlap_is_the_share_of_the_shorter_texts_words_the_other_holds(fact, memory, want):
    assert word_overlap(fact, memory) == pytest.approx(want)


def test_collision_score_reads_the_top_shown_memory_only():
    fact = "Nadia moved from Seattle to Austin yesterday."
    top, other = "Nadia works as a teacher.", "Nadia moved to Seattle last year."
    assert collision_score([fact], [top, other]) == pytest.approx(1 / 3)
    assert collision_score([fact], [other, top]) == pytest.approx(3 / 5)
    assert collision_score([fact], []) == 0.0
    assert collision_score([], [top]) == 0.0
    # several facts: the largest overlap with the one list's top memory
    assert collision_score(["Jon works as a baker.", fact], [other]) == pytest.approx(3 / 5)


class _Turn:
    def __init__(self, fact, *shown):
        self.facts, self.retrieved = (fact,), tuple(enumerate(shown))


def test_collision_states_keep_the_turns_whose_fact_overlaps_its_top_memory():
    repeat = _Turn("Nadia lives in Austin.", "Nadia lives in Austin.", "Nadia works as a nurse.")
    change = _Turn("Nadia moved from Austin to Denver yesterday.", "Nadia lives in Austin.")
    new = _Turn("Nadia works as a baker.", "Nadia lives in Austin.")
    buried = _Turn("Nadia lives in Austin.", "Nadia works as a nurse.", "Nadia lives in Austin.")
    alone = _Turn("Nadia lives in Austin.")
    turns = [repeat, change, new, buried, alone]
    assert collision_states(turns, 0.5) == [repeat, change]  # the top shown memory only
    assert collision_states(turns, 0.0) == turns
    assert collision_states(turns, 1.0) == [repeat]
    with pytest.raises(ValueError, match="min_overlap must be in"):
        collision_states(turns, 1.5)
