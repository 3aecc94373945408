"""Writing a run's results into its work directory, all at once or not at all.

Files: results.json and results.md (F1 / BLEU-1 / J / EM and LoCoMo's own F1, per category under
both labellings, overall), predictions.jsonl (one line per question), manager_turns.jsonl (what the
manager saw and did per turn), banks/<sample_id>/ (each bank, saved with Orbax) and
banks/<sample_id>.json (its memories, op log and growth). Everything is written into a temporary
sibling folder which is renamed into place at the end, so an interrupted run never leaves a
half-written work directory, and an existing one is replaced only when asked to.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memr1 import memory as mem
from memr1.atomic import atomic_dir
from memr1.data.records import NO_CATEGORY
from memr1.env.systems import RunOutput
from memr1.eval import op_accuracy
from memr1.eval.aggregate import aggregate_scores, format_markdown
from memr1.eval.locomo_scorer import locomo_score

METRICS = ("f1", "bleu1", "j", "em", "locomo")


def _jsonl(path: Path, rows) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def score_records(run: RunOutput, judge_scores: list[float] | None) -> list[dict]:
    """One score record per question for `aggregate_scores`."""
    records = []
    for i, p in enumerate(run.predictions):
        records.append(
            {
                "question_id": f"{p.sample_id}/{p.question_index}",
                "category": p.category,
                "f1": p.f1,
                "bleu1": p.bleu1,
                "em": p.em,
                "j": None if judge_scores is None else judge_scores[i],
                # LoCoMo's per-category rule needs LoCoMo's categories.
                "locomo": None
                if p.category == NO_CATEGORY
                else locomo_score(p.answer, p.gold, p.category),
            }
        )
    return records


def operation_summary(run: RunOutput, gold_ops: Mapping | None) -> dict:
    """Op counts, invalid outputs by kind, bank growth per conversation, and op accuracy."""
    counters = run.stats.summary()["counters"]
    out: dict[str, Any] = {
        "ops": counters.get("ops", {}),
        "invalid_ops": counters.get("invalid_ops", {}),
        # Manager replies that name a shown id twice or ADD more than once per fact: those
        # `agents.repeated_id` / `agents.adds_per_fact` read differently (env.manager_io).
        "manager_replies": counters.get("manager_replies", {}),
        "banks": {
            sid: {"size": len(m.memories()), "counters": mem.counters(m.bank)}
            for sid, m in run.memories.items()
        },
    }
    if gold_ops is not None:
        gold, preds = [], []
        for sid in run.memories:
            entry = gold_ops.get("conversations", {}).get(sid)
            if entry is None:
                continue
            gold += [{**g, "dia_id": f"{sid}/{g['dia_id']}"} for g in entry["ops"]]
        for t in run.turns:
            preds.append({"dia_id": f"{t.sample_id}/{t.dia_id}", "ops": t.ops})
        out["op_accuracy"] = op_accuracy.score(gold, preds) if gold else None
    return out


def answer_summary(run: RunOutput) -> dict[str, float]:
    """The share of questions whose Answer Agent prompt dropped its lowest-ranked memories to
    fit agents.max_prompt_tokens (`prompt_cut_frac`), whose reply the token budget cut before
    **Answer:** (`cut_frac`) and that had no marker (`no_marker_frac`)."""
    counts = run.stats.summary()["counters"].get("answers", {})
    n = max(len(run.predictions), 1)
    return {
        "prompt_cut_frac": counts.get("prompt_cut", 0) / n,
        "cut_frac": counts.get("cut_before_answer", 0) / n,
        "no_marker_frac": counts.get("no_marker_fallback", 0) / n,
    }


def results_dict(
    run: RunOutput, meta: Mapping[str, Any], judge_scores=None, gold_ops=None
) -> dict[str, Any]:
    summary = aggregate_scores(score_records(run, judge_scores), metrics=METRICS)
    return {
        **meta,
        "system": run.system,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "num_conversations": len(run.conversations),
        "num_questions": len(run.predictions),
        "scores": summary,
        "operations": operation_summary(run, gold_ops),
        "answers": answer_summary(run),
        "latency": run.stats.summary()["stages"],
    }


def results_markdown(results: Mapping[str, Any]) -> str:
    head = (
        f"System `{results['system']}` on {results.get('dataset', '?')} "
        f"({results['num_conversations']} conversations, {results['num_questions']} questions); "
        f"backbone {results.get('backbone', '?')}; {results['date']}."
    )
    lines = [format_markdown(results["scores"], title=f"Results: {results['system']}"), "", head]
    steps = results.get("checkpoint_steps") or {}
    loaded = [
        f"{agent} agent from {results[f'{agent}_checkpoint']} (step {step})"
        for agent, step in steps.items()
        if step is not None
    ]
    if loaded:
        lines.append("Checkpoints: " + "; ".join(loaded) + ".")
    ops = results["operations"]
    lines += ["", "## Memory operations", ""]
    lines.append(f"Manager ops by kind ('invalid': rejected entries): {json.dumps(ops['ops'])}")
    lines.append(f"Invalid manager outputs by kind: {json.dumps(ops['invalid_ops'])}")
    acc = ops.get("op_accuracy")
    if acc:
        lines.append(
            f"Operation accuracy against gold labels: {acc['accuracy']:.3f} "
            f"({acc['correct']}/{acc['scored']} fact turns)"
        )
    sizes = ", ".join(f"{sid}: {b['size']}" for sid, b in ops["banks"].items())
    lines += [f"Bank size per conversation: {sizes}", "", "## Latency per call (s)", ""]
    lines.append("| stage | calls | p50 | p95 | tok/s |")
    lines.append("|---|---|---|---|---|")
    for stage, s in results["latency"].items():
        tps = s.get("tokens_per_s", "—")
        lines.append(f"| {stage} | {s['calls']} | {s['p50_s']} | {s['p95_s']} | {tps} |")
    return "\n".join(lines) + "\n"


def write_run(
    workdir: str | os.PathLike,
    run: RunOutput,
    meta: Mapping[str, Any],
    *,
    judge_scores: list[float] | None = None,
    gold_ops: Mapping | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Writes every output of `run` into `workdir` atomically; returns the results dict."""
    workdir = Path(workdir).absolute()
    if workdir.exists() and any(workdir.iterdir()) and not overwrite:
        raise FileExistsError(f"{workdir} exists and is not empty (pass overwrite to replace it)")
    with atomic_dir(workdir) as tmp:
        results = results_dict(run, meta, judge_scores, gold_ops)
        (tmp / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))
        (tmp / "results.md").write_text(results_markdown(results))
        _jsonl(
            tmp / "predictions.jsonl",
            (
                {**dataclasses.asdict(p), "j": None if judge_scores is None else judge_scores[i]}
                for i, p in enumerate(run.predictions)
            ),
        )
        _jsonl(tmp / "manager_turns.jsonl", (dataclasses.asdict(t) for t in run.turns))
        banks = tmp / "banks"
        banks.mkdir()
        for sid, memory in run.memories.items():
            safe = sid.replace("/", "_")
            mem.save_bank(banks / safe, memory.bank)
            view = {
                "sample_id": sid,
                "speakers": list(memory.speakers),
                "memories": mem.text_view(memory.bank),
                "op_log": mem.op_log(memory.bank),
                "growth": mem.growth_stats(memory.bank),
            }
            (banks / f"{safe}.json").write_text(json.dumps(view, indent=1, ensure_ascii=False))
    return results
