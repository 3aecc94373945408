"""Counts of conversations, sessions, turns and questions, per split and per category.

    python -m memr1.data.stats --locomo locomo10.json [--longmemeval longmemeval_oracle.json]
        [--msc msc_self_instruct.jsonl] [--labelling mem0|locomo] [--ratios 1:1:8] [--json OUT]

LoCoMo is reported whole ("all", category 5 included) and as the Memory-R1 split (category 5
removed). Categories are named under the chosen labelling (see ``memr1.data.categories``);
LongMemEval and MSC questions are counted by their question type. Every file is read and checked
before anything is printed or written, so a bad file gives one message on stderr naming file, sample
and field, exit status 2, and no partial output.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from memr1.atomic import write_json_atomic
from memr1.data.categories import LABELLINGS, category_name
from memr1.data.errors import DataError
from memr1.data.locomo import load_locomo
from memr1.data.longmemeval import load_longmemeval
from memr1.data.msc import load_msc
from memr1.data.records import QA, Conversation
from memr1.data.split import MEMORY_R1_RATIOS, parse_ratios, split_conversations

EXIT_BAD_INPUT = 2


def question_kind(qa: QA, labelling: str = "mem0") -> str:
    """Names a question's kind: its LoCoMo category under ``labelling``, else its question type."""
    if qa.category in LABELLINGS[labelling]:
        return category_name(qa.category, labelling)
    return qa.question_type or "uncategorised"


def count(conversations: Iterable[Conversation], labelling: str = "mem0") -> dict[str, Any]:
    """Returns the counts of one group of conversations.

    Returns:
      ``{"conversations", "sessions", "turns", "qa": int, "dangling_evidence": int,
      "per_kind": {kind name: int}}``, LoCoMo categories in number order, other kinds in the
      order first seen.
    """
    conversations = list(conversations)
    kinds = Counter(question_kind(qa, labelling) for c in conversations for qa in c.qa)
    # LoCoMo categories are listed in number order whatever order the questions came in.
    order = list(LABELLINGS[labelling].values())
    per_kind = {k: kinds[k] for k in order if k in kinds}
    per_kind.update({k: n for k, n in kinds.items() if k not in per_kind})
    return {
        "conversations": len(conversations),
        "sessions": sum(len(c.sessions) for c in conversations),
        "turns": sum(c.num_turns for c in conversations),
        "qa": sum(len(c.qa) for c in conversations),
        "dangling_evidence": sum(len(c.dangling_evidence()) for c in conversations),
        "per_kind": per_kind,
    }


def collect(
    locomo: Path,
    longmemeval: Path | None = None,
    msc: Path | None = None,
    labelling: str = "mem0",
    ratios: Sequence[float] = MEMORY_R1_RATIOS,
) -> dict[str, Any]:
    """Loads the given files and returns ``{dataset: {"file", "groups": {group: counts}}}``.

    Raises:
      DataError: when a file breaks its schema.
    """
    conversations = load_locomo(locomo)
    groups = {"all": count(conversations, labelling)}
    for name, part in split_conversations(conversations, ratios).items():
        groups[name] = count(part, labelling)
    report = {"locomo": {"file": str(locomo), "labelling": labelling, "groups": groups}}
    if longmemeval is not None:
        groups = {"all": count(load_longmemeval(longmemeval), labelling)}
        report["longmemeval"] = {"file": str(longmemeval), "groups": groups}
    if msc is not None:
        report["msc"] = {"file": str(msc), "groups": {"all": count(load_msc(msc), labelling)}}
    return report


def render(report: dict[str, Any]) -> str:
    """Formats a ``collect`` report as one plain-text table per dataset."""
    lines = []
    for dataset, entry in report.items():
        title = f"{dataset}: {entry['file']}"
        if "labelling" in entry:
            title += f"  (categories named by the {entry['labelling']} labelling)"
        lines.append(title)
        kinds = list(dict.fromkeys(k for g in entry["groups"].values() for k in g["per_kind"]))
        header = ["group", "conversations", "sessions", "turns", "qa", *kinds]
        rows = [header]
        for group, counts in entry["groups"].items():
            rows.append(
                [group]
                + [str(counts[k]) for k in ("conversations", "sessions", "turns", "qa")]
                + [str(counts["per_kind"].get(k, 0)) for k in kinds]
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
            lines.append("  " + "  ".join(cells))
        dangling = entry["groups"]["all"]["dangling_evidence"]
        lines.append(f"  evidence ids naming no turn: {dangling}")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (0, or 2 for a bad file or ratio)."""
    parser = argparse.ArgumentParser(
        prog="python -m memr1.data.stats", description="Counts per split and per question kind."
    )
    parser.add_argument("--locomo", type=Path, required=True, help="LoCoMo-schema file or folder")
    parser.add_argument("--longmemeval", type=Path, help="a LongMemEval s / m / oracle file")
    parser.add_argument("--msc", type=Path, help="an MSC or MSC-Self-Instruct file")
    parser.add_argument("--labelling", choices=sorted(LABELLINGS), default="mem0")
    parser.add_argument("--ratios", default="1:1:8", help="train:validation:test, by conversation")
    parser.add_argument("--json", type=Path, help="also write the counts to this JSON file")
    args = parser.parse_args(argv)
    try:
        ratios = parse_ratios(args.ratios)
        report = collect(args.locomo, args.longmemeval, args.msc, args.labelling, ratios)
    except (DataError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    text = render(report)
    if args.json is not None:
        write_json_atomic(args.json, report)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
