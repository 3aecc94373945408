"""Small, valid files in the real LoCoMo, LongMemEval and MSC schemas, generated from a seed.

LongMemEval and MSC cannot be downloaded here, and the real LoCoMo file may not be present, so tests
(and users who want to try the loaders) generate these instead. Each generator returns the raw JSON
records; the ``write_*`` functions put them on disk atomically. The LoCoMo records reproduce the
real file's quirks on purpose (an integer answer, category 5 without ``answer``, evidence glued into
one string or left empty, a date key for a session that does not exist, observation evidence as a
list and as an "a, b" string), so that a loader tested on them is tested on what it will meet.

    python -m tests.data_fixtures --out /tmp/fixtures --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from memr1.atomic import write_json_atomic, write_text_atomic
from memr1.data.locomo import format_locomo_date
from memr1.data.longmemeval import QUESTION_TYPES, format_longmemeval_date
from memr1.torchless import without_torch

_NAMES = ("Avery", "Blake", "Casey", "Devon", "Emery", "Finley", "Harper", "Jordan", "Kendall")
# (statement a speaker makes, question about it with {name}, the same in the first person,
# possible values)
_FACTS = (
    (
        "I adopted a {v} last week.",
        "What pet did {name} adopt?",
        "What pet did I adopt?",
        ("beagle", "tabby cat", "turtle"),
    ),
    (
        "I started a new job as a {v}.",
        "What job did {name} start?",
        "What job did I start?",
        ("nurse", "baker", "pilot"),
    ),
    (
        "I am learning to play the {v}.",
        "Which instrument is {name} learning?",
        "Which instrument am I learning?",
        ("cello", "banjo"),
    ),
    (
        "We booked a trip to {v}.",
        "Where is {name} travelling to?",
        "Where am I travelling to?",
        ("Lisbon", "Kyoto", "Oslo"),
    ),
    (
        "It turns out I'm allergic to {v}.",
        "What is {name} allergic to?",
        "What am I allergic to?",
        ("peanuts", "pollen"),
    ),
)
_CHATTER = (
    "How have you been lately?",
    "That sounds wonderful, tell me more.",
    "Work has kept me busy this month.",
    "I'm glad to hear that!",
    "We should catch up more often.",
    "The weather has been lovely here.",
)


def _fact(rng: random.Random, k: int, first_person: bool = False) -> tuple[str, str, str]:
    """Returns (statement, question, answer) for the k-th fact kind, with a random value."""
    statement, question, question_mine, values = _FACTS[k % len(_FACTS)]
    value = rng.choice(values)
    return statement.format(v=value), question_mine if first_person else question, value


def _dates(rng: random.Random, count: int) -> list[datetime]:
    when = datetime(2023, 1, 1) + timedelta(days=rng.randrange(300), minutes=rng.randrange(1440))
    dates = []
    for _ in range(count):
        dates.append(when)
        when += timedelta(days=rng.randrange(3, 21), minutes=rng.randrange(-300, 300))
    return dates


def _locomo_sessions(
    rng: random.Random, tag: str, k: int, speakers: tuple[str, str], sizes: tuple[int, int]
) -> tuple[dict[str, Any], list[tuple], dict[str, Any]]:
    """Returns (conversation object, facts stated, observation) of the k-th fixture record."""
    (a, b), (num_sessions, turns_per_session) = speakers, sizes
    conv: dict[str, Any] = {"speaker_a": a, "speaker_b": b}
    facts, observation = [], {}
    dates = _dates(rng, num_sessions + 1)
    for s in range(1, num_sessions + 1):
        conv[f"session_{s}_date_time"] = format_locomo_date(dates[s - 1])
        fact_at = rng.randrange(turns_per_session)
        turns = []
        for t in range(turns_per_session):
            speaker = speakers[t % 2]
            turn = {"speaker": speaker, "dia_id": f"D{s}:{t + 1}", "text": rng.choice(_CHATTER)}
            if t == fact_at:
                statement, question, value = _fact(rng, k + s)
                turn["text"] = statement
                facts.append((speaker, question, value, turn["dia_id"], dates[s - 1]))
                observation[f"session_{s}_observation"] = {speaker: [[statement, turn["dia_id"]]]}
            if t == 1:
                turn["img_url"] = [f"https://example.invalid/{tag}-{s}.jpg"]
                turn["blip_caption"] = "a photo of a cup of coffee on a table"
            turns.append(turn)
        conv[f"session_{s}"] = turns
    # The real file also has date keys past the last released session.
    conv[f"session_{num_sessions + 1}_date_time"] = format_locomo_date(dates[-1])
    # Observation evidence also comes as a list and as one "a, b" string in the real file.
    first = observation["session_1_observation"]
    first.setdefault(b, []).append([f"{a} and {b} talked.", ["D1:1", "D1:2"]])
    first.setdefault(a, []).append([f"{a} greeted {b}.", "D1:1, D1:2"])
    return conv, facts, observation


def _locomo_questions(speakers: tuple[str, str], facts: list[tuple]) -> list[dict[str, Any]]:
    """Returns the QA list of one fixture record (see ``locomo_fixture``)."""
    a, b = speakers
    qa = []
    for speaker, question, value, dia, when in facts:
        other = a if speaker == b else b
        qa += [
            {"question": question.format(name=speaker), "answer": value, "evidence": [dia],
             "category": 4},
            {"question": f"In which year did {speaker} say that?", "answer": when.year,
             "evidence": [dia], "category": 2},
            {"question": question.format(name=other), "evidence": [dia], "category": 5,
             "adversarial_answer": value},
        ]  # fmt: skip
    (s1, _, v1, d1, _), (s2, _, v2, d2, _) = facts[0], facts[1]
    qa += [
        {"question": f"What did {s1} and {s2} mention first?", "answer": f"{v1}, {v2}",
         "evidence": [f"{d1}; {d2}"], "category": 1},
        {"question": f"Would {a} enjoy a quiet weekend?", "answer": "Likely yes; calm",
         "evidence": [], "category": 3},
    ]  # fmt: skip
    return qa


def locomo_fixture(
    seed: int = 0, num_conversations: int = 3, num_sessions: int = 3, turns_per_session: int = 5
) -> list[dict[str, Any]]:
    """Returns nested LoCoMo records: one fact per session and 3 QA per fact, plus 2 per record.

    Per fact: single-hop (category 4), temporal with an integer year answer (2) and adversarial
    without ``answer`` (5). Per record: multi-hop over the first two facts with its evidence glued
    into one string (1), and open-domain with empty evidence (3).
    """
    if num_sessions < 2 or turns_per_session < 2:
        raise ValueError("a LoCoMo fixture needs at least 2 sessions of at least 2 turns")
    rng = random.Random(seed)
    records = []
    for k in range(num_conversations):
        speakers = tuple(rng.sample(_NAMES, 2))
        sizes = (num_sessions, turns_per_session)
        conv, facts, observation = _locomo_sessions(rng, f"{seed}-{k}", k, speakers, sizes)
        a, b = speakers
        records.append(
            {
                "sample_id": f"conv-{seed}-{k}",
                "conversation": conv,
                "qa": _locomo_questions(speakers, facts),
                "event_summary": {
                    f"events_session_{s}": {a: [], b: [], "date": ""} for s in (1, 2)
                },
                "observation": observation,
                "session_summary": {
                    f"session_{s}_summary": f"{a} and {b} caught up in session {s}."
                    for s in range(1, num_sessions + 1)
                },
            }
        )
    return records


def write_locomo_fixture(path: str | os.PathLike, *, flat: bool = False, **kwargs: Any) -> Path:
    """Writes ``locomo_fixture(**kwargs)`` as one nested file, or with ``flat`` as a folder of
    flat per-conversation files (the dialogue keys at top level, no ``sample_id``)."""
    records = locomo_fixture(**kwargs)
    if not flat:
        return write_json_atomic(path, records)
    for record in records:
        flat_record = {k: v for k, v in record.items() if k not in ("sample_id", "conversation")}
        write_json_atomic(
            Path(path) / f"{record['sample_id']}.json", {**record["conversation"], **flat_record}
        )
    return Path(path)


def longmemeval_fixture(
    seed: int = 0,
    num_instances: int = 6,
    num_sessions: int = 3,
    turns_per_session: int = 4,
    variant: str = "oracle",
) -> list[dict[str, Any]]:
    """Returns LongMemEval instances; question types cycle, the last one is an abstention.

    ``variant="oracle"`` lists the haystack out of date order, as the real oracle file does;
    ``"s"`` and ``"m"`` list it sorted. One instance has an integer answer.
    """
    if variant not in ("s", "m", "oracle"):
        raise ValueError(f"unknown LongMemEval variant {variant!r}; expected 's', 'm' or 'oracle'")
    rng = random.Random(seed)
    instances = []
    for i in range(num_instances):
        dates = _dates(rng, num_sessions + 1)
        statement, question, value = _fact(rng, i, first_person=True)
        answer_at = rng.randrange(num_sessions)
        ids, sessions = [], []
        for s in range(num_sessions):
            prefix = "answer" if s == answer_at else rng.choice(("sharegpt", "ultrachat"))
            ids.append(f"{prefix}_{seed}{i}{s}_{rng.randrange(16**6):06x}")
            turns = [
                {"role": ("user", "assistant")[t % 2], "content": rng.choice(_CHATTER)}
                for t in range(turns_per_session)
            ]
            if s == answer_at:
                turns[0] = {"role": "user", "content": statement, "has_answer": True}
            sessions.append(turns)
        abstention = i == num_instances - 1 and num_instances > 1
        answer: Any = value
        if abstention:
            question, answer = "What is the name of my sister's cat?", "The history never says."
        elif i == 1:
            # Fact kinds follow i, so instance 1 states the new job; the count is an integer.
            question, answer = "How many new jobs have I started?", 1
        instances.append(
            {
                "question_id": f"fx{seed}_{i:03d}" + ("_abs" if abstention else ""),
                "question_type": QUESTION_TYPES[i % len(QUESTION_TYPES)],
                "question": question,
                "answer": answer,
                "question_date": format_longmemeval_date(dates[-1]),
                "haystack_session_ids": ids,
                "haystack_dates": [format_longmemeval_date(d) for d in dates[:-1]],
                "haystack_sessions": sessions,
                "answer_session_ids": [ids[answer_at]],
            }
        )
        if variant == "oracle":
            order = list(range(num_sessions))
            rng.shuffle(order)
            for key in ("haystack_session_ids", "haystack_dates", "haystack_sessions"):
                instances[-1][key] = [instances[-1][key][k] for k in order]
    return instances


def write_longmemeval_fixture(path: str | os.PathLike, **kwargs: Any) -> Path:
    """Writes ``longmemeval_fixture(**kwargs)`` as a JSON list, like the official files."""
    return write_json_atomic(path, longmemeval_fixture(**kwargs))


def msc_fixture(
    seed: int = 0,
    num_rows: int = 4,
    num_previous: int = 2,
    turns_per_session: int = 4,
    self_instruct: bool = True,
) -> list[dict[str, Any]]:
    """Returns MSC rows (MSC-Self-Instruct rows with ``self_instruct``, else ParlAI rows).

    The fact asked about is stated in the first previous session; earlier sessions store turns
    without ``id``, as ParlAI's files do.
    """
    rng = random.Random(seed)
    rows = []
    for r in range(num_rows):
        statement, _, value = _fact(rng, r)
        previous = []
        for p in range(num_previous):
            dialog = [{"text": rng.choice(_CHATTER)} for _ in range(turns_per_session)]
            if p == 0:
                dialog[0] = {"text": statement}
            num, unit = rng.randrange(1, 8), rng.choice(("hours", "days"))
            previous.append(
                {
                    "personas": [[f"I like {rng.choice(_NAMES)}."], ["I work from home."]],
                    "dialog": dialog,
                    "time_num": num,
                    "time_unit": unit,
                    "time_back": f"{num} {unit} ago",
                }
            )
        row = {
            "personas": [["I have a new hobby."], ["I moved last year."]],
            "dialog": [
                {"id": ("Speaker 1", "Speaker 2")[t % 2], "text": rng.choice(_CHATTER)}
                for t in range(turns_per_session)
            ],
            "metadata": {"initial_data_id": f"fixture-{seed}-{r}", "session_id": num_previous + 1},
            "previous_dialogs": previous,
        }
        if self_instruct:
            row["self_instruct"] = {"B": "Do you remember what I told you recently?", "A": value}
        rows.append(row)
    return rows


def write_msc_fixture(path: str | os.PathLike, *, jsonl: bool = True, **kwargs: Any) -> Path:
    """Writes ``msc_fixture(**kwargs)`` as JSON Lines (default) or as one JSON list."""
    rows = msc_fixture(**kwargs)
    if not jsonl:
        return write_json_atomic(path, rows)
    return write_text_atomic(path, "".join(json.dumps(row) + "\n" for row in rows))


def main(argv: list[str] | None = None) -> int:
    """Writes one fixture of each dataset into ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder to write into")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for written in (
        write_locomo_fixture(args.out / "locomo_fixture.json", seed=args.seed),
        write_longmemeval_fixture(args.out / "longmemeval_oracle.json", seed=args.seed),
        write_msc_fixture(args.out / "msc_self_instruct.jsonl", seed=args.seed),
    ):
        print(written)
    return 0


if __name__ == "__main__":
    without_torch()
    raise SystemExit(main())
