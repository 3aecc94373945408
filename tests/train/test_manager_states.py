"""The manager stage's states (memr1.train.stages.rl_states): turns with linked questions, and
with train.min_overlap > 0 only those whose fact collides with its top shown memory by word
overlap (the label-free proxy of memr1.env.collision)."""

from __future__ import annotations

import dataclasses

import pytest

from memr1.env import rollout
from memr1.train import stages
from memr1.tuples import io as tuples_io
from tests.train import tiny


@dataclasses.dataclass(frozen=True)
class _Turn:
    facts: tuple[str, ...]
    retrieved: tuple[tuple[int, str], ...]
    has_qa: bool = True


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
