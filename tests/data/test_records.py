"""Conversation helpers: turn order, lookup by dia_id, dangling evidence; fixture determinism."""

from __future__ import annotations

from datetime import datetime

import pytest

from memr1.data.records import QA, Conversation, Session, Turn, dia_id
from tests import data_fixtures as fixtures


def _conversation() -> Conversation:
    sessions = tuple(
        Session(
            index=s,
            date_time=datetime(2023, 5, s),
            date_time_raw=f"day {s}",
            turns=tuple(
                Turn("A" if t % 2 else "B", dia_id(s, t), f"s{s}t{t}", s, t) for t in (1, 2, 3)
            ),
        )
        for s in (1, 2)
    )
    qa = (
        QA("q0", "a0", 4, evidence=("D1:2", "D2:9")),
        QA("q1", "a1", 1, evidence=("D7:1",)),
        QA("q2", "a2", 2),
    )
    return Conversation("c", "A", "B", sessions, qa, "test", session_summary=((2, "second"),))


def test_turns_in_order_and_lookup():
    conversation = _conversation()
    assert [t.dia_id for t in conversation.iter_turns()] == [
        "D1:1", "D1:2", "D1:3", "D2:1", "D2:2", "D2:3"
    ]  # fmt: skip
    assert conversation.num_turns == 6
    assert conversation.turn("D2:3").text == "s2t3"
    assert conversation.has_turn("D1:1") and not conversation.has_turn("D3:1")
    with pytest.raises(KeyError, match="'c' has no turn 'D3:1'"):
        conversation.turn("D3:1")


def test_sessions_and_summaries():
    conversation = _conversation()
    assert conversation.session(2).date_time_raw == "day 2"
    with pytest.raises(KeyError, match="no session 5"):
        conversation.session(5)
    assert conversation.summary(2) == "second" and conversation.summary(1) is None


def test_dangling_evidence_lists_position_and_id():
    assert _conversation().dangling_evidence() == ((0, "D2:9"), (1, "D7:1"))


def test_records_are_immutable_and_compare_by_value():
    conversation = _conversation()
    conversation.turn("D1:1")  # builds the cached index; equality must ignore it
    assert conversation == _conversation()
    with pytest.raises(AttributeError):
        conversation.sample_id = "other"


@pytest.mark.parametrize(
    "make",
    [fixtures.locomo_fixture, fixtures.longmemeval_fixture, fixtures.msc_fixture],
    ids=["locomo", "longmemeval", "msc"],
)
def test_fixtures_are_deterministic_per_seed(make):
    assert make(seed=11) == make(seed=11)
    assert make(seed=11) != make(seed=12)


def test_fixture_cli_writes_three_loadable_files(tmp_path, capsys):
    from memr1.data.locomo import load_locomo
    from memr1.data.longmemeval import load_longmemeval
    from memr1.data.msc import load_msc

    assert fixtures.main(["--out", str(tmp_path), "--seed", "3"]) == 0
    written = capsys.readouterr().out.split()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.rsplit("/", 1)[-1] for p in written
    )
    assert len(load_locomo(tmp_path / "locomo_fixture.json")) == 3
    assert len(load_longmemeval(tmp_path / "longmemeval_oracle.json")) == 6
    assert len(load_msc(tmp_path / "msc_self_instruct.jsonl")) == 4
