"""Multi-Session Chat: ParlAI's MSC rows and MemGPT's MSC-Self-Instruct rows, as Conversations.

A row holds the current session (``dialog``) and the sessions before it (``previous_dialogs``), each
with the two speakers' personas. MSC-Self-Instruct adds one question about the earlier sessions,
``self_instruct = {"B": question, "A": answer}``; plain ParlAI rows have no question.

MSC has no calendar dates, only the gap between sessions. Dates are therefore synthesised: the
current session is put at ``ANCHOR_DATE`` and each earlier one before it. We read a previous
dialog's ``time_num``/``time_unit`` (or, when those are absent, its ``time_back`` text such as
"4 days ago") as the time that passed between that session and the one after it, so session i
happened the sum of the gaps of sessions i..n before the anchor. Only the order and the spacing
are meaningful; the anchor itself is arbitrary and fixed so that runs are reproducible.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from memr1.data.errors import DataError, Where, read_json_records
from memr1.data.records import NO_CATEGORY, QA, Conversation, Observation, Session, Turn, dia_id

SOURCE = "msc"
SOURCE_SELF_INSTRUCT = "msc-self-instruct"
QUESTION_TYPE = "msc-self-instruct"
SPEAKERS = ("Speaker 1", "Speaker 2")
ANCHOR_DATE = datetime(2023, 1, 1, 12, 0)

_UNITS = {
    "minute": timedelta(minutes=1),
    "hour": timedelta(hours=1),
    "day": timedelta(days=1),
    "week": timedelta(weeks=1),
    # Calendar months and years vary in length; 30 and 365 days keep the arithmetic exact.
    "month": timedelta(days=30),
    "year": timedelta(days=365),
}
_TIME_BACK = re.compile(r"\s*(\d+)\s*([a-z]+?)s?(?:\s+ago)?\s*", re.IGNORECASE)


def _unit(where: Where, unit: str, field: str) -> timedelta:
    key = unit.strip().lower().removesuffix("s")
    if key not in _UNITS:
        raise where.error(field, f"unknown time unit {unit!r}; expected one of {sorted(_UNITS)}")
    return _UNITS[key]


def _gap(where: Where, previous: dict[str, Any], field: str) -> timedelta:
    """The time between a previous session and the session that followed it."""
    if "time_num" in previous or "time_unit" in previous:
        num = where.get(previous, "time_num", (int, float), f"{field}.time_num")
        unit = where.get(previous, "time_unit", str, f"{field}.time_unit")
        return num * _unit(where, unit, f"{field}.time_unit")
    text = where.get(previous, "time_back", str, f"{field}.time_back")
    match = _TIME_BACK.fullmatch(text)
    if match is None:
        raise where.error(
            f"{field}.time_back", f"cannot read time gap {text!r}; expected '4 days ago'"
        )
    return int(match.group(1)) * _unit(where, match.group(2), f"{field}.time_back")


def _turns(where: Where, raw: Any, field: str, session: int) -> list[Turn]:
    where.check(raw, list, field)
    turns = []
    for k, item in enumerate(raw):
        at = f"{field}[{k}]"
        where.check(item, dict, at)
        # Earlier sessions often store only the text; ParlAI's speakers alternate, Speaker 1 first.
        speaker = where.get(item, "id", str, f"{at}.id", default=SPEAKERS[k % 2])
        text = where.get(item, "text", str, f"{at}.text")
        turns.append(Turn(speaker, dia_id(session, k + 1), text, session=session, index=k + 1))
    return turns


def _personas(where: Where, raw: Any, field: str, session: int) -> list[Observation]:
    where.check(raw, list, field)
    facts = []
    for k, lines in enumerate(raw[: len(SPEAKERS)]):
        where.check(lines, list, f"{field}[{k}]")
        for j, line in enumerate(lines):
            fact = where.check(line, str, f"{field}[{k}][{j}]")
            facts.append(Observation(SPEAKERS[k], session, fact, ()))
    return facts


def _question(where: Where, raw: Any) -> QA:
    where.check(raw, dict, "self_instruct")
    answer = where.get(raw, "A", (str, int, float), "self_instruct.A")
    return QA(
        question=where.get(raw, "B", str, "self_instruct.B"),
        answer=str(answer),
        category=NO_CATEGORY,
        question_type=QUESTION_TYPE,
    )


def parse_msc_record(raw: Any, where: Where, sample_id: str) -> Conversation:
    """Turns one MSC row into a Conversation between ``"Speaker 1"`` and ``"Speaker 2"``.

    Args:
      raw: the decoded JSON row.
      where: the file errors are reported against.
      sample_id: the id given to the conversation (rows have no id of their own).

    Returns:
      A Conversation whose sessions are the previous dialogs then the current one, dated back from
      ``ANCHOR_DATE`` (see the module docstring), with one QA for an MSC-Self-Instruct row and
      none for a ParlAI row. Personas become ``observation`` facts without evidence.
    """
    where = where.at(sample_id)
    where.check(raw, dict, "<record>")
    previous = where.get(raw, "previous_dialogs", list, default=[])
    parts = []  # (field prefix, the session's JSON object, gap to the next session)
    for k, item in enumerate(previous):
        field = f"previous_dialogs[{k}]"
        where.check(item, dict, field)
        parts.append((f"{field}.", item, _gap(where, item, field)))
    parts.append(("", raw, timedelta(0)))

    # Walk backwards from the current session to date each one.
    when, dates = ANCHOR_DATE, []
    for *_, gap in reversed(parts):
        when -= gap
        dates.append(when)
    dates.reverse()

    sessions, facts = [], []
    for (prefix, part, _), date in zip(parts, dates):
        index = len(sessions) + 1
        turns = _turns(
            where, where.get(part, "dialog", list, f"{prefix}dialog"), f"{prefix}dialog", index
        )
        # An empty session has nothing to remember; skipping it keeps every Session non-empty.
        if not turns:
            continue
        raw_date = date.isoformat(sep=" ", timespec="minutes")
        sessions.append(Session(index, date, raw_date, tuple(turns)))
        if "personas" in part:
            facts.extend(_personas(where, part["personas"], f"{prefix}personas", index))
    if not sessions:
        raise where.error("dialog", "row has no turns in any session")

    qa = (_question(where, raw["self_instruct"]),) if "self_instruct" in raw else ()
    source = SOURCE_SELF_INSTRUCT if qa else SOURCE
    return Conversation(sample_id, *SPEAKERS, tuple(sessions), qa, source, tuple(facts))


def load_msc(path: str | os.PathLike) -> list[Conversation]:
    """Loads an MSC or MSC-Self-Instruct file (JSON Lines or one JSON list), in file order.

    Rows have no id, so row k (0-based) becomes sample ``"msc-<k>"``.

    Raises:
      DataError: when a row breaks the schema; the message names file, row and field.
    """
    path = Path(path)
    where = Where(path)
    rows = read_json_records(path)
    if not rows:
        raise DataError(path, "<none>", "<top level>", "file holds no row")
    return [parse_msc_record(raw, where, f"msc-{k}") for k, raw in enumerate(rows)]
