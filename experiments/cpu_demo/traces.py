"""The SFT warm start's data: the imperfect teachers' replies on the training tuples, as JSONL.

Every row is ``{"messages": [...], "target": "..."}``, the format ``python -m memr1.train``
reads for ``algo=sft``. Prompts come from the tuples' own renderers (``ManagerTuple
.manager_input``, ``AnswerTuple.answer_input``), targets from the agents' formatters
(``format_manager_output``, ``format_answer_output``), so the warm-started policies learn exactly
the text the pipeline and the RL stages will show them and parse from them.

One policy is warm-started on both agents' traces (the prompts tell the two jobs apart), so that
the demo has one "base model" to run the prompted baselines with, as the paper runs Mem0 and
LoCoMo-RAG on an off-the-shelf instruction model. A share of the answer traces uses the
no-distillation prompt (answer line only), the answer style of the Mem0 baseline.

The paper starts from pretrained LLMs; the demo's backbone starts from random weights, and a
randomly initialised model learns the traces' format and frequent names long before it learns to
copy from its prompt. The traces therefore also hold manager copy rows (``manager_copy_rows``):
random-word facts stored by ADD, which can only be learned by copying.
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from experiments.cpu_demo.answer_teacher import CarelessAnswerTeacher
from experiments.cpu_demo.teacher import MemZeroLikeTeacher
from memr1.atomic import atomic_file
from memr1.env.manager_io import ADD, ManagerOp, format_manager_output, render_manager_input
from memr1.env.prompts import to_prompt_text
from memr1.tuples.schema import AnswerTuple, ManagerTuple


def manager_rows(
    tuples: Iterable[ManagerTuple],
    teacher: MemZeroLikeTeacher,
    style: str,
    *,
    draws: int = 1,
    op_first: bool = False,
) -> tuple[list[dict[str, Any]], collections.Counter]:
    """Rows of the teacher's ops for each manager tuple's turn, formatted as the reply.

    ``draws``: rows per turn where the teacher has a choice (``MemZeroLikeTeacher.draws``; a
    turn without one gets one row). The first draw of each turn is the op list that built the
    tuples' banks, so with ``draws`` 1 the rows are exactly what built them; the later draws are
    other replies to the same prompt, from the same turn's random stream, and build nothing, so
    that the rows carry the teacher's distribution at a collision instead of one sample of it.
    ``op_first``: each entry's event first, and a repeat answered by a NONE entry on the memory
    it repeats (format_manager_output's op_first; the teacher's explicit_none).

    Returns:
      (rows, counts of the op mixes of the rows, e.g. "DELETE+ADD").
    """
    rows, mix = [], collections.Counter()
    for t in tuples:
        messages, id_map = t.manager_input(style=style)
        facts, retrieved = list(t.facts), list(t.retrieved)
        for ops in teacher.draws(facts, retrieved, draws, explicit_none=op_first):
            mix["+".join(op.kind for op in ops) or "NOOP"] += 1
            target = format_manager_output(ops, id_map, style=style, op_first=op_first)
            rows.append({"messages": messages, "target": target})
    return rows, mix


def answer_rows(
    tuples: Sequence[AnswerTuple],
    teacher: CarelessAnswerTeacher,
    style: str,
    *,
    direct_fraction: float,
    seed: int,
) -> list[dict[str, Any]]:
    """One row per answer tuple with distillation, plus ``direct_fraction`` of them without."""
    rows = []
    for t in tuples:
        memories = t.memories_by_speaker()
        rows.append(
            {
                "messages": t.answer_input(distill=True, style=style),
                "target": teacher.reply(t.question, memories, distill=True),
            }
        )
    picked = random.Random(seed).sample(range(len(tuples)), int(direct_fraction * len(tuples)))
    for i in sorted(picked):
        t = tuples[i]
        rows.append(
            {
                "messages": t.answer_input(distill=False, style=style),
                "target": teacher.reply(t.question, t.memories_by_speaker(), distill=False),
            }
        )
    return rows


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> Path:
    """Writes rows as JSONL under a temporary name, then renames it into place."""
    path = Path(path)
    with atomic_file(path) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def manager_copy_rows(
    words: Sequence[str],
    n_rows: int,
    lengths: tuple[int, int],
    seed: int,
    style: str,
    *,
    op_first: bool = False,
) -> list[dict]:
    """Manager rows whose fact and shown memories are random sequences of ``words`` (``lengths``
    words each, inclusive), the reply the ADD of the fact, rendered by the manager's own renderer
    and formatter.

    Trained on the traces alone, the tiny manager writes the format and the training prior ("Jon
    lives in Austin." for "Sam lives in Chicago."): its copy probe (experiments/cpu_demo/probe.py)
    stays at chance however names are renamed. A random fact can only be stored by copying it from
    the Facts line into the JSON reply, past the ids and the memories above it; docs/demo.md has
    the probe with and without these rows in the warm start.
    """
    if not words:
        raise ValueError("manager_copy_rows: no words to copy")
    rng = random.Random(seed)

    def sentence() -> str:
        return " ".join(rng.choices(words, k=rng.randint(*lengths))) + "."

    rows = []
    for _ in range(n_rows):
        fact = sentence()
        texts = [sentence() for _ in range(rng.randint(0, 3))]
        messages, id_map = render_manager_input([fact], list(enumerate(texts)), style=style)
        ops = [ManagerOp(ADD, text=fact)]
        target = format_manager_output(ops, id_map, style=style, op_first=op_first)
        rows.append({"messages": messages, "target": target})
    return rows


# The operation word of each entry of a manager reply, in either style and either key order.
_EVENT = re.compile(r'"event": "(ADD|UPDATE|DELETE|NONE)"')


def weigh_events(rows: Iterable[dict[str, Any]], weight: float) -> list[dict[str, Any]]:
    """The rows with ``target_weights`` (`memr1.train.sft.read_sft_pairs`) giving each
    operation word of a manager reply ``weight`` in the SFT loss; rows without one unchanged.

    The op is one token of a ~30-token reply, so at weight 1 the warm start fits the rows' op
    mix before it fits which op a prompt calls for (docs/demo.md, 2026-12-03 (evening)).
    Weight 1 writes no spans: the rows are the unweighted ones, byte for byte.
    """
    if not weight >= 0:
        raise ValueError(f"traces.event_weight must be >= 0, got {weight}")
    if weight == 1.0:
        return list(rows)
    out = []
    for row in rows:
        spans = [[m.start(1), m.end(1), weight] for m in _EVENT.finditer(row["target"])]
        if len(spans) != row["target"].count('"event"'):  # a reply format _EVENT cannot read
            raise ValueError(
                f"weigh_events: an event word _EVENT does not match in {row['target']!r}"
            )
        out.append({**row, "target_weights": spans} if spans else row)
    return out


def target_words(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The distinct alphabetic words of the rows' targets, sorted."""
    return sorted({w for row in rows for w in re.findall(r"[A-Za-z]+", row["target"])})


def trace_texts(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Prompt and target texts of rows (what the tokenizer should learn to cut well)."""
    out = []
    for row in rows:
        out.append(to_prompt_text(row["messages"]))
        out.append(row["target"])
    return out
