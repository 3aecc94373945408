"""The demo's results.md: every number read from the files the runs wrote, nothing typed in.

Per seed: F1 / BLEU-1 / EM overall and per question category for each system (categories named
in the LoCoMo data's own labelling, which synthloco uses), operation accuracy against
synthloco's gold labels, the manager's operation mix, bank sizes, the paper's ablation (SFT
manager + SFT answerer, SFT manager + RL answerer, RL manager + RL answerer) and wall time per
stage. Over all seeds: EM per system, the EM gain of Memory-R1 over its SFT warm start and of
the manager stage over the SFT manager with the same RL Answer Agent, as mean ± std, and
operation accuracy per gold kind before and after the manager stage.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

SYSTEM_NOTES = {
    "locomo_rag": "raw turns as memories, no manager; the warm-started model answers directly",
    "mem0": "warm-started model as a prompted Mem0 pipeline: it manages memory, answers directly",
    "memory_sft": "warm-started (SFT) manager and answer agent, answers with distillation",
    "sft_manager_rl_answer": "the SFT manager's banks read by memory_r1's RL Answer Agent "
    "(the ablation that isolates the manager stage)",
    "memory_r1": "RL-trained manager and answer agent, answers with distillation",
}
OP_KINDS = ("ADD", "UPDATE", "DELETE", "NOOP", "invalid")
GOLD_OPS = ("ADD", "UPDATE", "DELETE", "NOOP")
# The paper's ablation: which manager and which Answer Agent each row pairs.
ABLATION = (
    ("memory_sft", "SFT manager + SFT answerer"),
    ("sft_manager_rl_answer", "SFT manager + RL answerer"),
    ("memory_r1", "RL manager + RL answerer"),
)


def overall(results: Mapping[str, Any], metric: str = "em") -> float:
    return float(results["scores"]["overall"]["scores"][metric])


def op_accuracy(results: Mapping[str, Any]) -> float | None:
    acc = results["operations"].get("op_accuracy")
    return None if not acc else acc["accuracy"]


def em_gain(summary: Mapping[str, Any]) -> float:
    """Memory-R1's EM minus the SFT warm start's, in points."""
    res = summary["results"]
    return 100.0 * (overall(res["memory_r1"]) - overall(res["memory_sft"]))


def manager_gain(summary: Mapping[str, Any]) -> float:
    """The manager stage's EM gain in points: memory_r1 over the SFT manager with the same RL
    Answer Agent."""
    res = summary["results"]
    return 100.0 * (overall(res["memory_r1"]) - overall(res["sft_manager_rl_answer"]))


def gold_op_accuracy(results: Mapping[str, Any], ops: Sequence[str]) -> float | None:
    """The share of turns whose gold kind is one of ``ops`` that the manager got right (None
    without gold ops or without such turns)."""
    acc = results["operations"].get("op_accuracy")
    if not acc:
        return None
    per = [acc["per_gold_op"][op] for op in ops]
    n = sum(v["n"] for v in per)
    return sum(v["correct"] for v in per) / n if n else None


def mean_bank_size(results: Mapping[str, Any]) -> float:
    sizes = [b["size"] for b in results["operations"]["banks"].values()]
    return sum(sizes) / max(len(sizes), 1)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    values = list(values)
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def scores_table(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """F1 / BLEU-1 / EM per category and overall, one block of rows per system."""
    lines = ["| system | category | n | F1 | BLEU-1 | EM |", "|---|---|---|---|---|---|"]
    for system, res in results.items():
        rows = res["scores"]["by_category"]["locomo"]["rows"]
        for row in rows:
            s = row["scores"]
            lines.append(
                f"| {system} | {row['name']} | {row['count']} | {_pct(s['f1'])} "
                f"| {_pct(s['bleu1'])} | {_pct(s['em'])} |"
            )
        o = res["scores"]["overall"]
        lines.append(
            f"| **{system}** | **overall** | {o['count']} | **{_pct(o['scores']['f1'])}** "
            f"| **{_pct(o['scores']['bleu1'])}** | **{_pct(o['scores']['em'])}** |"
        )
    return lines


def operations_table(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Operation accuracy, op mix and bank sizes of the systems that run a manager."""
    head = "| system | op accuracy | " + " | ".join(OP_KINDS) + " | mean bank size |"
    lines = [head, "|---|---|" + "---|" * (len(OP_KINDS) + 1)]
    for system, res in results.items():
        ops = res["operations"]
        counts = " | ".join(str(ops["ops"].get(k, 0)) for k in OP_KINDS)
        mean = mean_bank_size(res)
        lines.append(f"| {system} | {_pct(op_accuracy(res))} | {counts} | {mean:.1f} |")
    return lines


def _count_cell(v: Mapping[str, Any] | None) -> str:
    """ "12.5 (1/8)": a gold kind's accuracy and its counts."""
    return "—" if v is None else f"{_pct(v['accuracy'])} ({v['correct']}/{v['n']})"


def ablation_table(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """EM, op accuracy (overall and per gold kind: correct/n) and bank size of the ablation's
    three manager/answerer pairs."""
    head = "| manager + answerer | EM | op accuracy | " + " | ".join(GOLD_OPS) + " | bank size |"
    lines = [head, "|---|---|---|" + "---|" * (len(GOLD_OPS) + 1)]
    for system, label in ABLATION:
        res = results[system]
        acc = res["operations"].get("op_accuracy") or {}
        per = acc.get("per_gold_op", {})
        kinds = " | ".join(_count_cell(per.get(op)) for op in GOLD_OPS)
        lines.append(
            f"| {label} | {_pct(overall(res))} | {_pct(op_accuracy(res))} | {kinds} "
            f"| {mean_bank_size(res):.1f} |"
        )
    return lines


def per_gold_op(results: Mapping[str, Any]) -> str:
    acc = results["operations"].get("op_accuracy")
    if not acc:
        return "—"
    parts = [
        f"{op} {_pct(v['accuracy'])} ({v['correct']}/{v['n']})"
        for op, v in acc["per_gold_op"].items()
        if v["n"]
    ]
    return ", ".join(parts)


def checkpoint_lines(summary: Mapping[str, Any]) -> list[str]:
    """Which checkpoint step each trained system's agents were evaluated from, and each RL
    stage's best validated step (loadable as DIR:best)."""
    lines = []
    for system, r in summary["results"].items():
        steps = {k: v for k, v in (r.get("checkpoint_steps") or {}).items() if v is not None}
        if steps:
            used = ", ".join(f"{agent} step {step}" for agent, step in steps.items())
            lines.append(f"- {system} evaluated from checkpoints: {used}")
    for stage, best in (summary.get("validation") or {}).items():
        if best:
            lines.append(
                f"- {stage} stage's best validated step: {best['step']} "
                f"({best['metric']} {best['value']:.3f}; loadable as checkpoints:best)"
            )
    return lines


def seed_section(summary: Mapping[str, Any]) -> list[str]:
    res = summary["results"]
    seed, split = summary["seed"], summary["split"]
    lines = [f"## Seed {seed} ({split} split)", ""]
    lines += scores_table(res) + [""]
    lines += [
        "Memory operations on the evaluated conversations (op accuracy: the manager's ops at "
    ]
    lines += ["each fact turn against synthloco's gold label; never used in training):", ""]
    lines += operations_table(res) + [""]
    if all(system in res for system, _ in ABLATION):
        lines += ["Ablation (per gold kind: share of its turns done right, correct/n):", ""]
        lines += ablation_table(res) + [""]
    for system in ("memory_sft", "memory_r1"):
        if system in res:
            lines.append(f"- {system} accuracy per gold op: {per_gold_op(res[system])}")
    for system, r in res.items():
        sizes = ", ".join(f"{sid}: {b['size']}" for sid, b in r["operations"]["banks"].items())
        lines.append(f"- {system} bank size per conversation: {sizes}")
    mix = summary.get("trace_manager_mix") or {}
    if mix:
        lines.append(f"- the manager teacher's op mix on the training turns: {mix}")
    lines += checkpoint_lines(summary)
    lines += [
        "",
        "Wall time per stage (s): "
        + ", ".join(f"{k} {v}" for k, v in summary["timings_s"].items()),
    ]
    return lines + [""]


def manager_stage_lines(summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The manager stage over seeds: its EM gain over the SFT manager with the same RL Answer
    Agent, and operation accuracy per gold kind before (SFT manager) and after (RL manager)."""
    gains = [manager_gain(s) for s in summaries]
    m, sd = mean_std(gains)
    lines = [
        f"**EM gain of the manager stage (memory_r1 over sft_manager_rl_answer): {m:+.1f} ± "
        f"{sd:.1f} points** (per seed: {', '.join(f'{g:+.1f}' for g in gains)}).",
        "",
        "| gold kind | op accuracy SFT manager → RL manager, per seed | mean change (points) |",
        "|---|---|---|",
    ]
    for ops in (*((op,) for op in GOLD_OPS), ("UPDATE", "DELETE"), GOLD_OPS):
        pairs = [
            tuple(gold_op_accuracy(s["results"][k], ops) for k in ("memory_sft", "memory_r1"))
            for s in summaries
        ]
        op = "all" if ops == GOLD_OPS else " + ".join(ops)
        per = ", ".join(f"{_pct(a)} → {_pct(b)}" for a, b in pairs)
        deltas = [100 * (b - a) for a, b in pairs if a is not None and b is not None]
        mean = f"{statistics.fmean(deltas):+.1f}" if deltas else "—"
        lines.append(f"| {op} | {per} | {mean} |")
    return lines + [""]


def render(summaries: Sequence[Mapping[str, Any]], *, algo: str, config: Any) -> str:
    """The whole results.md."""
    lines = [f"# memr1 demo: Memory-R1 ({algo.upper()}) vs its SFT warm start, in miniature", ""]
    lines += [
        f"{len(summaries)} seed(s); tiny backbone on CPU; synthloco world "
        f"{dict(config.synth.splits)} conversations (train / validation / test). Every number "
        "below is read from the run's own output files.",
        "",
        "Systems:",
    ]
    lines += [f"- `{name}`: {note}" for name, note in SYSTEM_NOTES.items()] + [""]
    lines += [
        "## Summary over seeds",
        "",
        "| system | EM per seed | EM mean ± std |",
        "|---|---|---|",
    ]
    for system in SYSTEM_NOTES:
        ems = [100 * overall(s["results"][system]) for s in summaries]
        m, sd = mean_std(ems)
        per = ", ".join(f"{x:.1f}" for x in ems)
        lines.append(f"| {system} | {per} | {m:.1f} ± {sd:.1f} |")
    gains = [em_gain(s) for s in summaries]
    m, sd = mean_std(gains)
    accs = [
        (op_accuracy(s["results"]["memory_sft"]), op_accuracy(s["results"]["memory_r1"]))
        for s in summaries
    ]
    lines += [
        "",
        f"**EM gain of memory_r1 over memory_sft: {m:+.1f} ± {sd:.1f} points** "
        f"(per seed: {', '.join(f'{g:+.1f}' for g in gains)}).",
        "Operation accuracy before → after RL, per seed: "
        + ", ".join(f"{_pct(a)} → {_pct(b)}" for a, b in accs)
        + ".",
        "Total wall time per seed (s): "
        + ", ".join(str(s["timings_s"].get("total", "?")) for s in summaries)
        + ".",
        "",
    ]
    if all(system in s["results"] for s in summaries for system, _ in ABLATION):
        lines += manager_stage_lines(summaries)
    for summary in summaries:
        lines += seed_section(summary)
    return "\n".join(lines)
