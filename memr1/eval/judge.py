"""The LLM-as-a-judge score J for LoCoMo answers.

A judge model reads the question, the gold answer and the generated answer, writes one sentence
of reasoning and then a JSON verdict ``{"label": "CORRECT"}`` or ``{"label": "WRONG"}``. The
grading is generous on purpose, as in the papers: an answer on the same topic, or the same date
written another way, is correct. J of a question is 1 iff the verdict is CORRECT.

Judge models do not always follow the format, so the parser accepts JSON anywhere in the reply,
inside code fences, with single or curly quotes, broken JSON, and bare labels. A reply it cannot
read is recorded as unparseable and scored 0: a flaky judge lowers J visibly instead of crashing a
long evaluation run.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memr1.eval.judge_backends import JudgeBackend, complete_in_batches

CORRECT = "CORRECT"
WRONG = "WRONG"

_PROMPT = """\
You are checking an answer written by a conversational assistant against a reference answer.

Question: {question}
Gold answer: {gold}
Generated answer: {prediction}

How to grade:
- Be generous. The generated answer is CORRECT when it is about the same thing as the gold answer,
  even if it is longer, phrased differently or adds extra detail.
- Dates and times count as CORRECT when they denote the same day or period in another format
  (for example "May 7, 2023" and "7 May 2023"), or a relative phrase that resolves to it.
- It is WRONG when it names a different person, place, thing, number or date, when it misses
  what the question asks for, or when it declines to answer.

Reply with one sentence explaining your decision. Then, on a new line, give a JSON object with
the single key "label" and the value "CORRECT" or "WRONG"."""

# Synonyms a judge sometimes uses for the two labels.
_LABEL_WORDS = {"CORRECT": CORRECT, "WRONG": WRONG, "INCORRECT": WRONG}
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FLAT_OBJECT = re.compile(r"\{[^{}]*\}")
# "label": "CORRECT" without a well-formed object around it, e.g. cut off or in markdown. A '|'
# or '/' right after the word means an echoed template ("CORRECT|WRONG"), not a verdict.
_LABEL_FIELD = re.compile(r"\blabel\W{0,6}(correct|wrong|incorrect)\b(?![|/])", re.IGNORECASE)
# Bare labels are trusted only in capitals, as the prompt asks for them; "not" flips the label.
_BARE_LABEL = re.compile(r"(\b(?i:not)\s+)?\b(CORRECT|WRONG|INCORRECT)\b")
_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})

logger = logging.getLogger(__name__)


def build_judge_prompt(question: Any, gold: Any, prediction: Any) -> str:
    """The judge prompt for one question (all three inputs are stringified)."""
    return _PROMPT.format(question=str(question), gold=str(gold), prediction=str(prediction))


def _json_objects(text: str) -> list[dict]:
    """Every dict that can be read at some '{' of the text, in order of position."""
    decoder = json.JSONDecoder()
    found = []
    for match in re.finditer(r"\{", text):
        start = match.start()
        try:
            obj, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            # Single quotes or a trailing comma: a Python literal may still read it.
            flat = _FLAT_OBJECT.match(text, start)
            if flat is None:
                continue
            try:
                obj = ast.literal_eval(flat.group())
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
        if isinstance(obj, dict):
            found.append(obj)
    return found


def _label_from_objects(objects: list[dict]) -> tuple[bool, str | None]:
    """(saw a label field, last valid label) over the parsed objects."""
    saw_field, label = False, None
    for obj in objects:
        for key, value in obj.items():
            if isinstance(key, str) and key.strip().lower() == "label":
                saw_field = True
                if isinstance(value, str) and value.strip().upper() in _LABEL_WORDS:
                    label = _LABEL_WORDS[value.strip().upper()]
    return saw_field, label


def parse_judge_label(text: str | None) -> str | None:
    """Reads the verdict out of a judge reply.

    Tried in order: JSON objects with a "label" key (the last valid one wins, since a model that
    changes its mind does so later); a loose ``label: X`` field; a reply that is a single label
    word in any case; bare capitalised labels that all agree.

    Returns:
      "CORRECT", "WRONG", or None when the reply holds no readable verdict.
    """
    if not text:
        return None
    text = _THINK_BLOCK.sub(" ", text.translate(_QUOTES)).strip()
    if not text:
        return None

    saw_field, label = _label_from_objects(_json_objects(text))
    if label is not None:
        return label
    if saw_field:
        # The model gave a structured verdict that is not one of the labels (e.g. "MAYBE");
        # guessing from the surrounding words would invent a verdict it did not give.
        return None

    fields = _LABEL_FIELD.findall(text)
    if fields:
        return _LABEL_WORDS[fields[-1].upper()]

    whole = text.strip(" \t\r\n.!*_`'\"").upper()
    if whole in _LABEL_WORDS:
        return _LABEL_WORDS[whole]

    bare = set()
    for negation, word in _BARE_LABEL.findall(text):
        verdict = _LABEL_WORDS[word]
        if negation:
            verdict = WRONG if verdict == CORRECT else CORRECT
        bare.add(verdict)
    return bare.pop() if len(bare) == 1 else None


@dataclass(frozen=True)
class JudgeResult:
    """Verdicts for Q questions.

    Attributes:
      labels: Q verdicts, "CORRECT" / "WRONG" or None where the reply was unparseable.
      scores: f64[Q], 1.0 iff the verdict is CORRECT.
      raw: the Q judge replies as received, for auditing.
    """

    labels: list[str | None]
    scores: np.ndarray
    raw: list[str]

    @property
    def num_unparseable(self) -> int:
        return sum(label is None for label in self.labels)

    @property
    def mean(self) -> float:
        return float(self.scores.mean()) if len(self.scores) else float("nan")


class LocomoJudge:
    """Scores answers with an LLM judge behind any ``JudgeBackend``.

    Args:
      backend: where the prompts go.
      batch_size: prompts handed to the backend per call.
    """

    def __init__(self, backend: JudgeBackend, batch_size: int = 32):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.backend = backend
        self.batch_size = batch_size

    def judge(
        self, questions: Sequence[Any], golds: Sequence[Any], predictions: Sequence[Any]
    ) -> JudgeResult:
        """Judges Q aligned (question, gold, prediction) triples; returns their verdicts."""
        if not len(questions) == len(golds) == len(predictions):
            raise ValueError(
                "LocomoJudge.judge needs lists of the same length; got "
                f"{len(questions)} questions, {len(golds)} golds, {len(predictions)} predictions"
            )
        prompts = [build_judge_prompt(q, g, p) for q, g, p in zip(questions, golds, predictions)]
        raw = complete_in_batches(self.backend, prompts, self.batch_size)
        labels = [parse_judge_label(reply) for reply in raw]
        scores = np.asarray([float(label == CORRECT) for label in labels], dtype=np.float64)
        result = JudgeResult(labels=labels, scores=scores, raw=raw)
        if result.num_unparseable:
            logger.warning(
                "judge replies unparseable for %d of %d questions (scored as wrong)",
                result.num_unparseable,
                len(labels),
            )
        return result
