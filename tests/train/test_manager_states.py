"""The manager stage's states (memr1.train.stages.rl_states): turns with linked questions, and
with train.min_overlap > 0 only those whose fact collides with its top shown memory by word
overlap (the label-free proxy of memr1.env.collision)."""

from __future__ import annotations

import dataclasses

import pytest

from memr1.env import rollout
from memr1.train import stages
from memr1.tuples import io as tuples_io
from memr1.tuples.schema import LinkedQA, turn_position
from tests.train import tiny


@dataclasses.dataclass(frozen=True)
class _Turn:
    facts: tuple[str, ...]
    retrieved: tuple[tuple[int, str], ...]
    has_qa: bool = True
    dia_id: str = "D1:1"
    qa: tuple = ()


HOME = "Nadia lives in Austin."
TURNS = [
    _Turn(("Nadia moved from Austin to Denver yesterday.",), ((4, HOME),)),  # a change
    _Turn(("Nadia works as a baker.",), ((4, HOME),)),  # a new fact
    _Turn((HOME,), ((4, HOME),), has_qa=False),  # a repeat no question cites
    _Turn((HOME,), ((4, HOME),)),  # a repeat
]


@pytest.fixture
def read(monkeypatch):
    monkeypatch.setattr(tuples_io, "read_tuples", lambda source, kind: list(TURNS))
    monkeypatch.setattr(rollout, "manager_state_from_tuple", lambda x: x)


@pytest.mark.parametrize("min_overlap, want", [(0.0, [0, 1, 3]), (0.5, [0, 3]), (1.0, [3])])
def test_min_overlap_keeps_the_colliding_turns_with_questions(read, min_overlap, want):
    config = tiny.config("runlocal,stage=manager", min_overlap=min_overlap)
    states, _ = stages.rl_states(config, None, None, "tuples", env=object())
    assert states == [TURNS[i] for i in want]


def test_no_colliding_turn_is_an_error_naming_the_setting(read, monkeypatch):
    monkeypatch.setattr(tuples_io, "read_tuples", lambda source, kind: [TURNS[1]])
    config = tiny.config("runlocal,stage=manager", min_overlap=0.5)
    with pytest.raises(ValueError, match=r"tuples: no manager state .*min_overlap=0.5"):
        stages.rl_states(config, None, None, "tuples", env=object())


def _qa(*evidence):
    return LinkedQA(0, "Where does Nadia live?", "Denver", 1, tuple(evidence))


def test_turn_positions_order_sessions_before_turns():
    assert turn_position("D2:10") == (2, 10) and turn_position(" D10:1 ") == (10, 1)
    assert turn_position("D2:10") > turn_position("D2:9") and turn_position("D3:1") > (2, 10)
    assert turn_position("D2") is None and turn_position("session 2") is None


def test_a_question_is_answerable_once_its_every_evidence_turn_was_said():
    q = _qa("D1:4", "D2:7")
    assert q.answerable_at("D2:7") and q.answerable_at("D3:1")
    assert not q.answerable_at("D1:4") and not q.answerable_at("D2:6")
    assert _qa("D1:4", "D?:x").answerable_at("D1:4")  # unordered evidence: kept
    assert _qa("D9:9").answerable_at("turn 3")  # an unordered turn: kept


def test_answerable_linked_questions_drop_what_a_later_turn_decides(monkeypatch):
    early = _Turn(("Nadia adopted a dog named Toby.",), (), dia_id="D1:4")
    early = dataclasses.replace(early, qa=(_qa("D1:4", "D2:7"), _qa("D1:4")))
    late = dataclasses.replace(early, dia_id="D2:7", qa=(_qa("D1:4", "D2:7"),))
    kept = stages.linked_questions([early, late], "answerable")
    assert [len(r.qa) for r in kept] == [1, 1] and kept[0].qa == (_qa("D1:4"),)
    assert stages.linked_questions([early, late], "cites") == [early, late]
    with pytest.raises(ValueError, match="linked_qa must be one of"):
        stages.linked_questions([early], "later")


def test_a_negative_min_overlap_is_refused_not_ignored(read):
    config = tiny.config("runlocal,stage=manager", min_overlap=-0.5)
    with pytest.raises(ValueError, match=r"min_overlap must be in \[0, 1\]"):
        stages.rl_states(config, None, None, "tuples", env=object())
