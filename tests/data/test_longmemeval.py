"""LongMemEval loading on generated fixtures, and errors that name file, question and field."""

from __future__ import annotations

import json

import pytest

from memr1.data.errors import WHOLE_FILE, DataError
from memr1.data.longmemeval import load_longmemeval, parse_longmemeval_date
from memr1.data.records import NO_CATEGORY
from tests import data_fixtures as fixtures
from tests.data.helpers import assert_points_at, write_json


@pytest.fixture
def instances():
    return fixtures.longmemeval_fixture(seed=2, num_instances=6, num_sessions=5)


@pytest.fixture
def loaded(instances, tmp_path):
    return load_longmemeval(write_json(tmp_path / "longmemeval_oracle.json", instances))


def test_one_conversation_and_question_per_instance(instances, loaded):
    assert [c.sample_id for c in loaded] == [i["question_id"] for i in instances]
    for raw, conversation in zip(instances, loaded):
        assert (conversation.speaker_a, conversation.speaker_b) == ("user", "assistant")
        (qa,) = conversation.qa
        assert (qa.question, qa.question_type) == (raw["question"], raw["question_type"])
        assert qa.category == NO_CATEGORY
        assert qa.question_date == parse_longmemeval_date(raw["question_date"])
        assert qa.answer_session_ids == tuple(raw["answer_session_ids"])


def test_oracle_sessions_are_put_in_date_order(instances, loaded):
    unsorted = [i for i in instances if i["haystack_dates"] != sorted(i["haystack_dates"])]
    assert unsorted, "the oracle fixture should list some haystack out of order"
    for raw, conversation in zip(instances, loaded):
        dates = [s.date_time for s in conversation.sessions]
        assert dates == sorted(dates)
        assert [s.index for s in conversation.sessions] == [1, 2, 3, 4, 5]
        by_id = dict(zip(raw["haystack_session_ids"], raw["haystack_sessions"]))
        for session in conversation.sessions:
            assert [t.text for t in session.turns] == [
                t["content"] for t in by_id[session.session_id]
            ]


def test_has_answer_turns_are_the_evidence(instances, loaded):
    for raw, conversation in zip(instances, loaded):
        (qa,) = conversation.qa
        flagged = [t["content"] for s in raw["haystack_sessions"] for t in s if t.get("has_answer")]
        assert [conversation.turn(d).text for d in qa.evidence] == flagged
        assert {conversation.turn(d).session for d in qa.evidence} == {
            s.index for s in conversation.sessions if s.session_id in qa.answer_session_ids
        }


def test_abstention_and_integer_answer(loaded):
    assert [c.qa[0].abstention for c in loaded] == [False] * 5 + [True]
    assert loaded[-1].sample_id.endswith("_abs")
    assert loaded[1].qa[0].answer == "1"


def test_structured_answer_is_kept_as_json(instances, tmp_path):
    instances[0]["answer"] = {"rubric": ["likes tea"]}
    conversation = load_longmemeval(write_json(tmp_path / "l.json", instances))[0]
    assert json.loads(conversation.qa[0].answer) == {"rubric": ["likes tea"]}


def test_json_lines_are_read_too(instances, loaded, tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in instances))
    assert load_longmemeval(path) == loaded


def test_empty_sessions_are_dropped(instances, tmp_path):
    instances[0]["haystack_sessions"][0] = []
    conversation = load_longmemeval(write_json(tmp_path / "l.json", instances))[0]
    assert len(conversation.sessions) == 4
    assert all(s.turns for s in conversation.sessions)


def _set(index, key, value):
    return lambda instances: instances[index].update({key: value})


BREAKAGES = [
    ("dates shorter", lambda i: i[3]["haystack_dates"].pop(), "haystack_dates"),
    ("sessions longer", lambda i: i[3]["haystack_sessions"].append([]), "haystack_sessions"),
    ("question date", _set(3, "question_date", "May 30th"), "question_date"),
    ("haystack date", lambda i: i[3]["haystack_dates"].__setitem__(1, "soon"), "haystack_dates[1]"),
    ("role", lambda i: i[3]["haystack_sessions"][2][1].update(role="system"),
     "haystack_sessions[2][1].role"),
    ("content type", lambda i: i[3]["haystack_sessions"][0][0].update(content=None),
     "haystack_sessions[0][0].content"),
    ("has_answer type", lambda i: i[3]["haystack_sessions"][0][0].update(has_answer="yes"),
     "haystack_sessions[0][0].has_answer"),
    ("question missing", lambda i: i[3].pop("question"), "question"),
    ("answer null", _set(3, "answer", None), "answer"),
    ("question type", _set(3, "question_type", "trivia"), "question_type"),
    ("answer ids type", _set(3, "answer_session_ids", "answer_1"), "answer_session_ids"),
    ("empty haystack", lambda i: i[3].update(
        haystack_session_ids=[], haystack_dates=[], haystack_sessions=[]), "haystack_sessions"),
    ("all sessions empty", lambda i: i[3].update(haystack_sessions=[[]] * 5), "haystack_sessions"),
]  # fmt: skip


@pytest.mark.parametrize("breakage", BREAKAGES, ids=[b[0] for b in BREAKAGES])
def test_broken_instance(instances, tmp_path, breakage):
    _, breaks, field = breakage
    breaks(instances)
    path = write_json(tmp_path / "broken.json", instances)
    with pytest.raises(DataError) as caught:
        load_longmemeval(path)
    assert_points_at(caught.value, path, instances[3]["question_id"], field)


def test_missing_question_id_names_the_position(instances, tmp_path):
    del instances[4]["question_id"]
    path = write_json(tmp_path / "l.json", instances)
    with pytest.raises(DataError) as caught:
        load_longmemeval(path)
    assert_points_at(caught.value, path, "#4", "question_id")


def test_repeated_question_id(instances, tmp_path):
    instances[4]["question_id"] = instances[0]["question_id"]
    path = write_json(tmp_path / "l.json", instances)
    with pytest.raises(DataError) as caught:
        load_longmemeval(path)
    assert_points_at(caught.value, path, instances[0]["question_id"], "question_id")


def test_truncated_json(instances, tmp_path):
    path = tmp_path / "l.json"
    path.write_text(json.dumps(instances)[:-40])
    with pytest.raises(DataError) as caught:
        load_longmemeval(path)
    assert_points_at(caught.value, path, WHOLE_FILE, caught.value.field)
    assert caught.value.field.startswith("line ")


def test_empty_file(tmp_path):
    path = write_json(tmp_path / "l.json", [])
    with pytest.raises(DataError) as caught:
        load_longmemeval(path)
    assert_points_at(caught.value, path, "<none>", "<top level>")
