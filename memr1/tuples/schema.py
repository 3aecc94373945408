"""The records of Memory-R1's training tuples, as JSON-serialisable frozen dataclasses.

Two kinds, one per agent (paper §3, Algorithm 1):

* :class:`ManagerTuple`: one dialogue turn t with non-empty facts. It carries the temporal memory
  bank built from the turns before t (both speakers, every memory), the facts of t, the memories
  the manager is shown for them, and the questions whose evidence cites t. The manager stage
  samples ops for the facts, applies them to a copy of ``bank`` and lets a frozen Answer Agent
  answer ``qa`` over the result; the reward is exact match.
* :class:`AnswerTuple`: one question, with the top-k memories of each speaker retrieved from the
  bank built over the whole conversation, and the gold answer.

Every record has a ``version`` field. Readers refuse a record whose version differs from
:data:`SCHEMA_VERSION` rather than guessing at a layout that may have changed.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from memr1.env.answer_io import render_answer_input
from memr1.env.manager_io import render_manager_input
from memr1.env.prompts import Message

SCHEMA_VERSION = 1


@dataclasses.dataclass(frozen=True)
class MemoryRecord:
    """One memory of a bank snapshot.

    Attributes:
      id: the memory's id in its bank (``retrieved`` ids of a ManagerTuple refer to these).
      text: the memory.
      owner: 0 for the conversation's speaker_a, 1 for speaker_b.
      updated: seconds since the epoch of its last write (the session date, read as UTC).
      dia_id: the turn whose operations last wrote it ("" when the bank's op log no longer holds
        that write).
    """

    id: int
    text: str
    owner: int
    updated: int
    dia_id: str


@dataclasses.dataclass(frozen=True)
class LinkedQA:
    """A question whose evidence includes the tuple's turn.

    ``qa_index`` is the question's position in the conversation's question list of the split
    (category 5 already removed), the same index its AnswerTuple has.
    """

    qa_index: int
    question: str
    answer: str
    category: int
    evidence: tuple[str, ...]

    def answerable_at(self, dia_id: str) -> bool:
        """Whether every turn the evidence cites was said at or before ``dia_id``: the bank after
        that turn can hold the whole answer. A question citing a later turn too (a list whose
        last item comes later, a plan cancelled later) scores 0 there whatever the manager
        does. Evidence that is not a "D<session>:<turn>" id cannot be ordered: answerable."""
        now = turn_position(dia_id)
        cited = [turn_position(e) for e in self.evidence]
        return now is None or all(c is None or c <= now for c in cited)


def turn_position(dia_id: str) -> tuple[int, int] | None:
    """(session, turn) of a LoCoMo-style "D<session>:<turn>" id, the order turns were said in;
    None for any other string."""
    m = _DIA_ID.fullmatch(str(dia_id).strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


_DIA_ID = re.compile(r"D(\d+):(\d+)")


@dataclasses.dataclass(frozen=True)
class ManagerTuple:
    """What the Memory Manager is trained on at one turn.

    Attributes:
      sample_id: the conversation.
      dia_id: the turn t.
      turn_index: 0-based position of t among all turns of the conversation.
      speaker: who speaks at t; the facts, the retrieval and the ops are theirs.
      owner: the speaker's owner index (0 = speakers[0], 1 = speakers[1]).
      speakers: (speaker_a, speaker_b).
      session_date: the date of t's session as the file writes it (shown to the manager).
      timestamp: the same date in seconds since the epoch (the time to stamp t's ops with).
      window_start: turn_index of the first turn the bank was built from; the bank holds only
        writes of turns ``window_start .. turn_index - 1``.
      facts: the facts of t.
      retrieved: ``(memory id, text)`` of the speaker's memories shown to the manager: the top
        ``k_per_fact`` per fact, merged best first, each memory once.
      bank: every memory of the bank before t (both speakers), in id order.
      qa: the questions whose evidence cites t; empty for a turn without linked questions.
      builder: how the bank was built ("observation", "teacher:<name>").
      version: SCHEMA_VERSION.
    """

    sample_id: str
    dia_id: str
    turn_index: int
    speaker: str
    owner: int
    speakers: tuple[str, str]
    session_date: str
    timestamp: int
    window_start: int
    facts: tuple[str, ...]
    retrieved: tuple[tuple[int, str], ...]
    bank: tuple[MemoryRecord, ...]
    qa: tuple[LinkedQA, ...]
    builder: str
    version: int = SCHEMA_VERSION

    @property
    def has_qa(self) -> bool:
        """Whether any question cites this turn (the paper trains only on such turns)."""
        return bool(self.qa)

    def manager_input(self, style: str = "full") -> tuple[list[Message], dict[int, int]]:
        """The manager's prompt for this turn and its shown-id -> memory-id map."""
        return render_manager_input(
            self.facts, self.retrieved, style=style, session_date=self.session_date
        )


@dataclasses.dataclass(frozen=True)
class AnswerMemory:
    """One retrieved memory of an AnswerTuple, rendered as the Answer Agent sees it."""

    speaker: str
    id: int
    when: str  # the memory's date, written as LoCoMo writes session dates
    text: str
    score: float


@dataclasses.dataclass(frozen=True)
class AnswerTuple:
    """What the Answer Agent is trained on for one question.

    Attributes:
      sample_id: the conversation.
      qa_index: the question's position in the split's question list of the conversation.
      question, answer, category, evidence: the question, its gold answer, LoCoMo category and
        the dia_ids of its supporting turns.
      speakers: (speaker_a, speaker_b).
      memories: the top ``k_per_speaker`` memories of speakers[0], best first, then those of
        speakers[1].
      builder: how the bank was built.
      version: SCHEMA_VERSION.
    """

    sample_id: str
    qa_index: int
    question: str
    answer: str
    category: int
    evidence: tuple[str, ...]
    speakers: tuple[str, str]
    memories: tuple[AnswerMemory, ...]
    builder: str
    version: int = SCHEMA_VERSION

    def memories_by_speaker(self) -> dict[str, list[tuple[str, str]]]:
        """speaker -> ``(when, text)`` pairs, best first, for ``render_answer_input``."""
        out: dict[str, list[tuple[str, str]]] = {name: [] for name in self.speakers}
        for memory in self.memories:
            out[memory.speaker].append((memory.when, memory.text))
        return out

    def answer_input(self, *, distill: bool = True, style: str = "full") -> list[Message]:
        """The Answer Agent's prompt for this question."""
        return render_answer_input(
            self.question, self.memories_by_speaker(), distill=distill, style=style
        )


TUPLE_KINDS: dict[str, type] = {"manager": ManagerTuple, "answer": AnswerTuple}


def to_json(record: ManagerTuple | AnswerTuple) -> str:
    """One record as a compact JSON object (tuples become lists)."""
    return json.dumps(dataclasses.asdict(record), ensure_ascii=False, separators=(",", ":"))


class SchemaError(ValueError):
    """A stored record that does not match the schema.

    Attributes:
      field: the offending field ("<record>" when the record as a whole is unreadable).
      problem: what is wrong, in words.
    """

    def __init__(self, field: str, problem: str):
        self.field = field
        self.problem = problem
        super().__init__(f"field {field!r}: {problem}")


def _field(row: Mapping[str, Any], name: str, types: type | tuple[type, ...]) -> Any:
    if name not in row:
        raise SchemaError(name, "required field is missing")
    value = row[name]
    wanted = types if isinstance(types, tuple) else (types,)
    if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
        expected = " or ".join(t.__name__ for t in wanted)
        raise SchemaError(name, f"expected {expected}, found {type(value).__name__}")
    return value


def _strings(row: Mapping[str, Any], name: str) -> tuple[str, ...]:
    values = _field(row, name, list)
    if not all(isinstance(v, str) for v in values):
        raise SchemaError(name, "expected a list of strings")
    return tuple(values)


def _build(cls: type, row: Mapping[str, Any], **converted: Any) -> Any:
    """Instantiates ``cls`` from ``row``: plain fields type-checked, nested ones pre-converted."""
    if not isinstance(row, Mapping):
        raise SchemaError(cls.__name__, f"expected a JSON object, found {type(row).__name__}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in converted:
            kwargs[f.name] = converted[f.name]
        else:
            types = {"int": int, "str": str, "float": (float, int)}[f.type]
            value = _field(row, f.name, types)
            kwargs[f.name] = float(value) if f.type == "float" else value
    return cls(**kwargs)


def _nested(row: Mapping[str, Any], name: str, cls: type) -> tuple:
    return tuple(_build(cls, item) for item in _field(row, name, list))


def _check_version(row: Mapping[str, Any]) -> int:
    version = _field(row, "version", int)
    if version != SCHEMA_VERSION:
        raise SchemaError(
            "version",
            f"the record has version {version}, this reader reads version {SCHEMA_VERSION}; "
            f"rebuild the tuples with this version of memr1",
        )
    return version


def _pair(row: Mapping[str, Any], name: str) -> tuple[str, str]:
    pair = _strings(row, name)
    if len(pair) != 2:
        raise SchemaError(name, f"expected two speakers, found {len(pair)}")
    return pair


def manager_from_dict(row: Mapping[str, Any]) -> ManagerTuple:
    """Reads a ManagerTuple from its JSON object; raises SchemaError naming a bad field."""
    retrieved = []
    for item in _field(row, "retrieved", list):
        if not (
            isinstance(item, list)
            and len(item) == 2
            and isinstance(item[0], int)
            and isinstance(item[1], str)
        ):
            raise SchemaError("retrieved", "expected [id, text] pairs")
        retrieved.append((item[0], item[1]))
    return _build(
        ManagerTuple,
        row,
        version=_check_version(row),
        speakers=_pair(row, "speakers"),
        facts=_strings(row, "facts"),
        retrieved=tuple(retrieved),
        bank=_nested(row, "bank", MemoryRecord),
        qa=tuple(
            _build(LinkedQA, item, evidence=_strings(item, "evidence"))
            for item in _field(row, "qa", list)
        ),
    )


def answer_from_dict(row: Mapping[str, Any]) -> AnswerTuple:
    """Reads an AnswerTuple from its JSON object; raises SchemaError naming a bad field."""
    return _build(
        AnswerTuple,
        row,
        version=_check_version(row),
        speakers=_pair(row, "speakers"),
        evidence=_strings(row, "evidence"),
        memories=_nested(row, "memories", AnswerMemory),
    )


def from_json(kind: str, text: str | bytes) -> ManagerTuple | AnswerTuple:
    """Parses one stored record of ``kind`` ("manager" or "answer")."""
    try:
        row = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SchemaError("<record>", f"not a JSON record ({err})") from err
    if kind == "manager":
        return manager_from_dict(row)
    if kind == "answer":
        return answer_from_dict(row)
    raise ValueError(f"unknown tuple kind {kind!r}; expected one of {sorted(TUPLE_KINDS)}")
