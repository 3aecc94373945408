"""LoCoMo loading on generated fixtures: the real quirks pass, and writing round-trips."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from memr1.data.locomo import (
    dump_locomo,
    extract_dia_ids,
    format_locomo_date,
    load_locomo,
    parse_locomo_date,
)
from memr1.data.records import Conversation, Session, Turn
from tests import data_fixtures as fixtures
from tests.data.helpers import write_json


@pytest.fixture
def records():
    return fixtures.locomo_fixture(seed=5, num_conversations=3, num_sessions=4)


@pytest.fixture
def loaded(records, tmp_path):
    return load_locomo(write_json(tmp_path / "locomo.json", records))


def test_counts_and_order_follow_the_file(records, loaded):
    assert [c.sample_id for c in loaded] == [r["sample_id"] for r in records]
    first = loaded[0]
    assert [s.index for s in first.sessions] == [1, 2, 3, 4]
    assert first.num_turns == 4 * 5
    assert len(first.qa) == len(records[0]["qa"]) == 3 * 4 + 2
    assert all(c.source == "locomo" for c in loaded)


def test_date_keys_without_a_session_are_skipped(records, loaded):
    # The fixture, like conv-26, has a date key for a session whose turns do not exist.
    assert "session_5_date_time" in records[0]["conversation"]
    assert "session_5" not in records[0]["conversation"]
    assert len(loaded[0].sessions) == 4


def test_turn_fields(records, loaded):
    raw = records[0]["conversation"]["session_2"][1]
    turn = loaded[0].turn("D2:2")
    assert (turn.speaker, turn.text, turn.session, turn.index) == (
        raw["speaker"],
        raw["text"],
        2,
        2,
    )
    assert turn.image_caption == raw["blip_caption"]
    assert loaded[0].turn("D2:1").image_caption is None


def test_session_dates_are_parsed_and_kept_verbatim(records, loaded):
    raw = records[1]["conversation"]["session_3_date_time"]
    session = loaded[1].session(3)
    assert session.date_time_raw == raw
    assert session.date_time == datetime.strptime(raw, "%I:%M %p on %d %B, %Y")


def test_integer_answers_become_text(records, loaded):
    raw = [q for q in records[0]["qa"] if isinstance(q.get("answer"), int)]
    assert raw, "the fixture should hold an integer answer"
    qa = next(q for q in loaded[0].qa if q.question == raw[0]["question"])
    assert qa.answer == str(raw[0]["answer"])


def test_category_5_without_answer_uses_the_adversarial_one(loaded):
    adversarial = [q for q in loaded[0].qa if q.category == 5]
    assert adversarial
    for qa in adversarial:
        assert qa.answer_from_adversarial
        assert qa.answer == qa.adversarial_answer


def test_category_5_keeps_both_answers_when_both_exist(records, tmp_path):
    item = next(q for q in records[0]["qa"] if q["category"] == 5)
    item["answer"] = "No"
    qa = load_locomo(write_json(tmp_path / "l.json", records))[0].qa[records[0]["qa"].index(item)]
    assert (qa.answer, qa.answer_from_adversarial) == ("No", False)
    assert qa.adversarial_answer == item["adversarial_answer"]


def test_glued_and_empty_evidence(records, loaded):
    multi_hop = next(q for q in loaded[0].qa if q.category == 1)
    assert len(multi_hop.evidence_raw) == 1 and ";" in multi_hop.evidence_raw[0]
    assert len(multi_hop.evidence) == 2
    open_domain = next(q for q in loaded[0].qa if q.category == 3)
    assert open_domain.evidence == ()


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("D1:3", ("D1:3",)),
        ("D8:6; D9:17", ("D8:6", "D9:17")),
        ("D9:1 D4:4 D4:6", ("D9:1", "D4:4", "D4:6")),
        ("D", ()),
        ("D:11:26", ("D11:26",)),
        ("D30:05", ("D30:5",)),
        ("D26:14, D26:34, D26:42", ("D26:14", "D26:34", "D26:42")),
        (["D1:1", ["D2:2", "D3:3, D4:4"]], ("D1:1", "D2:2", "D3:3", "D4:4")),
        ([], ()),
    ],
)
def test_extract_dia_ids(raw, expected):
    assert extract_dia_ids(raw) == expected


def test_malformed_evidence_is_cleaned_and_dangling_ids_are_listed(records, tmp_path):
    records[0]["qa"][0]["evidence"] = ["D", "D:1:02; D99:1"]
    conversation = load_locomo(write_json(tmp_path / "l.json", records))[0]
    assert conversation.qa[0].evidence == ("D1:2", "D99:1")
    assert conversation.qa[0].evidence_raw == ("D", "D:1:02; D99:1")
    assert conversation.dangling_evidence() == ((0, "D99:1"),)


def test_observation_evidence_in_every_form(loaded):
    facts = {fact.fact: fact.dia_ids for fact in loaded[0].observation}
    talked = next(ids for fact, ids in facts.items() if fact.endswith("talked."))
    greeted = next(ids for fact, ids in facts.items() if "greeted" in fact)
    assert talked == greeted == ("D1:1", "D1:2")
    assert loaded[0].summary(2).endswith("session 2.")
    assert loaded[0].summary(9) is None


def test_flat_files_load_like_the_nested_file(loaded, tmp_path):
    folder = fixtures.write_locomo_fixture(
        tmp_path / "flat", flat=True, seed=5, num_conversations=3, num_sessions=4
    )
    assert load_locomo(folder) == loaded
    one = sorted(folder.glob("*.json"))[0]
    assert load_locomo(one) == loaded[:1]


def test_flat_record_with_a_conversation_key_takes_its_id_from_the_file(records, tmp_path):
    record = {k: v for k, v in records[0].items() if k != "sample_id"}
    conversation = load_locomo(write_json(tmp_path / "talk-7.json", record))[0]
    assert conversation.sample_id == "talk-7"


def test_dump_then_load_gives_the_same_records(loaded, tmp_path):
    path = dump_locomo(loaded, tmp_path / "out" / "again.json")
    assert load_locomo(path) == loaded
    assert not [p for p in path.parent.iterdir() if p != path], "temporary file left behind"
    written = json.loads(path.read_text())
    adversarial = next(q for q in written[0]["qa"] if q["category"] == 5)
    assert "answer" not in adversarial


def test_dump_keeps_the_old_file_when_serialisation_fails(loaded, tmp_path):
    path = dump_locomo(loaded, tmp_path / "out" / "l.json")
    before = path.read_bytes()
    session = loaded[0].sessions[0]
    unwritable = Turn("A", "D1:1", object(), session=1, index=1)  # not JSON-serialisable
    bad = Conversation("x", "A", "B", (Session(1, session.date_time, "", (unwritable,)),), (), "l")
    with pytest.raises(TypeError):
        dump_locomo([bad], path)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["l.json"]


@pytest.mark.parametrize("text", ["1:56 pm on 8 May, 2023", "12:05 am on 31 December, 2022"])
def test_date_format_round_trip(text):
    assert format_locomo_date(parse_locomo_date(text)) == text


def test_loader_source_name_is_configurable(records, tmp_path):
    path = write_json(tmp_path / "l.json", records)
    assert {c.source for c in load_locomo(path, source="synthloco")} == {"synthloco"}
