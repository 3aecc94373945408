"""LongMemEval (``longmemeval_s``, ``_m`` and ``_oracle``): loading into Conversations.

Each instance is one question with its own chat history ("haystack"): three parallel lists give each
session's id, date and turns. An instance becomes one Conversation between ``"user"`` and
``"assistant"`` with a single QA. Sessions are put in date order, because the oracle file lists them
unsorted and the memory pipeline must replay a history in the order it happened. The turns flagged
``has_answer`` become the QA's evidence, in the same ``"D<session>:<turn>"`` ids LoCoMo uses.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from memr1.data.errors import DataError, Where, read_json_records
from memr1.data.records import NO_CATEGORY, QA, Conversation, Session, Turn, dia_id

SOURCE = "longmemeval"
ROLES = ("user", "assistant")
QUESTION_TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)
ABSTENTION_SUFFIX = "_abs"

# "2023/05/30 (Tue) 23:40". The weekday is read past rather than checked: strptime would not
# validate it either, and the date and time alone fix the moment.
_DATE = re.compile(r"\s*(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]+\))?\s*(\d{1,2}):(\d{2})\s*")


def parse_longmemeval_date(text: str) -> datetime:
    """Parses a LongMemEval date such as ``"2023/05/30 (Tue) 23:40"``; raises ValueError."""
    match = _DATE.fullmatch(text)
    if match is None:
        raise ValueError(f"not a LongMemEval date: {text!r}")
    year, month, day, hour, minute = (int(g) for g in match.groups())
    return datetime(year, month, day, hour, minute)


def format_longmemeval_date(when: datetime) -> str:
    """Writes a date in LongMemEval's form, ``"2023/05/30 (Tue) 23:40"``."""
    return when.strftime("%Y/%m/%d (%a) %H:%M")


def _date(where: Where, raw: Any, field: str) -> datetime:
    where.check(raw, str, field)
    try:
        return parse_longmemeval_date(raw)
    except ValueError:
        raise where.error(
            field, f"cannot read date {raw!r}; expected e.g. '2023/05/30 (Tue) 23:40'"
        ) from None


def _answer_text(where: Where, raw: dict[str, Any]) -> str:
    answer = where.get(raw, "answer", (str, int, float, list, dict))
    # Preference questions carry a rubric and abstentions an explanation; anything that is not
    # already text is written as JSON so that no structure is silently lost.
    if isinstance(answer, str):
        return answer
    if isinstance(answer, int | float):
        return str(answer)
    return json.dumps(answer, ensure_ascii=False)


def _parallel_lists(where: Where, raw: dict[str, Any]) -> tuple[list, list, list]:
    ids = where.get(raw, "haystack_session_ids", list)
    dates = where.get(raw, "haystack_dates", list)
    sessions = where.get(raw, "haystack_sessions", list)
    for name, values in (("haystack_dates", dates), ("haystack_sessions", sessions)):
        if len(values) != len(ids):
            raise where.error(
                name,
                f"has {len(values)} entries but haystack_session_ids has {len(ids)}; "
                "the three haystack lists must run in parallel",
            )
    if not ids:
        raise where.error("haystack_sessions", "instance has no sessions")
    for k, session_id in enumerate(ids):
        where.check(session_id, str, f"haystack_session_ids[{k}]")
    return ids, dates, sessions


def _session_turns(where: Where, raw: Any, position: int, index: int) -> tuple[list[Turn], list]:
    field = f"haystack_sessions[{position}]"
    where.check(raw, list, field)
    turns, evidence = [], []
    for k, item in enumerate(raw):
        at = f"{field}[{k}]"
        where.check(item, dict, at)
        role = where.get(item, "role", str, f"{at}.role")
        if role not in ROLES:
            raise where.error(f"{at}.role", f"unknown role {role!r}; expected one of {ROLES}")
        turn = Turn(
            role,
            dia_id(index, k + 1),
            where.get(item, "content", str, f"{at}.content"),
            session=index,
            index=k + 1,
        )
        if where.get(item, "has_answer", bool, f"{at}.has_answer", default=False):
            evidence.append(turn.dia_id)
        turns.append(turn)
    return turns, evidence


def parse_longmemeval_instance(raw: Any, where: Where, *, source: str = SOURCE) -> Conversation:
    """Turns one LongMemEval instance into a Conversation holding its single question.

    Args:
      raw: the decoded JSON object of the instance.
      where: the file (and provisional sample) that errors are reported against.
      source: the dataset name stored on the conversation.

    Returns:
      A Conversation whose ``sample_id`` is the ``question_id``, whose sessions are sorted by date
      (ties keep file order) and renumbered 1..n, and whose one QA has ``category`` NO_CATEGORY.
    """
    where.check(raw, dict, "<record>")
    question_id = where.get(raw, "question_id", str)
    where = where.at(question_id)
    question_type = where.get(raw, "question_type", str)
    if question_type not in QUESTION_TYPES:
        raise where.error(
            "question_type", f"unknown question type {question_type!r}; expected {QUESTION_TYPES}"
        )
    question_date_raw = where.get(raw, "question_date", str)
    question_date = _date(where, question_date_raw, "question_date")
    ids, raw_dates, raw_sessions = _parallel_lists(where, raw)
    dates = [_date(where, d, f"haystack_dates[{k}]") for k, d in enumerate(raw_dates)]
    answer_ids = where.get(raw, "answer_session_ids", list)
    for k, session_id in enumerate(answer_ids):
        where.check(session_id, str, f"answer_session_ids[{k}]")

    sessions, evidence = [], []
    for position in sorted(range(len(ids)), key=lambda k: dates[k]):
        index = len(sessions) + 1
        turns, found = _session_turns(where, raw_sessions[position], position, index)
        # Empty sessions carry nothing to remember; dropping them keeps every Session non-empty
        # (the session id list still says they existed).
        if not turns:
            continue
        sessions.append(
            Session(index, dates[position], raw_dates[position], tuple(turns), ids[position])
        )
        evidence.extend(found)
    if not sessions:
        raise where.error("haystack_sessions", "every session of the instance is empty")

    qa = QA(
        question=where.get(raw, "question", str),
        answer=_answer_text(where, raw),
        category=NO_CATEGORY,
        evidence=tuple(evidence),
        question_id=question_id,
        question_type=question_type,
        question_date=question_date,
        question_date_raw=question_date_raw,
        abstention=question_id.endswith(ABSTENTION_SUFFIX),
        answer_session_ids=tuple(answer_ids),
    )
    return Conversation(question_id, "user", "assistant", tuple(sessions), (qa,), source)


def load_longmemeval(path: str | os.PathLike, *, source: str = SOURCE) -> list[Conversation]:
    """Loads a LongMemEval file (s, m or oracle; a JSON list or JSON Lines), one Conversation each.

    Raises:
      DataError: when the file breaks the schema; the message names file, question_id and field.
    """
    path = Path(path)
    where = Where(path)
    conversations = []
    seen: set[str] = set()
    for position, raw in enumerate(read_json_records(path)):
        conversation = parse_longmemeval_instance(raw, where.at(f"#{position}"), source=source)
        if conversation.sample_id in seen:
            raise DataError(path, conversation.sample_id, "question_id", "question_id repeats")
        seen.add(conversation.sample_id)
        conversations.append(conversation)
    if not conversations:
        raise DataError(path, "<none>", "<top level>", "file holds no instance")
    return conversations
