"""train.linked_qa="shown": the manager stage's reward also reads the questions about the
memories shown to the manager, so that an UPDATE over a shown memory it should have kept costs
what that memory answered (memr1.train.stages.linked_questions)."""

from __future__ import annotations

from memr1.train import stages
from memr1.tuples.schema import LinkedQA, ManagerTuple, MemoryRecord

JOB = LinkedQA(0, "What does Nadia do?", "baker", 4, ("D1:2",))
HOME = LinkedQA(1, "Where does Nadia live?", "Austin", 4, ("D1:3",))
DOG = LinkedQA(2, "What is Nadia's dog called?", "Toby", 4, ("D2:5",))
LATER = LinkedQA(3, "How many dogs does Nadia have?", "two", 4, ("D2:5", "D3:1"))
BANK = (
    MemoryRecord(0, "Nadia works as a baker.", 0, 1, "D1:2"),
    MemoryRecord(1, "Nadia lives in Austin.", 0, 1, "D1:3"),
    MemoryRecord(2, "Nadia visited Rome.", 0, 1, ""),  # its writer left the op log
)


def _turn(dia_id, qa, retrieved=(), sample_id="c0"):
    return ManagerTuple(
        sample_id=sample_id,
        dia_id=dia_id,
        turn_index=0,
        speaker="Nadia",
        owner=0,
        speakers=("Nadia", "Tom"),
        session_date="1:00 pm on 1 May, 2023",
        timestamp=1,
        window_start=0,
        facts=("Nadia adopted a dog named Toby.",),
        retrieved=tuple((i, BANK[i].text) for i in retrieved),
        bank=BANK,
        qa=tuple(qa),
        builder="teacher:test",
    )


def _turns():
    return [
        _turn("D1:2", [JOB]),
        _turn("D1:3", [HOME]),
        _turn("D2:5", [DOG, LATER], retrieved=(1, 0, 2)),  # shown: home, job, one unlinked
        _turn("D2:6", [], retrieved=(0,)),  # no question of its own
        _turn("D2:5", [DOG], retrieved=(1,), sample_id="c1"),  # another conversation
    ]


def test_shown_adds_the_answerable_questions_of_the_shown_memories_writers():
    out = stages.linked_questions(_turns(), "shown")
    # Its own answerable question first, then those of the shown memories, each once; the
    # question a later turn decides (LATER) is dropped as "answerable" drops it.
    assert out[2].qa == (DOG, HOME, JOB)
    assert out[0].qa == (JOB,) and out[1].qa == (HOME,)


def test_shown_leaves_a_turn_without_a_question_of_its_own_without_one():
    assert stages.linked_questions(_turns(), "shown")[3].qa == ()


def test_shown_reads_only_the_same_conversation():
    # c1's shown memory is written at c1's D1:3, which no c1 tuple holds: nothing to add.
    assert stages.linked_questions(_turns(), "shown")[4].qa == (DOG,)


def test_shown_is_answerable_where_no_memory_is_shown():
    turns = _turns()
    assert [r.qa for r in stages.linked_questions(turns, "answerable")] == [
        (JOB,),
        (HOME,),
        (DOG,),
        (),
        (DOG,),
    ]
