"""The demo report's ablation: the manager stage's EM gain and op accuracy per gold kind."""

from __future__ import annotations

import ml_collections
import pytest

from experiments.cpu_demo import report


def _results(em: float, per_gold: dict[str, tuple[int, int]], sizes=(4, 6)) -> dict:
    """A results.json of one system: overall EM, op accuracy from (correct, n) per gold kind."""
    per = {
        op: {"n": n, "correct": c, "accuracy": c / n if n else None}
        for op, (c, n) in per_gold.items()
    }
    scored = sum(v["n"] for v in per.values())
    correct = sum(v["correct"] for v in per.values())
    acc = {"per_gold_op": per, "accuracy": correct / scored, "scored": scored}
    rows = [{"name": "single-hop", "count": 10, "scores": {"f1": em, "bleu1": em, "em": em}}]
    return {
        "scores": {
            "overall": {"count": 10, "scores": {"f1": em, "bleu1": em, "em": em}},
            "by_category": {"locomo": {"rows": rows}},
        },
        "operations": {
            "op_accuracy": acc,
            "ops": {"ADD": 3},
            "banks": {f"c{i}": {"size": s} for i, s in enumerate(sizes)},
        },
    }


SFT_OPS = {"ADD": (5, 10), "UPDATE": (1, 8), "DELETE": (0, 2), "NOOP": (4, 5)}
RL_OPS = {"ADD": (8, 10), "UPDATE": (4, 8), "DELETE": (1, 2), "NOOP": (3, 5)}


def _summary(seed: int, sft_em: float, mid_em: float, r1_em: float) -> dict:
    results = {
        "locomo_rag": _results(0.01, SFT_OPS),
        "mem0": _results(0.02, SFT_OPS),
        "memory_sft": _results(sft_em, SFT_OPS),
        "sft_manager_rl_answer": _results(mid_em, SFT_OPS),
        "memory_r1": _results(r1_em, RL_OPS, sizes=(8, 10)),
    }
    return {"seed": seed, "split": "test", "timings_s": {"total": 1.0}, "results": results}


def test_gold_op_accuracy_pools_counts_not_rates():
    res = _results(0.1, RL_OPS)
    assert report.gold_op_accuracy(res, ("UPDATE",)) == pytest.approx(4 / 8)
    # UPDATE + DELETE pools the turns: (4 + 1) / (8 + 2), not the mean of 0.5 and 0.5.
    assert report.gold_op_accuracy(res, ("UPDATE", "DELETE")) == pytest.approx(5 / 10)
    assert report.gold_op_accuracy(res, report.GOLD_OPS) == pytest.approx(16 / 25)
    no_gold = {"operations": {"op_accuracy": None}}
    assert report.gold_op_accuracy(no_gold, ("ADD",)) is None


def test_manager_gain_is_against_the_same_rl_answerer():
    s = _summary(0, sft_em=0.10, mid_em=0.20, r1_em=0.25)
    assert report.manager_gain(s) == pytest.approx(5.0)
    assert report.em_gain(s) == pytest.approx(15.0)


def test_render_has_the_ablation_and_the_manager_stage_over_seeds():
    config = ml_collections.ConfigDict({"synth": {"splits": (("train", 2), ("test", 1))}})
    summaries = [_summary(0, 0.10, 0.20, 0.25), _summary(1, 0.10, 0.20, 0.21)]
    text = report.render(summaries, algo="grpo", config=config)
    assert "manager stage (memory_r1 over sft_manager_rl_answer): +3.0 ± 2.8 points" in text
    assert "(per seed: +5.0, +1.0)" in text
    # Per gold kind, before -> after per seed and the mean change: UPDATE 12.5 -> 50.0 (+37.5).
    assert "| UPDATE | 12.5 → 50.0, 12.5 → 50.0 | +37.5 |" in text
    assert "| UPDATE + DELETE | 10.0 → 50.0, 10.0 → 50.0 | +40.0 |" in text
    assert "| all | 40.0 → 64.0, 40.0 → 64.0 | +24.0 |" in text
    row = "| SFT manager + RL answerer | 20.0 | 40.0 | 50.0 (5/10) | 12.5 (1/8) | 0.0 (0/2) "
    assert row + "| 80.0 (4/5) | 5.0 |" in text
    assert "| RL manager + RL answerer | 25.0 | 64.0 |" in text
