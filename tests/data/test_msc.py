"""MSC and MSC-Self-Instruct loading on generated fixtures, synthesised dates, and broken rows."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from memr1.data.errors import DataError
from memr1.data.msc import ANCHOR_DATE, SPEAKERS, load_msc
from tests import data_fixtures as fixtures
from tests.data.helpers import assert_points_at, write_json


@pytest.fixture
def rows():
    return fixtures.msc_fixture(seed=4, num_rows=3, num_previous=3, turns_per_session=4)


@pytest.fixture
def loaded(rows, tmp_path):
    return load_msc(write_json(tmp_path / "msc.json", rows))


def test_sessions_are_previous_dialogs_then_the_current_one(rows, loaded):
    assert [c.sample_id for c in loaded] == ["msc-0", "msc-1", "msc-2"]
    conversation, row = loaded[1], rows[1]
    assert (conversation.speaker_a, conversation.speaker_b) == SPEAKERS
    texts = [[t.text for t in s.turns] for s in conversation.sessions]
    expected = [[t["text"] for t in p["dialog"]] for p in row["previous_dialogs"]]
    assert texts == expected + [[t["text"] for t in row["dialog"]]]
    # Earlier sessions store no speaker: they alternate, Speaker 1 first.
    assert [t.speaker for t in conversation.sessions[0].turns] == list(SPEAKERS) * 2


def test_dates_count_back_from_the_anchor(rows, loaded):
    conversation, row = loaded[0], rows[0]
    unit = {"hours": timedelta(hours=1), "days": timedelta(days=1)}
    gaps = [p["time_num"] * unit[p["time_unit"]] for p in row["previous_dialogs"]]
    dates = [s.date_time for s in conversation.sessions]
    assert dates[-1] == ANCHOR_DATE
    assert [later - earlier for earlier, later in zip(dates, dates[1:])] == gaps


def test_time_back_text_is_used_when_the_numbers_are_absent(rows, loaded, tmp_path):
    for previous in rows[0]["previous_dialogs"]:
        del previous["time_num"], previous["time_unit"]
    again = load_msc(write_json(tmp_path / "m.json", rows))
    assert [s.date_time for s in again[0].sessions] == [s.date_time for s in loaded[0].sessions]


def test_self_instruct_question_and_personas(rows, loaded):
    (qa,) = loaded[2].qa
    assert (qa.question, qa.answer) == (
        rows[2]["self_instruct"]["B"],
        rows[2]["self_instruct"]["A"],
    )
    assert qa.question_type == "msc-self-instruct"
    assert loaded[2].source == "msc-self-instruct"
    personas = [(f.speaker, f.session, f.fact) for f in loaded[2].observation if f.session == 4]
    assert personas == [
        ("Speaker 1", 4, rows[2]["personas"][0][0]),
        ("Speaker 2", 4, rows[2]["personas"][1][0]),
    ]


def test_parlai_rows_have_no_question(tmp_path):
    path = fixtures.write_msc_fixture(tmp_path / "msc.jsonl", seed=1, self_instruct=False)
    loaded = load_msc(path)
    assert all(c.qa == () and c.source == "msc" for c in loaded)


def test_json_lines_and_json_list_agree(tmp_path):
    lines = load_msc(fixtures.write_msc_fixture(tmp_path / "a.jsonl", seed=3))
    listed = load_msc(fixtures.write_msc_fixture(tmp_path / "b.json", seed=3, jsonl=False))
    assert lines == listed


def _vague_gap(rows):
    previous = rows[1]["previous_dialogs"][0]
    del previous["time_num"], previous["time_unit"]
    previous["time_back"] = "a while ago"


BREAKAGES = [
    ("time unit", lambda r: r[1]["previous_dialogs"][0].update(time_unit="fortnights"),
     "previous_dialogs[0].time_unit"),
    ("time number type", lambda r: r[1]["previous_dialogs"][2].update(time_num="three"),
     "previous_dialogs[2].time_num"),
    ("time_back unreadable", _vague_gap, "previous_dialogs[0].time_back"),
    ("dialog missing", lambda r: r[1].pop("dialog"), "dialog"),
    ("text type", lambda r: r[1]["previous_dialogs"][1]["dialog"][0].update(text=7),
     "previous_dialogs[1].dialog[0].text"),
    ("speaker id type", lambda r: r[1]["dialog"][2].update(id=2), "dialog[2].id"),
    ("answer missing", lambda r: r[1]["self_instruct"].pop("A"), "self_instruct.A"),
    ("persona type", lambda r: r[1]["previous_dialogs"][0].update(personas=[["ok"], "bad"]),
     "previous_dialogs[0].personas[1]"),
    ("no turns anywhere", lambda r: r[1].update(dialog=[], previous_dialogs=[]), "dialog"),
    ("row not an object", lambda r: r.__setitem__(1, ["a"]), "<record>"),
]  # fmt: skip


@pytest.mark.parametrize("breakage", BREAKAGES, ids=[b[0] for b in BREAKAGES])
def test_broken_row(rows, tmp_path, breakage):
    _, breaks, field = breakage
    breaks(rows)
    path = write_json(tmp_path / "broken.json", rows)
    with pytest.raises(DataError) as caught:
        load_msc(path)
    assert_points_at(caught.value, path, "msc-1", field)


def test_broken_json_line_names_its_line(rows, tmp_path):
    path = tmp_path / "m.jsonl"
    lines = [json.dumps(r) for r in rows]
    lines[1] = lines[1][:-5]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as caught:
        load_msc(path)
    assert_points_at(caught.value, path, "line 2", caught.value.field)
    assert caught.value.field.startswith("column ")


def test_empty_file(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("\n")
    with pytest.raises(DataError) as caught:
        load_msc(path)
    assert_points_at(caught.value, path, "<none>", "<top level>")
