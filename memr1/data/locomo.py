"""LoCoMo: loading the nested (``locomo10.json``) and flat per-conversation files, and writing.

The real file has quirks that a loader must get through (see ``datasets.md``): date keys for
sessions that do not exist, integer answers, category-5 items with only an adversarial answer, and
malformed, dangling or empty evidence. Those are tolerated. Anything else that breaks the schema
(bad JSON, a missing or mistyped field, an unknown category, an empty session or conversation, a
repeated dia_id, an unparseable date) raises a :class:`DataError` naming file, sample and field.

``dump_locomo`` writes the nested schema back, so generated conversations (synthloco) are read by
the very same code as the real benchmark.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from memr1.atomic import write_json_atomic
from memr1.data.categories import ADVERSARIAL, VALID_CATEGORIES
from memr1.data.errors import DataError, Where, read_json
from memr1.data.records import QA, Conversation, Observation, Session, Turn

SOURCE = "locomo"
DATE_FORMAT = "%I:%M %p on %d %B, %Y"

_SESSION_KEY = re.compile(r"session_(\d+)")
_OBSERVATION_KEY = re.compile(r"session_(\d+)_observation")
_SUMMARY_KEY = re.compile(r"session_(\d+)_summary")
# Evidence is meant to be "D<session>:<turn>". The file also has "D8:6; D9:17", "D9:1 D4:4",
# "D:11:26" and "D30:05"; matching an optional stray colon and rewriting the numbers without leading
# zeros recovers the turn each of those means ("D11:26", "D30:5"), while junk such as "D" yields
# nothing.
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")

logger = logging.getLogger(__name__)


def parse_locomo_date(text: str) -> datetime:
    """Parses a LoCoMo session date such as ``"1:56 pm on 8 May, 2023"``; raises ValueError."""
    return datetime.strptime(text.strip(), DATE_FORMAT)


def format_locomo_date(when: datetime) -> str:
    """Writes a date as the LoCoMo file does (``"1:56 pm on 8 May, 2023"``, no zero padding)."""
    hour = when.hour % 12 or 12
    half = "am" if when.hour < 12 else "pm"
    return f"{hour}:{when.minute:02d} {half} on {when.day} {when.strftime('%B')}, {when.year}"


def extract_dia_ids(value: Any) -> tuple[str, ...]:
    """Returns the dia_ids found in an evidence value, in order.

    Args:
      value: a string (possibly several ids glued with ``,``/``;``/spaces), or a list of such
        values, nested to any depth, as LoCoMo's ``evidence`` and observation entries are.
    """
    if isinstance(value, str):
        return tuple(f"D{int(s)}:{int(t)}" for s, t in _EVIDENCE.findall(value))
    if isinstance(value, list | tuple):
        return tuple(dia for item in value for dia in extract_dia_ids(item))
    return ()


def _parse_turns(raw: Any, where: Where, field: str, session: int, seen: set[str]) -> list[Turn]:
    where.check(raw, list, field)
    if not raw:
        raise where.error(field, "session has no turns")
    turns = []
    for position, item in enumerate(raw, start=1):
        at = f"{field}[{position - 1}]"
        where.check(item, dict, at)
        dia = where.get(item, "dia_id", str, f"{at}.dia_id")
        if dia in seen:
            raise where.error(f"{at}.dia_id", f"dia_id {dia!r} appears more than once")
        seen.add(dia)
        turns.append(
            Turn(
                speaker=where.get(item, "speaker", str, f"{at}.speaker"),
                dia_id=dia,
                text=where.get(item, "text", str, f"{at}.text"),
                session=session,
                index=position,
                image_caption=where.get(
                    item, "blip_caption", str, f"{at}.blip_caption", default=None
                ),
            )
        )
    return turns


def _parse_sessions(conv: Mapping[str, Any], where: Where, prefix: str) -> tuple[Session, ...]:
    # Iterate over the session lists that exist: conv-26 has date keys for sessions 20-35 whose
    # turn lists were never released.
    indices = sorted(int(m.group(1)) for key in conv if (m := _SESSION_KEY.fullmatch(key)))
    if not indices:
        raise where.error(prefix.rstrip("."), "conversation has no sessions")
    seen: set[str] = set()
    sessions = []
    for index in indices:
        date_field = f"{prefix}session_{index}_date_time"
        raw_date = where.get(conv, f"session_{index}_date_time", str, date_field)
        try:
            when = parse_locomo_date(raw_date)
        except ValueError:
            raise where.error(
                date_field, f"cannot read date {raw_date!r}; expected e.g. '1:56 pm on 8 May, 2023'"
            ) from None
        turns = _parse_turns(
            conv[f"session_{index}"], where, f"{prefix}session_{index}", index, seen
        )
        sessions.append(Session(index, when, raw_date, tuple(turns)))
    return tuple(sessions)


def _parse_qa(raw: Any, where: Where) -> tuple[QA, ...]:
    where.check(raw, list, "qa")
    items = []
    for position, item in enumerate(raw):
        at = f"qa[{position}]"
        where.check(item, dict, at)
        category = where.get(item, "category", int, f"{at}.category")
        if category not in VALID_CATEGORIES:
            raise where.error(
                f"{at}.category",
                f"unknown category {category}; expected {sorted(VALID_CATEGORIES)}",
            )
        adversarial = where.get(
            item, "adversarial_answer", (str, int), f"{at}.adversarial_answer", default=None
        )
        adversarial = None if adversarial is None else str(adversarial)
        # Six answers are JSON integers (years, counts); text is what every scorer compares.
        answer = where.get(item, "answer", (str, int, float), f"{at}.answer", default=None)
        from_adversarial = answer is None
        if from_adversarial:
            if category != ADVERSARIAL or adversarial is None:
                raise where.error(f"{at}.answer", "required field is missing")
            answer = adversarial
        raw_evidence = where.get(item, "evidence", list, f"{at}.evidence")
        for k, entry in enumerate(raw_evidence):
            where.check(entry, str, f"{at}.evidence[{k}]")
        items.append(
            QA(
                question=where.get(item, "question", str, f"{at}.question"),
                answer=str(answer),
                category=category,
                evidence=extract_dia_ids(raw_evidence),
                adversarial_answer=adversarial,
                answer_from_adversarial=from_adversarial,
                evidence_raw=tuple(raw_evidence),
            )
        )
    return tuple(items)


def _parse_observation(raw: Any, where: Where) -> tuple[Observation, ...]:
    where.check(raw, dict, "observation")
    facts = []
    for key, by_speaker in raw.items():
        match = _OBSERVATION_KEY.fullmatch(key)
        if match is None:
            raise where.error(f"observation.{key}", "expected a key like 'session_3_observation'")
        where.check(by_speaker, dict, f"observation.{key}")
        for speaker, entries in by_speaker.items():
            at = f"observation.{key}.{speaker}"
            where.check(entries, list, at)
            for k, entry in enumerate(entries):
                where.check(entry, list, f"{at}[{k}]")
                if len(entry) < 2 or not isinstance(entry[0], str):
                    raise where.error(f"{at}[{k}]", "expected [fact text, evidence]")
                ids = extract_dia_ids(entry[1:])
                facts.append(Observation(speaker, int(match.group(1)), entry[0], ids))
    return tuple(facts)


def _parse_summaries(raw: Any, where: Where) -> tuple[tuple[int, str], ...]:
    where.check(raw, dict, "session_summary")
    summaries = []
    for key, text in raw.items():
        match = _SUMMARY_KEY.fullmatch(key)
        if match is None:
            raise where.error(f"session_summary.{key}", "expected a key like 'session_3_summary'")
        summaries.append((int(match.group(1)), where.check(text, str, f"session_summary.{key}")))
    return tuple(sorted(summaries))


def parse_locomo_record(
    record: Any, where: Where, *, default_sample_id: str | None = None, source: str = SOURCE
) -> Conversation:
    """Turns one LoCoMo record (nested or flat form) into a Conversation.

    Args:
      record: the decoded JSON object. In the nested form the dialogue sits under
        ``conversation``; in the flat form ``speaker_a``, ``session_<N>`` ... are top-level keys.
      where: the file and sample errors are reported against.
      default_sample_id: used when the record has no ``sample_id`` (flat files); without it a
        missing ``sample_id`` is an error.
      source: the dataset name stored in ``Conversation.source``.
    """
    where.check(record, dict, "<record>")
    if default_sample_id is None or "sample_id" in record:
        sample_id = where.get(record, "sample_id", str)
    else:
        sample_id = default_sample_id
    where = where.at(sample_id)
    if "conversation" in record or "speaker_a" not in record:
        conv, prefix = where.get(record, "conversation", dict), "conversation."
    else:
        conv, prefix = record, ""
    speaker_a = where.get(conv, "speaker_a", str, f"{prefix}speaker_a")
    speaker_b = where.get(conv, "speaker_b", str, f"{prefix}speaker_b")
    # Each speaker owns the memories of their own turns; two equal names, or a turn by a third
    # person, would leave some turn without a well-defined owner.
    if speaker_b == speaker_a:
        raise where.error(f"{prefix}speaker_b", f"same name as speaker_a ({speaker_a!r})")
    sessions = _parse_sessions(conv, where, prefix)
    for session in sessions:
        for turn in session.turns:
            if turn.speaker not in (speaker_a, speaker_b):
                raise where.error(
                    f"{prefix}session_{session.index}[{turn.index - 1}].speaker",
                    f"{turn.speaker!r} is neither speaker_a ({speaker_a!r}) nor speaker_b "
                    f"({speaker_b!r})",
                )
    qa = _parse_qa(where.get(record, "qa", list), where)
    observation = (
        _parse_observation(record["observation"], where) if "observation" in record else ()
    )
    summaries = (
        _parse_summaries(record["session_summary"], where) if "session_summary" in record else ()
    )
    return Conversation(
        sample_id, speaker_a, speaker_b, sessions, qa, source, observation, summaries
    )


def _load_file(path: Path, source: str) -> list[Conversation]:
    data = read_json(path)
    where = Where(path)
    if isinstance(data, dict):
        return [parse_locomo_record(data, where, default_sample_id=path.stem, source=source)]
    where.check(data, list, "<top level>")
    if not data:
        raise where.error("<top level>", "file holds no conversation")
    return [parse_locomo_record(r, where.at(f"#{i}"), source=source) for i, r in enumerate(data)]


def load_locomo(path: str | os.PathLike, *, source: str = SOURCE) -> list[Conversation]:
    """Loads LoCoMo-schema conversations, in file order.

    Args:
      path: a nested file (JSON list of records with ``sample_id``), a flat file (one record; its
        id defaults to the file name without extension), or a folder of such ``*.json`` files,
        read in name order.
      source: the dataset name stored on each conversation (``"synthloco"`` for generated files).

    Returns:
      The conversations; sessions that have only a date key are skipped, and evidence is cleaned
      (see ``extract_dia_ids``). Evidence naming turns that do not exist is kept and counted in the
      log; ``Conversation.dangling_evidence`` lists it.

    Raises:
      DataError: when the file breaks the schema; the message names file, sample and field.
    """
    path = Path(path)
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise DataError(path, "<none>", "<files>", "folder holds no *.json file")
    conversations: list[Conversation] = []
    seen: dict[str, Path] = {}
    for file in files:
        for conversation in _load_file(file, source):
            if conversation.sample_id in seen:
                raise DataError(
                    file,
                    conversation.sample_id,
                    "sample_id",
                    f"sample_id already used (first in {seen[conversation.sample_id]})",
                )
            seen[conversation.sample_id] = file
            conversations.append(conversation)
    dangling = sum(len(c.dangling_evidence()) for c in conversations)
    if dangling:
        logger.info("%s: %d evidence ids name no existing turn", path, dangling)
    return conversations


def _qa_record(qa: QA) -> dict[str, Any]:
    record: dict[str, Any] = {"question": qa.question}
    if not qa.answer_from_adversarial:
        record["answer"] = qa.answer
    # Writing the raw entries reproduces the original file, unless the cleaned evidence was
    # replaced since loading, in which case the cleaned list is the truth.
    raw_matches = extract_dia_ids(list(qa.evidence_raw)) == qa.evidence
    record["evidence"] = list(qa.evidence_raw if raw_matches else qa.evidence)
    record["category"] = qa.category
    if qa.adversarial_answer is not None:
        record["adversarial_answer"] = qa.adversarial_answer
    return record


def _turn_record(turn: Turn) -> dict[str, Any]:
    record = {"speaker": turn.speaker, "dia_id": turn.dia_id, "text": turn.text}
    if turn.image_caption is not None:
        record["blip_caption"] = turn.image_caption
    return record


def locomo_record(conversation: Conversation) -> dict[str, Any]:
    """Returns the nested LoCoMo JSON object of a conversation (``event_summary`` is not kept)."""
    conv: dict[str, Any] = {
        "speaker_a": conversation.speaker_a,
        "speaker_b": conversation.speaker_b,
    }
    for session in conversation.sessions:
        conv[f"session_{session.index}_date_time"] = format_locomo_date(session.date_time)
        conv[f"session_{session.index}"] = [_turn_record(t) for t in session.turns]
    record: dict[str, Any] = {
        "sample_id": conversation.sample_id,
        "conversation": conv,
        "qa": [_qa_record(qa) for qa in conversation.qa],
    }
    if conversation.observation:
        observation: dict[str, dict[str, list]] = {}
        for fact in conversation.observation:
            by_speaker = observation.setdefault(f"session_{fact.session}_observation", {})
            ids = fact.dia_ids[0] if len(fact.dia_ids) == 1 else list(fact.dia_ids)
            by_speaker.setdefault(fact.speaker, []).append([fact.fact, ids])
        record["observation"] = observation
    if conversation.session_summary:
        record["session_summary"] = {
            f"session_{index}_summary": text for index, text in conversation.session_summary
        }
    return record


def dump_locomo(conversations: Iterable[Conversation], path: str | os.PathLike) -> Path:
    """Writes conversations as a nested LoCoMo file, atomically (temporary file, then rename).

    Dates are written in LoCoMo's format whatever the conversation's source, so the file always
    loads back with ``load_locomo``.
    """
    return write_json_atomic(path, [locomo_record(c) for c in conversations])
