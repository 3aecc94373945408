"""A :class:`Conversation` as one JSON object and back, field for field.

The TFDS ``conversations`` config stores each conversation this way (``features.record``), so a
dataset read back from TFDS gives exactly the records its loader gave: every optional field,
LoCoMo's observations and summaries, dates to the microsecond (ISO 8601).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from memr1.data.records import QA, Conversation, Observation, Session, Turn


def _date(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def conversation_to_json(conversation: Conversation) -> str:
    """The conversation as compact JSON (tuples become lists, datetimes ISO 8601 strings)."""
    row = dataclasses.asdict(conversation)
    for session, original in zip(row["sessions"], conversation.sessions, strict=True):
        session["date_time"] = _date(original.date_time)
    for qa, original in zip(row["qa"], conversation.qa, strict=True):
        qa["question_date"] = _date(original.question_date)
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))


def _qa(row: Mapping[str, Any]) -> QA:
    date = row["question_date"]
    return QA(
        **{
            **row,
            "evidence": tuple(row["evidence"]),
            "evidence_raw": tuple(row["evidence_raw"]),
            "answer_session_ids": tuple(row["answer_session_ids"]),
            "question_date": None if date is None else datetime.fromisoformat(date),
        }
    )


def _session(row: Mapping[str, Any]) -> Session:
    return Session(
        index=row["index"],
        date_time=datetime.fromisoformat(row["date_time"]),
        date_time_raw=row["date_time_raw"],
        turns=tuple(Turn(**turn) for turn in row["turns"]),
        session_id=row["session_id"],
    )


def conversation_from_json(text: str | bytes) -> Conversation:
    """The conversation written by ``conversation_to_json``.

    Raises:
      ValueError: if ``text`` is not such a record (naming the missing or unexpected field).
    """
    try:
        row = json.loads(text)
        return Conversation(
            sample_id=row["sample_id"],
            speaker_a=row["speaker_a"],
            speaker_b=row["speaker_b"],
            sessions=tuple(_session(s) for s in row["sessions"]),
            qa=tuple(_qa(q) for q in row["qa"]),
            source=row["source"],
            observation=tuple(
                Observation(speaker, session, fact, tuple(ids))
                for speaker, session, fact, ids in row["observation"]
            ),
            session_summary=tuple((index, text) for index, text in row["session_summary"]),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"not a stored conversation record: {type(err).__name__}: {err}") from err
