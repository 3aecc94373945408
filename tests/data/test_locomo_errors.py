"""Broken LoCoMo files: each error names the file, the sample and the field."""

from __future__ import annotations

import json

import pytest

from memr1.data.errors import WHOLE_FILE, DataError
from memr1.data.locomo import load_locomo
from tests import data_fixtures as fixtures
from tests.data.helpers import assert_points_at, write_json

SAMPLE = "conv-7-1"  # the second record of the seed-7 fixture; breaking it shows the right record


@pytest.fixture
def records():
    records = fixtures.locomo_fixture(seed=7, num_conversations=3, num_sessions=3)
    assert records[1]["sample_id"] == SAMPLE
    return records


def _conv(records):
    return records[1]["conversation"]


def _drop_sessions(records):
    for key in [k for k in _conv(records) if k.startswith("session_")]:
        del _conv(records)[key]


# (name, how to break the second record, the field the error must name)
BREAKAGES = [
    ("question not text", lambda r: r[1]["qa"][0].update(question=5), "qa[0].question"),
    ("session not a list", lambda r: _conv(r).update(session_1="hello"), "conversation.session_1"),
    ("qa not a list", lambda r: r[1].update(qa={}), "qa"),
    ("speaker missing", lambda r: _conv(r).pop("speaker_b"), "conversation.speaker_b"),
    ("conversation missing", lambda r: r[1].pop("conversation"), "conversation"),
    ("qa missing", lambda r: r[1].pop("qa"), "qa"),
    ("text missing", lambda r: _conv(r)["session_2"][0].pop("text"),
     "conversation.session_2[0].text"),
    ("dia_id repeated", lambda r: _conv(r)["session_2"][1].update(dia_id="D1:1"),
     "conversation.session_2[1].dia_id"),
    ("empty session", lambda r: _conv(r).update(session_2=[]), "conversation.session_2"),
    ("no sessions at all", _drop_sessions, "conversation"),
    ("category unknown", lambda r: r[1]["qa"][2].update(category=6), "qa[2].category"),
    ("category as text", lambda r: r[1]["qa"][2].update(category="4"), "qa[2].category"),
    ("category as boolean", lambda r: r[1]["qa"][2].update(category=True), "qa[2].category"),
    ("date unparseable", lambda r: _conv(r).update(session_2_date_time="last Tuesday"),
     "conversation.session_2_date_time"),
    ("date missing for a session", lambda r: _conv(r).pop("session_3_date_time"),
     "conversation.session_3_date_time"),
    ("answer missing outside category 5", lambda r: r[1]["qa"][0].pop("answer"), "qa[0].answer"),
    ("evidence not a list", lambda r: r[1]["qa"][0].update(evidence="D1:1"), "qa[0].evidence"),
    ("evidence entry not text", lambda r: r[1]["qa"][0].update(evidence=[3]), "qa[0].evidence[0]"),
    ("observation key unknown", lambda r: r[1]["observation"].update(notes={}),
     "observation.notes"),
    ("observation entry too short",
     lambda r: r[1]["observation"]["session_1_observation"].update(Zed=[["alone"]]),
     "observation.session_1_observation.Zed[0]"),
    ("summary not text", lambda r: r[1]["session_summary"].update(session_1_summary=["x"]),
     "session_summary.session_1_summary"),
]  # fmt: skip


@pytest.mark.parametrize("breakage", BREAKAGES, ids=[b[0] for b in BREAKAGES])
def test_broken_record(records, tmp_path, breakage):
    _, breaks, field = breakage
    breaks(records)
    path = write_json(tmp_path / "broken.json", records)
    with pytest.raises(DataError) as caught:
        load_locomo(path)
    assert_points_at(caught.value, path, SAMPLE, field)


def test_truncated_json(records, tmp_path):
    path = tmp_path / "cut.json"
    text = json.dumps(records)
    path.write_text(text[: len(text) // 2])
    with pytest.raises(DataError) as caught:
        load_locomo(path)
    assert caught.value.field.startswith("line 1 column")
    assert_points_at(caught.value, path, WHOLE_FILE, caught.value.field)


def test_missing_sample_id_names_the_record_position(records, tmp_path):
    del records[2]["sample_id"]
    path = write_json(tmp_path / "l.json", records)
    with pytest.raises(DataError) as caught:
        load_locomo(path)
    assert_points_at(caught.value, path, "#2", "sample_id")


def test_repeated_sample_id(records, tmp_path):
    records[2]["sample_id"] = SAMPLE
    path = write_json(tmp_path / "l.json", records)
    with pytest.raises(DataError) as caught:
        load_locomo(path)
    assert_points_at(caught.value, path, SAMPLE, "sample_id")


@pytest.mark.parametrize("top", [[], "conversations", 3])
def test_top_level_that_is_not_a_list_of_records(tmp_path, top):
    path = write_json(tmp_path / "l.json", top)
    with pytest.raises(DataError) as caught:
        load_locomo(path)
    assert_points_at(caught.value, path, WHOLE_FILE, "<top level>")


def test_flat_file_errors_name_the_file_stem_as_sample(records, tmp_path):
    flat = {**records[0]["conversation"], "qa": records[0]["qa"]}
    del flat["speaker_a"]
    flat["speaker_x"] = "Nobody"
    path = write_json(tmp_path / "talk-3.json", flat)
    with pytest.raises(DataError) as caught:
        load_locomo(path)
    # Without speaker_a the record is not recognised as flat, so the nested key is what is missing.
    assert_points_at(caught.value, path, "talk-3", "conversation")


def test_not_utf8(tmp_path):
    path = tmp_path / "l.json"
    path.write_bytes(b'[{"sample_id": "\xff"}]')
    with pytest.raises(DataError) as caught:
        load_locomo(path)
    assert_points_at(caught.value, path, WHOLE_FILE, "<bytes>")
