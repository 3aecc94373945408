"""Tests of the synthloco generator: schema, determinism, coverage, gold operations and answers."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections import Counter

import pytest

from memr1.data.synthloco import dates, gold
from memr1.data.synthloco.generate import generate_dataset, summarize, write_dataset
from memr1.data.synthloco.qa import NO_PLAN
from memr1.data.synthloco.world import PLAN_KEYS, SynthConfig, get_preset

DATE_FORMAT = "%I:%M %p on %d %B, %Y"
RECORD_KEYS = ["qa", "conversation", "event_summary", "observation", "session_summary", "sample_id"]


@pytest.fixture(scope="module")
def tiny():
    return generate_dataset(get_preset("tiny"))


@pytest.fixture(scope="module")
def demo():
    return generate_dataset(get_preset("demo"))


def _records(dataset):
    return [record for records in dataset.splits.values() for record in records]


def _session_numbers(conversation: dict) -> list[int]:
    return [int(m.group(1)) for k in conversation if (m := re.fullmatch(r"session_(\d+)", k))]


def test_records_follow_the_locomo_schema(tiny):
    for record in _records(tiny):
        sid = record["sample_id"]
        assert list(record) == RECORD_KEYS, sid
        conv = record["conversation"]
        speakers = (conv["speaker_a"], conv["speaker_b"])
        assert speakers[0] != speakers[1], sid
        numbers = _session_numbers(conv)
        assert numbers == list(range(1, len(numbers) + 1)), sid
        expected_keys = ["speaker_a", "speaker_b"]
        for n in numbers:
            expected_keys += [f"session_{n}_date_time", f"session_{n}"]
        assert list(conv) == expected_keys, sid
        times = [dt.datetime.strptime(conv[f"session_{n}_date_time"], DATE_FORMAT) for n in numbers]
        assert all(a < b for a, b in zip(times, times[1:])), f"{sid}: dates not increasing"
        speaker_of = {}
        for n in numbers:
            for index, turn in enumerate(conv[f"session_{n}"], start=1):
                assert list(turn) == ["speaker", "dia_id", "text"], sid
                assert turn["dia_id"] == f"D{n}:{index}", sid
                assert turn["speaker"] in speakers and turn["text"], sid
                speaker_of[turn["dia_id"]] = turn["speaker"]
        assert len(speaker_of) == sum(len(conv[f"session_{n}"]) for n in numbers), "dia_id repeats"
        assert list(record["observation"]) == [f"session_{n}_observation" for n in numbers]
        assert list(record["session_summary"]) == [f"session_{n}_summary" for n in numbers]
        assert list(record["event_summary"]) == [f"events_session_{n}" for n in numbers]
        for n in numbers:
            by_speaker = record["observation"][f"session_{n}_observation"]
            assert list(by_speaker) == list(speakers), sid
            for speaker, facts in by_speaker.items():
                for sentence, dia_id in facts:
                    # A fact is about the speaker who said it, and is said in its own session.
                    assert speaker_of[dia_id] == speaker and dia_id.startswith(f"D{n}:"), sid
                    assert sentence.startswith(speaker) and sentence.endswith("."), sentence
            events = record["event_summary"][f"events_session_{n}"]
            assert list(events) == [*speakers, "date"], sid
            assert conv[f"session_{n}_date_time"].endswith(events["date"]), sid


def test_qa_entries_are_well_formed(tiny, demo):
    for record in _records(tiny) + _records(demo):
        ids = {t["dia_id"] for k, v in record["conversation"].items() if k[-1].isdigit() for t in v}
        for qa in record["qa"]:
            assert qa["evidence"] and set(qa["evidence"]) <= ids, qa
            if qa["category"] == 5:
                assert list(qa) == ["question", "evidence", "category", "adversarial_answer"], qa
                gold_answer = qa["adversarial_answer"]
            else:
                assert list(qa) == ["question", "answer", "evidence", "category"], qa
                assert qa["category"] in (1, 2, 3, 4), qa
                gold_answer = qa["answer"]
            assert isinstance(gold_answer, str) and 1 <= len(gold_answer.split()) <= 5, qa
        questions = [qa["question"] for qa in record["qa"]]
        assert len(questions) == len(set(questions)), record["sample_id"]


def test_tiny_preset_covers_every_operation_and_category(tiny):
    ops = Counter(op["op"] for entry in tiny.gold.values() for op in entry["ops"] if op["fact"])
    categories = Counter(qa["category"] for record in _records(tiny) for qa in record["qa"])
    assert set(ops) == {"ADD", "UPDATE", "DELETE", "NOOP"}, ops
    assert set(categories) == {1, 2, 3, 4, 5}, categories
    updates = [op for e in tiny.gold.values() for op in e["ops"] if op["op"] == "UPDATE"]
    assert {op["delete_add_ok"] for op in updates} == {True, False}, "need list and single updates"


def test_demo_preset_sizes(demo):
    counts = summarize(demo)
    assert [counts[s]["conversations"] for s in ("train", "validation", "test")] == [40, 10, 20]
    for record in _records(demo):
        assert sum(qa["category"] != 5 for qa in record["qa"]) >= 15, record["sample_id"]
        assert 6 <= len(_session_numbers(record["conversation"])) <= 10, record["sample_id"]
    assert counts["distinct_word_and_punct_tokens"] < 2000, counts


def test_same_seed_gives_identical_files_and_another_seed_differs(tmp_path):
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        write_dataset(generate_dataset(get_preset("tiny", seed)), tmp_path / name, preset="tiny")
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == ["gold_ops.json", "metadata.json", "test.json", "train.json", "validation.json"]
    for file in files:
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes(), file
    for file in ("train.json", "gold_ops.json"):
        assert (tmp_path / "a" / file).read_bytes() != (tmp_path / "c" / file).read_bytes(), file


def test_adding_conversations_keeps_the_existing_ones(tiny):
    more = dataclasses.replace(get_preset("tiny"), splits=(("train", 3),))
    assert generate_dataset(more).splits["train"][0] == tiny.splits["train"][0]


def _independent_replay(ops, speakers):
    """A second, deliberately plain reading of the gold-ops format."""
    banks = {speaker: {} for speaker in speakers}
    keys = {}
    for op in ops:
        bank, target = banks[op["speaker"]], op["target"]
        if op["op"] == "ADD":
            assert target == op["dia_id"] and target not in bank, op
            assert op["key"] not in {keys[t] for t in bank}, f"two memories for one key: {op}"
            bank[target], keys[target] = op["text"], op["key"]
        elif op["op"] in ("UPDATE", "DELETE"):
            assert target in bank and keys[target] == op["key"], f"{op['op']} of a missing memory"
            assert op["old_text"] == bank[target], op
            if op["op"] == "UPDATE":
                bank[target] = op["text"]
            else:
                del bank[target]
        elif target is not None:
            assert bank[target] == op["text"], "a repeat names its memory's current text"
        else:
            assert op["fact"] is None and op["key"] is None, op
    return {speaker: list(bank.values()) for speaker, bank in banks.items()}


def test_gold_ops_replay_to_the_final_bank(tiny, demo):
    for dataset in (tiny, demo):
        for sid, entry in dataset.gold.items():
            assert _independent_replay(entry["ops"], entry["speakers"]) == entry["final_bank"], sid
            assert gold.replay(entry["ops"], entry["speakers"]) == entry["final_bank"], sid


def test_gold_op_kinds_follow_the_documented_rules(demo):
    for entry in demo.gold.values():
        pets: dict[str, list[str]] = {}
        for op in entry["ops"]:
            if op["op"] == "DELETE":
                assert op["key"] in PLAN_KEYS and op["text"] is None, op
            if op["op"] == "UPDATE":
                assert op["delete_add_ok"] == (op["key"] not in ("pets", "hobbies")), op
            if op["key"] == "pets" and op["op"] in ("ADD", "UPDATE"):
                name = re.search(r"named (\w+)", op["fact"]).group(1)
                pets.setdefault(op["speaker"], []).append(name)
                # The merged memory names every pet so far, not just the newest one.
                assert all(n in op["text"] for n in pets[op["speaker"]]), op


def test_replay_refuses_an_update_of_a_missing_memory(tiny):
    entry = next(iter(tiny.gold.values()))
    ops = [dict(op) for op in entry["ops"]]
    update = next(op for op in ops if op["op"] == "UPDATE")
    update["target"] = "D99:1"
    with pytest.raises(ValueError, match="missing memory"):
        gold.replay(ops, entry["speakers"])


def test_single_hop_and_date_answers_are_in_the_gold_bank(demo):
    for record in _records(demo):
        bank = demo.gold[record["sample_id"]]["final_bank"]
        for qa in record["qa"]:
            temporal_date = qa["category"] == 2 and qa["question"].startswith("When")
            if qa.get("answer") in NO_PLAN.values():
                continue  # a plan called off: test_a_plan_called_off_is_asked_for_as_none
            if qa["category"] == 4 or temporal_date:
                (speaker,) = [s for s in bank if re.search(rf"\b{s}\b", qa["question"])]
                assert qa["answer"] in " ".join(bank[speaker]), (qa, bank[speaker])


def _expected_date(said: dt.date, text: str) -> str | None:
    """The absolute date a turn's relative expression means, computed here without the generator."""
    if "two days ago" in text.lower():
        day = said - dt.timedelta(days=2)
    elif "yesterday" in text.lower():
        day = said - dt.timedelta(days=1)
    elif "today" in text.lower():
        day = said
    elif "last month" in text.lower():
        day = said.replace(day=1) - dt.timedelta(days=1)
        return day.strftime("%B %Y")
    elif "last year" in text.lower():
        return str(said.year - 1)
    else:
        return None
    return f"{day.day} {day.strftime('%B %Y')}"


def test_relative_time_answers_match_the_session_date(demo):
    seen = Counter()
    for record in _records(demo):
        conv = record["conversation"]
        for qa in record["qa"]:
            if qa["category"] != 2 or not qa["question"].startswith("When"):
                continue
            (dia_id,) = qa["evidence"]
            session, index = (int(x) for x in dia_id[1:].split(":"))
            said = dt.datetime.strptime(conv[f"session_{session}_date_time"], DATE_FORMAT).date()
            text = conv[f"session_{session}"][index - 1]["text"]
            assert qa["answer"] == _expected_date(said, text), (qa, text)
            seen[next(w for w in dates.EXPRESSIONS if w in text.lower())] += 1
    assert seen["yesterday"] > 0 and seen["last year"] > 0, seen


def _by_end_of(date: str, year: int, month: int) -> bool:
    """Whether a gold date string ("7 May 2023", "May 2023", "2022") lies by the end of a month."""
    parts = date.split()
    if len(parts) == 1:
        return int(parts[0]) < year or (int(parts[0]) == year and month == 12)
    when = dt.datetime.strptime(" ".join(parts[-2:]), "%B %Y")
    return (when.year, when.month) <= (year, month)


def test_as_of_counts_match_the_adoption_dates(demo):
    checked = 0
    for record in _records(demo):
        ops = demo.gold[record["sample_id"]]["ops"]
        for qa in record["qa"]:
            match = re.fullmatch(r"How many \w+ did (\w+) have as of (\w+ \d+)\?", qa["question"])
            if match is None or qa["category"] != 2:
                continue
            speaker, month = match.group(1), dt.datetime.strptime(match.group(2), "%B %Y")
            adopted = [
                op["date"]
                for op in ops
                if op["speaker"] == speaker and op["key"] == "pets" and op["op"] != "NOOP"
            ]
            count = sum(_by_end_of(date, month.year, month.month) for date in adopted)
            assert 0 < count < len(adopted), qa
            assert qa["answer"] == ["zero", "one", "two", "three", "four", "five"][count], qa
            checked += 1
    assert checked > 0


@pytest.mark.parametrize(
    ("expression", "said", "answer"),
    [
        ("yesterday", dt.date(2023, 5, 8), "7 May 2023"),
        ("yesterday", dt.date(2024, 3, 1), "29 February 2024"),
        ("two days ago", dt.date(2023, 1, 1), "30 December 2022"),
        ("last month", dt.date(2023, 1, 15), "December 2022"),
        ("last year", dt.date(2023, 5, 8), "2022"),
    ],
)
def test_resolve_relative_time(expression, said, answer):
    assert dates.resolve(expression, said).answer() == answer


def test_session_time_format_round_trips():
    for moment in (dt.datetime(2023, 5, 8, 13, 56), dt.datetime(2023, 9, 13, 0, 9)):
        text = dates.format_date_time(moment)
        assert dates.parse_date_time(text) == moment
    assert dates.format_date_time(dt.datetime(2023, 5, 8, 13, 56)) == "1:56 pm on 8 May, 2023"
    assert (
        dates.format_date_time(dt.datetime(2023, 9, 13, 0, 9)) == "12:09 am on 13 September, 2023"
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gap_days": (1, 5)}, "gap_days"),
        ({"num_cities": 99}, "num_cities"),
        ({"splits": (("gold_ops", 1),)}, "splits"),
        ({"min_qa": 30, "qa_per_conversation": 20}, "min_qa"),
        ({"names": ("Ada", "Toby"), "num_names": 2}, "names"),
    ],
)
def test_bad_config_names_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(SynthConfig(), **change).validate()


def test_speakers_come_from_the_configured_names():
    config = dataclasses.replace(get_preset("tiny"), names=("Ada", "Bo", "Cy"), num_names=3)
    for record in _records(generate_dataset(config)):
        conv = record["conversation"]
        assert {conv["speaker_a"], conv["speaker_b"]} < {"Ada", "Bo", "Cy"}


def test_unreachable_min_qa_is_an_error():
    config = dataclasses.replace(
        get_preset("tiny"), sessions=(1, 1), facts_per_session=(1, 1), min_qa=16
    )
    with pytest.raises(RuntimeError, match="min_qa=16"):
        generate_dataset(config)


PLAN_QUESTIONS = {
    "Where is {} planning to travel?": ("nowhere", "trip to"),
    "What event is {} planning to go to?": ("nothing", "plans to go to"),
}


def test_a_plan_called_off_is_asked_for_as_none(demo):
    asked = 0
    for record in _records(demo):
        bank = demo.gold[record["sample_id"]]["final_bank"]
        ops = {op["dia_id"]: op for op in demo.gold[record["sample_id"]]["ops"]}
        for qa in record["qa"]:
            for template, (none, phrase) in PLAN_QUESTIONS.items():
                speaker = next((s for s in bank if qa["question"] == template.format(s)), None)
                if speaker is None or qa["category"] == 5:
                    continue
                plans = [t for t in bank[speaker] if phrase in t]
                # "nowhere" / "nothing" exactly when the speaker's plan was called off, citing
                # the cancelling turn alone (the turn that made the plan could not give it yet).
                assert (qa["answer"] == none) == (not plans), (qa, bank[speaker])
                if qa["answer"] == none:
                    (turn,) = qa["evidence"]
                    assert ops[turn]["op"] == "DELETE", qa
                    asked += 1
    assert asked > 20


def test_every_last_change_and_cancellation_has_a_linked_question(demo):
    linked = 0
    for record in _records(demo):
        ops = demo.gold[record["sample_id"]]["ops"]
        cited = {e for qa in record["qa"] if qa["category"] != 5 for e in qa["evidence"]}
        last = {}
        for op in ops:
            if op["key"] in ("city", "job", "trip", "event") and op["op"] != "NOOP":
                last[(op["speaker"], op["key"])] = op
        for op in last.values():
            if op["op"] == "DELETE" or (op["op"] == "UPDATE" and op["delete_add_ok"]):
                assert op["dia_id"] in cited, (record["sample_id"], op)
                linked += 1
    assert linked > 100


def test_repeats_are_cited_by_the_questions_they_restate(demo):
    cited = total = 0
    for record in _records(demo):
        ops = {op["dia_id"]: op for op in demo.gold[record["sample_id"]]["ops"]}
        evidence = [(qa, e) for qa in record["qa"] for e in qa["evidence"]]
        for qa, turn in evidence:
            op = ops[turn]
            if op["op"] == "NOOP":
                # A repeat restates the answer (or, for lists, one of its items); date and
                # count questions never cite one.
                assert op["fact"] is not None, qa
                assert not qa["question"].startswith(("When", "How many")), qa
                said = set(re.findall(r"\w+", op["fact"])) - {op["speaker"], "a", "an", "is"}
                answer = qa.get("answer", qa.get("adversarial_answer"))
                asked = re.findall(r"\w+", f"{qa['question']} {answer}")
                assert said & set(asked) or qa["category"] == 3, (qa, op["fact"])
                cited += 1
        repeats = [op for op in ops.values() if op["op"] == "NOOP" and op["fact"]]
        total += len(repeats)
    assert cited > 0.5 * total, (cited, total)


def test_change_questions_and_repeat_citations_can_be_turned_off():
    plain = dataclasses.replace(get_preset("demo"), change_questions=False, cite_repeats=False)
    old = generate_dataset(plain)
    for record in _records(old):
        assert not any(qa.get("answer") in NO_PLAN.values() for qa in record["qa"])
        ops = {op["dia_id"]: op["op"] for op in old.gold[record["sample_id"]]["ops"]}
        assert all(ops[e] != "NOOP" for qa in record["qa"] for e in qa["evidence"])
