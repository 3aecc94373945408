"""Per-question scores to result tables: per LoCoMo category under both labellings, and overall.

"Overall" is the plain mean over questions, which is how Mem0 and Memory-R1 compute it (not the
mean of the category means). Every per-category table names the labelling its category names come
from, because the papers' tables and the LoCoMo data use different names for the same numbers (see
``memr1.data.categories``). A metric that was not computed for a question (for instance J when no
judge was run) is left out of that metric's mean and shown as "—", never as 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from memr1.data.categories import LABELLINGS, category_name
from memr1.data.records import NO_CATEGORY

DEFAULT_METRICS = ("f1", "bleu1", "j", "em")
DEFAULT_LABELLINGS = ("mem0", "locomo")
COLUMN_TITLES = {"f1": "F1", "bleu1": "BLEU-1", "j": "J", "em": "EM", "locomo": "LoCoMo F1"}
MISSING = "—"
PARTIAL_MARK = "*"

_LABELLING_SOURCES = {
    "mem0": "as in Mem0's and Memory-R1's tables; use it to compare with those papers",
    "locomo": "as the LoCoMo data itself defines them",
}


def _describe(labelling: str) -> str:
    names = ", ".join(f"{c} {n}" for c, n in sorted(LABELLINGS[labelling].items()))
    source = _LABELLING_SOURCES.get(labelling)
    suffix = f" ({source})" if source else ""
    return f"Category names follow the {labelling} labelling: {names}{suffix}."


def _where(index: int, record: Mapping[str, Any]) -> str:
    qid = record.get("question_id")
    return f"record {index}" + (f" (question_id {qid!r})" if qid is not None else "")


def _validated(records: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[dict]:
    """Copies of the records with an int category and float-or-None metric values."""
    if not records:
        raise ValueError("aggregate_scores got no records to aggregate")
    # Benchmarks without LoCoMo's categories (LongMemEval, MSC) count in the overall row only.
    valid_categories = set(next(iter(LABELLINGS.values()))) | {NO_CATEGORY}
    clean = []
    for i, record in enumerate(records):
        category = record.get("category")
        if category is None:
            raise ValueError(f"{_where(i, record)} has no 'category' field")
        if not isinstance(category, int) or category not in valid_categories:
            raise ValueError(
                f"{_where(i, record)} has category {category!r}; "
                f"expected one of {sorted(valid_categories)}"
            )
        row: dict[str, Any] = {"category": category}
        for name in metrics:
            value = record.get(name)
            if value is not None:
                try:
                    value = float(value)
                except (TypeError, ValueError) as err:
                    raise ValueError(
                        f"{_where(i, record)} has a non-numeric {name!r} score: {value!r}"
                    ) from err
                if math.isnan(value):
                    raise ValueError(f"{_where(i, record)} has a NaN {name!r} score")
            row[name] = value
        clean.append(row)
    return clean


def _summarise(rows: list[dict], metrics: Sequence[str]) -> dict[str, Any]:
    scores: dict[str, float | None] = {}
    scored: dict[str, int] = {}
    for name in metrics:
        values = [r[name] for r in rows if r[name] is not None]
        scored[name] = len(values)
        scores[name] = sum(values) / len(values) if values else None
    return {"count": len(rows), "scores": scores, "scored": scored}


def aggregate_scores(
    records: Sequence[Mapping[str, Any]],
    metrics: Sequence[str] = DEFAULT_METRICS,
    labellings: Sequence[str] = DEFAULT_LABELLINGS,
) -> dict[str, Any]:
    """Means per category and overall, as a JSON-able dict.

    Args:
      records: one mapping per question with an int "category" (LoCoMo number, 1..5), optionally
        "question_id" (used in error messages), and a score in [0, 1] or None per metric name.
      metrics: the score names to average, in column order.
      labellings: category labellings (keys of ``memr1.data.categories.LABELLINGS``) to name the
        per-category rows with.

    Returns:
      {"metrics": [...],
       "overall": {"count", "scores": {metric: mean or None}, "scored": {metric: n}},
       "by_category": {labelling: {"labelling", "description",
                                   "rows": [{"category", "name", "count", "scores", "scored"}]}}}
      Rows are ordered by category number; a mean is None when no question has that score.
    """
    for labelling in labellings:
        if labelling not in LABELLINGS:
            raise ValueError(
                f"unknown category labelling {labelling!r}; expected one of {sorted(LABELLINGS)}"
            )
    rows = _validated(records, metrics)
    by_number: dict[int, list[dict]] = {}
    for row in rows:
        if row["category"] != NO_CATEGORY:
            by_number.setdefault(row["category"], []).append(row)
    per_category = {number: _summarise(group, metrics) for number, group in by_number.items()}

    by_category = {}
    for labelling in labellings:
        by_category[labelling] = {
            "labelling": labelling,
            "description": _describe(labelling),
            "rows": [
                {"category": number, "name": category_name(number, labelling), **stats}
                for number, stats in sorted(per_category.items())
            ],
        }
    return {
        "metrics": list(metrics),
        "overall": _summarise(rows, metrics),
        "by_category": by_category,
    }


def _cell(stats: Mapping[str, Any], metric: str) -> str:
    mean = stats["scores"][metric]
    if mean is None:
        return MISSING
    partial = stats["scored"][metric] < stats["count"]
    return f"{100 * mean:.2f}" + (PARTIAL_MARK if partial else "")


def _table_row(label: str, stats: Mapping[str, Any], metrics: Sequence[str]) -> str:
    cells = [label, str(stats["count"])] + [_cell(stats, m) for m in metrics]
    return "| " + " | ".join(cells) + " |"


def format_markdown(summary: Mapping[str, Any], title: str = "Results") -> str:
    """Renders ``aggregate_scores`` output as one markdown table per labelling.

    Scores are shown ×100 with two decimals; a metric nobody computed shows "—"; a mean over only
    some of the row's questions is marked with "*" and explained under the table.
    """
    metrics = summary["metrics"]
    header = "| Category | # | " + " | ".join(COLUMN_TITLES.get(m, m) for m in metrics) + " |"
    rule = "|---|---:|" + "---:|" * len(metrics)
    overall = summary["overall"]
    lines = []
    for labelling, table in summary["by_category"].items():
        lines += [f"### {title} by category ({labelling} labelling)", "", table["description"], ""]
        lines += [header, rule]
        for row in table["rows"]:
            lines.append(_table_row(f"{row['category']} {row['name']}", row, metrics))
        lines.append(_table_row("Overall", overall, metrics))
        stats = [*table["rows"], overall]
        if any(PARTIAL_MARK in _cell(s, m) for s in stats for m in metrics):
            lines += ["", f"{PARTIAL_MARK} mean over the questions that have that score only."]
        lines.append("")
    lines.append("Scores ×100. Overall is the plain mean over all questions.")
    return "\n".join(lines) + "\n"
