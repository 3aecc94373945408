"""Operation accuracy: what the manager did at each turn against synthloco's gold operation.

Real benchmarks have no labels for memory operations, so no memory paper reports this; the
synthetic benchmark writes them (never used as a training signal). A turn's prediction is its
list of valid ops collapsed to one label: any UPDATE -> "UPDATE"; DELETE and ADD -> "DELETE+ADD";
otherwise the single kind, or "NOOP" when nothing changed (including turns the manager never
saw because no fact was extracted). DELETE+ADD counts as correct for an UPDATE of a single-valued
fact (gold `delete_add_ok`), never for growing a list, where it loses the old items.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence

GOLD_OPS = ("ADD", "UPDATE", "DELETE", "NOOP")
LABELS = ("ADD", "UPDATE", "DELETE", "DELETE+ADD", "NOOP")


def predicted_label(kinds: Iterable[str]) -> str:
    """Collapses the kinds of one turn's valid ops to one label."""
    kinds = {k for k in kinds if k != "NOOP"}
    if "UPDATE" in kinds:
        return "UPDATE"
    if {"DELETE", "ADD"} <= kinds:
        return "DELETE+ADD"
    if kinds:
        return kinds.pop()
    return "NOOP"


def score(gold_ops: Sequence[Mapping], predictions: Sequence[Mapping]) -> dict:
    """Accuracy over gold turns that carry a fact.

    Args:
      gold_ops: synthloco gold entries (`dia_id`, `op`, `fact`, `delete_add_ok`) of one
        conversation, or of several with unique (sample, dia_id) keys folded into `dia_id`.
      predictions: per managed turn, `{"dia_id", "ops": [{"kind": ...}, ...]}` (valid ops only).

    Returns:
      {"scored", "correct", "accuracy", "per_gold_op": {op: {n, correct, accuracy}},
       "confusion": {gold op: {predicted label: count}}}
    """
    predicted = collections.defaultdict(list)
    for row in predictions:
        predicted[row["dia_id"]] += [op["kind"] for op in row.get("ops", [])]
    per_op = {op: {"n": 0, "correct": 0} for op in GOLD_OPS}
    confusion = {op: collections.Counter() for op in GOLD_OPS}
    for gold in gold_ops:
        if gold.get("fact") is None:
            continue
        op = gold["op"]
        if op not in per_op:
            raise ValueError(f"gold op {op!r} at {gold.get('dia_id')} is not one of {GOLD_OPS}")
        label = predicted_label(predicted.get(gold["dia_id"], []))
        ok = label == op or (op == "UPDATE" and label == "DELETE+ADD" and gold["delete_add_ok"])
        per_op[op]["n"] += 1
        per_op[op]["correct"] += int(ok)
        confusion[op][label] += 1
    scored = sum(v["n"] for v in per_op.values())
    correct = sum(v["correct"] for v in per_op.values())
    for v in per_op.values():
        v["accuracy"] = v["correct"] / v["n"] if v["n"] else None
    return {
        "scored": scored,
        "correct": correct,
        "accuracy": correct / scored if scored else None,
        "per_gold_op": per_op,
        "confusion": {op: dict(c) for op, c in confusion.items()},
    }
