"""Typed, immutable records shared by every dataset loader and everything downstream.

LoCoMo, LongMemEval and MSC all load into the same shapes: a :class:`Conversation` of dated
:class:`Session` s of :class:`Turn` s, plus the :class:`QA` items asked about it. Fields that only
one benchmark has are optional and keep their default elsewhere, so a pipeline can treat the three
alike and still reach the benchmark-specific detail when it needs it.

Turn ids follow LoCoMo's ``"D<session>:<turn>"`` (both 1-based) for every source, so evidence lists
mean the same thing whatever the file was.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from datetime import datetime
from typing import NamedTuple

# The category of a question from a benchmark without LoCoMo's five categories (LongMemEval, MSC);
# those questions carry their kind in ``QA.question_type`` instead.
NO_CATEGORY = 0


def dia_id(session: int, turn: int) -> str:
    """Returns the LoCoMo-style id of the ``turn``-th turn (1-based) of session ``session``."""
    return f"D{session}:{turn}"


@dataclasses.dataclass(frozen=True)
class Turn:
    """One utterance.

    Attributes:
      speaker: who speaks (a name in LoCoMo, ``"user"``/``"assistant"`` in LongMemEval).
      dia_id: ``"D<session>:<turn>"``.
      text: the utterance, verbatim.
      session: 1-based index of the session holding the turn.
      index: 1-based position of the turn within its session.
      image_caption: for a turn that shared a picture, the caption that stands in for it.
    """

    speaker: str
    dia_id: str
    text: str
    session: int
    index: int
    image_caption: str | None = None


@dataclasses.dataclass(frozen=True)
class Session:
    """A dated run of turns.

    Attributes:
      index: 1-based session number, in the order the sessions happened.
      date_time: when the session took place.
      date_time_raw: the date exactly as the file wrote it (synthesised text for MSC).
      turns: the turns, in order.
      session_id: the source's own session id where it has one (LongMemEval haystack ids).
    """

    index: int
    date_time: datetime
    date_time_raw: str
    turns: tuple[Turn, ...]
    session_id: str | None = None


@dataclasses.dataclass(frozen=True)
class QA:
    """A question about a conversation, with its gold answer.

    Attributes:
      question: the question, verbatim (typos included).
      answer: the gold answer as text. Integer answers are written with ``str``; a LoCoMo
        category-5 item without an ``answer`` uses its ``adversarial_answer`` here.
      category: LoCoMo's category number (1-5), or ``NO_CATEGORY`` for other benchmarks.
      evidence: dia_ids of the turns that support the answer, cleaned of malformed entries.
      adversarial_answer: LoCoMo category 5's distractor answer, when present.
      answer_from_adversarial: True when the file had no ``answer`` and ``answer`` was filled from
        ``adversarial_answer`` (kept so that writing the record back reproduces the file).
      evidence_raw: the evidence entries exactly as the file had them.
      question_id: the source's id for the question (LongMemEval).
      question_type: the source's kind of question (LongMemEval types, ``"msc-self-instruct"``).
      question_date: when the question is asked (LongMemEval).
      question_date_raw: ``question_date`` as written in the file.
      abstention: True for a question whose right answer is that the history does not say.
      answer_session_ids: LongMemEval's ids of the sessions that hold the answer.
    """

    question: str
    answer: str
    category: int
    evidence: tuple[str, ...] = ()
    adversarial_answer: str | None = None
    answer_from_adversarial: bool = False
    evidence_raw: tuple[str, ...] = ()
    question_id: str | None = None
    question_type: str | None = None
    question_date: datetime | None = None
    question_date_raw: str | None = None
    abstention: bool = False
    answer_session_ids: tuple[str, ...] = ()


class Observation(NamedTuple):
    """A per-session fact about a speaker: a LoCoMo observation or an MSC persona line.

    ``dia_ids`` are the turns the fact rests on (empty for MSC personas).
    """

    speaker: str
    session: int
    fact: str
    dia_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Conversation:
    """A multi-session dialogue between two speakers and the questions asked about it.

    Attributes:
      sample_id: the source's id ("conv-26", a LongMemEval question_id, an MSC row id).
      speaker_a: the first speaker.
      speaker_b: the second speaker.
      sessions: the sessions in the order they happened.
      qa: the questions, in file order.
      source: which dataset the record came from (``"locomo"``, ``"longmemeval"``, ...).
      observation: LoCoMo's per-session facts, when the file has them.
      session_summary: ``(session index, summary)`` pairs, when the file has them.
    """

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    qa: tuple[QA, ...]
    source: str
    observation: tuple[Observation, ...] = ()
    session_summary: tuple[tuple[int, str], ...] = ()

    def iter_turns(self) -> Iterator[Turn]:
        """Yields every turn of every session, in conversation order."""
        for session in self.sessions:
            yield from session.turns

    @property
    def num_turns(self) -> int:
        """The number of turns over all sessions."""
        return sum(len(session.turns) for session in self.sessions)

    # A frozen dataclass still lets cached_property store into the instance __dict__, so the index
    # is built once per conversation, on first lookup.
    @functools.cached_property
    def _turns_by_id(self) -> dict[str, Turn]:
        return {turn.dia_id: turn for turn in self.iter_turns()}

    def has_turn(self, dia_id: str) -> bool:
        """Whether a turn with this dia_id exists."""
        return dia_id in self._turns_by_id

    def turn(self, dia_id: str) -> Turn:
        """Returns the turn with this dia_id; raises KeyError naming the conversation otherwise."""
        try:
            return self._turns_by_id[dia_id]
        except KeyError:
            raise KeyError(f"conversation {self.sample_id!r} has no turn {dia_id!r}") from None

    def session(self, index: int) -> Session:
        """Returns the session with this 1-based index; raises KeyError otherwise."""
        for session in self.sessions:
            if session.index == index:
                return session
        raise KeyError(f"conversation {self.sample_id!r} has no session {index}")

    def summary(self, session: int) -> str | None:
        """Returns the stored summary of a session, or None when the file had none."""
        return dict(self.session_summary).get(session)

    def dangling_evidence(self) -> tuple[tuple[int, str], ...]:
        """Returns ``(qa position, dia_id)`` for every evidence id that names no existing turn."""
        return tuple(
            (position, evidence)
            for position, qa in enumerate(self.qa)
            for evidence in qa.evidence
            if not self.has_turn(evidence)
        )
