"""Where an Answer Agent's misses are: each evaluated answer classed against a careful reader.

The careful reader is the rule reader of the reward probe (`answer_teacher.careful_reader`:
the asked person's newest related memory, no hedging), on the memories the evaluated agent was
shown (an evaluation's predictions.jsonl keeps them per question). A question the careful
reader gets right from those memories is *readable*: missing it is the Answer Agent's fault,
not the bank's or the retrieval's. Each answer is one of

  right       exact match with the gold answer;
  beyond      missed, and the careful reader misses it too (the bank or the retrieval lacks it);
  hedged      readable, answered with several values joined by " or " (the careless teacher's
              flaw) where the gold has none;
  empty       readable, no answer (nothing after the marker, or the evaluator's fallback);
  wrong       readable, a single wrong answer.

Readable misses (hedged + empty + wrong) are also counted per question group: `date` (when did
X ...: the answer is worked out from the memory's timestamp), `choice` (which of two options
suits X: inferred from a stored value), `count` (how many, who has more), `value` (a value or
list copied out of a memory), `other` (a question of no synthloco form).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from experiments.cpu_demo.answer_teacher import careful_reader
from experiments.cpu_demo.sentences import parse_question
from memr1.eval.metrics import exact_match

CLASSES = ("right", "beyond", "hedged", "empty", "wrong")
MISSES = ("hedged", "empty", "wrong")
GROUPS = ("date", "choice", "count", "value", "other")
_GROUP_OF = {
    **dict.fromkeys(("city_date", "job_date", "pet_date"), "date"),
    **dict.fromkeys(("cuisine", "gift", "venue"), "choice"),
    **dict.fromkeys(("pet_count", "pet_count_asof", "joint_total", "joint_more"), "count"),
}
_FIELDS = ("question", "gold", "retrieved", "answer", "em")


def question_group(question: str) -> str:
    """The group (one of GROUPS) of a synthloco question."""
    parsed = parse_question(question)
    if parsed is None:
        return "other"
    return _GROUP_OF.get(parsed.kind, "value")


class Classifier:
    """``classify(row) -> class``, for the rows of an evaluation's predictions.jsonl."""

    def __init__(self):
        self.reader = careful_reader()

    def readable(self, question: str, retrieved: Mapping[str, Iterable[Mapping]], gold) -> bool:
        """Whether the careful reader answers ``question`` right from ``retrieved`` (speaker ->
        [{"when", "text"}])."""
        memories = {s: [(m["when"], m["text"]) for m in ms] for s, ms in retrieved.items()}
        return bool(exact_match(self.reader(question, memories)[1], gold))

    def classify(self, row: Mapping) -> str:
        if float(row["em"]) >= 1.0:
            return "right"
        if not self.readable(row["question"], row["retrieved"], row["gold"]):
            return "beyond"
        answer = (row["answer"] or "").strip()
        if not answer or row.get("used_fallback"):
            return "empty"
        if " or " in answer and " or " not in str(row["gold"]):
            return "hedged"
        return "wrong"


def read_predictions(path: Path) -> list[dict]:
    """The rows of a predictions.jsonl, each checked for the fields classing needs.

    Raises:
      ValueError: naming the file and line of a row that is not JSON or lacks a field.
    """
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e.msg})") from None
            missing = [k for k in _FIELDS if k not in row]
            if missing:
                raise ValueError(f"{path}:{n}: the row lacks {', '.join(missing)}")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no predictions")
    return rows


def tally(rows: Iterable[Mapping], classifier: Classifier | None = None) -> dict:
    """{"n", "classes": {class: count}, "misses_by_group": {group: count}}; every class and
    group is present, zero or not."""
    classifier = classifier or Classifier()
    classes = collections.Counter(dict.fromkeys(CLASSES, 0))
    groups = collections.Counter(dict.fromkeys(GROUPS, 0))
    n = 0
    for row in rows:
        n += 1
        c = classifier.classify(row)
        classes[c] += 1
        if c in MISSES:
            groups[question_group(row["question"])] += 1
    return {"n": n, "classes": dict(classes), "misses_by_group": dict(groups)}
