"""The demo's figures (PNG, matplotlib's Agg backend: no display needed).

reward_curves.png  the SFT loss and each RL stage's mean reward per step, per seed, read from
                   the metrics.jsonl files memr1.train writes
em_by_system.png   overall EM of every system (mean over seeds, one dot per seed)
op_mix.png         the manager's operations on the evaluated conversations before RL (the
                   warm start) and after, next to the teacher's mix on the training turns
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

# The backend is chosen before pyplot is imported, so no display is ever looked for.
matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

from experiments.cpu_demo.report import OP_KINDS, SYSTEM_NOTES, overall
from memr1.train.metrics_log import read_jsonl


def _smooth(values: np.ndarray, width: int) -> np.ndarray:
    """Trailing moving average (the first points average what exists so far)."""
    out = np.cumsum(values, dtype=float)
    out[width:] = out[width:] - out[:-width]
    counts = np.minimum(np.arange(1, len(values) + 1), width)
    return out / counts


def reward_curves(runs: Mapping[int, Mapping[str, Path]], out: Path) -> Path:
    """One panel per stage: SFT loss, then the reward of each RL stage, one line per seed, with
    the stage's greedy validation EM (`val/em`, dashed with markers) beside its reward.

    Args:
      runs: seed -> {stage title: metrics.jsonl path}.
    """
    titles = list(dict.fromkeys(t for stages in runs.values() for t in stages))
    fig, axes = plt.subplots(1, len(titles), figsize=(4.2 * len(titles), 3.2), squeeze=False)
    for ax, title in zip(axes[0], titles):
        key = "train/loss" if "sft" in title else "train/reward"
        for seed, stages in runs.items():
            path = stages.get(title)
            if path is None or not Path(path).is_file():
                continue
            records = [r for r in read_jsonl(path) if key in r]
            if not records:
                continue
            steps = np.array([r["step"] for r in records])
            values = np.array([r[key] for r in records], float)
            width = max(1, len(values) // 10)
            (line,) = ax.plot(steps, _smooth(values, width), label=f"seed {seed}")
            ax.plot(steps, values, alpha=0.2, color=line.get_color())
            val = [r for r in read_jsonl(path) if "val/em" in r]
            if val and key == "train/reward":
                ax.plot(
                    [r["step"] for r in val], [r["val/em"] for r in val], "o--",
                    color=line.get_color(), markersize=3, label=f"seed {seed} val EM",
                )  # fmt: skip
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel("loss" if key == "train/loss" else "mean EM reward (val: greedy EM)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def em_by_system(summaries: Sequence[Mapping[str, Any]], out: Path) -> Path:
    """Bar per system (mean EM over seeds) with each seed's EM as a dot."""
    systems = list(SYSTEM_NOTES)
    ems = np.array([[100 * overall(s["results"][name]) for name in systems] for s in summaries])
    fig, ax = plt.subplots(figsize=(6, 3.4))
    x = np.arange(len(systems))
    colors = {"memory_sft": "#6a9fd4", "sft_manager_rl_answer": "#b08fd0", "memory_r1": "#d4736a"}
    ax.bar(x, ems.mean(0), color=[colors.get(name, "#aaaaaa") for name in systems])
    for row in ems:
        ax.scatter(x, row, color="black", s=12, zorder=3)
    ax.set_xticks(x, systems, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("EM on held-out conversations (%)")
    ax.set_title(f"Exact match per system ({len(summaries)} seed(s))")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def op_mix(summaries: Sequence[Mapping[str, Any]], out: Path) -> Path:
    """Share of each operation kind: teacher (training turns), before RL and after RL (eval)."""
    groups: dict[str, np.ndarray] = {}
    teacher = np.zeros(len(OP_KINDS))
    for s in summaries:
        for mix, count in (s.get("trace_manager_mix") or {}).items():
            for kind in mix.split("+"):
                teacher[OP_KINDS.index(kind)] += count
    if teacher.sum():
        groups["teacher (train turns)"] = teacher
    for system, title in (("memory_sft", "before RL (SFT)"), ("memory_r1", "after RL")):
        counts = np.zeros(len(OP_KINDS))
        for s in summaries:
            ops = s["results"][system]["operations"]["ops"]
            counts += [ops.get(k, 0) for k in OP_KINDS]
        groups[title] = counts
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    width = 0.8 / len(groups)
    x = np.arange(len(OP_KINDS))
    for i, (title, counts) in enumerate(groups.items()):
        share = 100 * counts / max(counts.sum(), 1)
        ax.bar(x + (i - (len(groups) - 1) / 2) * width, share, width, label=title)
    ax.set_xticks(x, OP_KINDS)
    ax.set_ylabel("share of manager ops (%)")
    ax.set_title("Memory Manager operation mix")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
