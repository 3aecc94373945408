"""The demo end to end in its quick form: every stage runs, every output is written and sane.

Nothing learns in a few steps, so the numbers are only checked to be in range; the point is that
the real command lines (memr1.train for SFT and both RL stages, memr1.evaluate for the four
systems) run on what the demo hands them, and that the report and figures come out.
"""

from __future__ import annotations

import json
import math

import pytest

from experiments.cpu_demo import report
from experiments.cpu_demo.__main__ import main
from experiments.cpu_demo.run import SYSTEMS
from memr1.train.metrics_log import read_jsonl
from tests.demo.test_op_probe import check_op_probe_on
from tests.tool import load_tool

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow


def _check_rl_states(seed):
    """Both RL stages read rl_tuples: the answer tuples of the teacher's and the careful
    manager's banks with renamed copies (and oversample_copies more of the questions of the
    oversampled kinds, from each bank), and the manager states on the careful manager's banks."""
    meta = {
        d: json.loads((seed / d / "metadata.json").read_text()) for d in ("tuples", "rl_tuples")
    }
    build = meta["rl_tuples"]["build"]
    assert build["manager_from"] == str(seed / "careful_tuples")
    assert build["answer_from"] == [str(seed / "tuples"), str(seed / "careful_tuples")]
    answers = [meta[d]["files"]["answer"]["records"] for d in ("tuples", "rl_tuples")]
    renamed = 2 * (1 + build["renamed_copies"]) * answers[0]
    extra, copies = answers[1] - renamed, build["oversample_copies"]
    assert answers[0] > 0 and copies > 0 and 0 < extra <= 2 * copies * answers[0]
    assert extra % (2 * copies) == 0  # each picked question, from both banks, copies times


@pytest.mark.slow
def test_quick_demo_writes_every_output(tmp_path, capsys):
    workdir = tmp_path / "demo"
    assert main(["--quick", "--workdir", str(workdir)]) == 0
    printed = capsys.readouterr().out
    assert "EM gain of memory_r1 over memory_sft" in printed
    assert str(workdir / "results.md") in printed

    results_md = (workdir / "results.md").read_text()
    assert all(f"| {system} |" in results_md for system in SYSTEMS)
    for name in ("reward_curves", "em_by_system", "op_mix"):
        png = workdir / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    seed = workdir / "seed-0"
    summary = json.loads((seed / "summary.json").read_text())
    assert summary["split"] == "test" and set(summary["results"]) == set(SYSTEMS)
    for system, results in summary["results"].items():
        scores = results["scores"]["overall"]["scores"]
        assert all(0.0 <= scores[m] <= 1.0 for m in ("f1", "bleu1", "em")), system
        assert (seed / "eval" / "test" / system / "predictions.jsonl").is_file()
    for system in ("mem0", "memory_sft", "memory_r1"):
        accuracy = report.op_accuracy(summary["results"][system])
        assert accuracy is not None and 0.0 <= accuracy <= 1.0
    assert math.isfinite(report.em_gain(summary))
    assert summary["timings_s"]["total"] > 0

    # Each training stage logged finite metrics and saved an Orbax checkpoint.
    stages = (("sft", "train/loss"), ("answer_grpo", "train/reward"))
    for stage, key in stages:
        records = [r for r in read_jsonl(seed / stage / "logs" / "metrics.jsonl") if key in r]
        assert records and all(math.isfinite(r[key]) for r in records)
        assert any((seed / stage / "checkpoints").iterdir())
    manager = read_jsonl(seed / "manager_grpo/logs/metrics.jsonl")
    rewards = [r["train/reward"] for r in manager if "train/reward" in r]
    assert rewards and all(0.0 <= r <= 1.0 for r in rewards)
    # Both RL stages validated on the validation conversations before their first step and
    # after their last (eval_every 2 of 2 steps), and results.md names their checkpoints.
    for stage in ("answer_grpo", "manager_grpo"):
        val = [r for r in read_jsonl(seed / stage / "logs" / "metrics.jsonl") if "val/em" in r]
        assert [r["step"] for r in val] == [0, 2], stage
        assert all(0.0 <= r["val/em"] <= 1.0 for r in val), stage
    assert "malformed_frac" in " ".join(k for r in manager for k in r if k.startswith("val/"))
    assert summary["validation"]["answer"]["metric"] == "val/em"
    assert "memory_r1 evaluated from checkpoints: manager step 2, answer step 2" in results_md
    assert "answer stage's best validated step" in results_md
    assert json.loads((seed / "val_tuples" / "metadata.json").read_text())["build"]["split"] == (
        "validation"
    )

    _check_rl_states(seed)

    # The warm start's traces: JSONL of {messages, target}, manager and answer rows both present.
    rows = [json.loads(line) for line in open(seed / "traces" / "sft.jsonl", encoding="utf-8")]
    targets = [row["target"] for row in rows]
    assert any(t.startswith('{"memory"') for t in targets)
    assert any("**Answer:**" in t for t in targets)

    # The reading probe (tools/copy_probe.py) scores the warm start on the validation rows.
    probe_out = tmp_path / "probe.json"
    argv = [str(seed), "--quick", "--split", "validation", "--reading", "--out", str(probe_out)]
    assert load_tool("copy_probe").main(argv) == 0
    probe = json.loads(probe_out.read_text())
    reading = probe["reading"]
    assert reading["questions"] == sum(g["n"] for g in reading["groups"].values()) > 0
    for g in reading["groups"].values():
        assert all(0.0 <= g[f] <= 1.0 for f in ("em", "teacher_em", "agrees_with_teacher"))
    for agent in ("manager", "answer"):
        scores = probe["scores"][agent]
        assert scores["rows"] > 0 and scores["tokens"] > 0, agent
        assert 0.0 <= scores["top1"] <= 1.0 and 0.0 < scores["mean_prob"] <= 1.0, agent
    # The manager replies that store or merge a memory open its text with a copied name.
    opening = probe["scores"]["manager"]
    assert 0 < opening["opening_tokens"] < opening["tokens"]
    assert 0.0 <= opening["opening_top1"] <= 1.0
    assert probe["scores"]["answer"]["opening_tokens"] == 0

    # The reward probe (tools/reward_probe.py) rewards the fixed behaviours on the manager
    # stage's states through the RL Answer Agent, as the stage rewards its groups, and through
    # the careful rule reader.
    for answer in ("rl", "rules"):
        reward_out = tmp_path / f"reward_probe_{answer}.json"
        argv = [str(seed), "--quick", "--answer", answer, "--max_states", "4"]
        assert load_tool("reward_probe").main([*argv, "--out", str(reward_out)]) == 0
        probe = json.loads(reward_out.read_text())
        assert probe["states"] == sum(g["n"] for g in probe["groups"].values()) > 0
        assert ("answer_grpo" in probe["answerer"]) == (answer == "rl")
        for group in probe["groups"].values():
            assert set(group["reward"]) == {"clean", "add", "delete_add", "overwrite", "none"}
            assert all(0.0 <= r <= 1.0 for r in group["reward"].values())
    # --spread: which groups of the RL manager's sampled replies each reader ranks.
    spread_out = tmp_path / "reward_spread.json"
    argv = [str(seed), "--quick", "--spread", "rl", "--max_states", "4", "--out", str(spread_out)]
    assert load_tool("reward_probe").main(argv) == 0
    spread = json.loads(spread_out.read_text())
    assert spread["groups"] == 4 and "manager_grpo" in spread["manager"]
    assert spread["rules"] >= spread["rules_only_reader_zero"] + spread["rules_only_reader_flat"]
    assert all(0.0 <= spread[k] <= 1.0 for k in ("reader", "rules", "reader_only", "unseen"))

    # The answer-error classes (tools/answer_errors.py) on this run's own test predictions:
    # every answer in one class, and "right" exactly the answers the evaluation scored 1.
    errors_out = tmp_path / "answer_errors.json"
    argv = [str(seed), "--split", "test", "--out", str(errors_out)]
    assert load_tool("answer_errors").main(argv) == 0
    for system, t in json.loads(errors_out.read_text())["systems"].items():
        predictions = seed / "eval" / "test" / system / "predictions.jsonl"
        rows = [json.loads(line) for line in open(predictions, encoding="utf-8")]
        assert t["n"] == len(rows) == sum(t["classes"].values()) > 0, system
        assert t["classes"]["right"] == sum(r["em"] >= 1.0 for r in rows), system
        misses = sum(t["classes"][c] for c in ("hedged", "empty", "wrong"))
        assert sum(t["misses_by_group"].values()) == misses, system

    # The op-sampling probe and the warm-start tool on this run's SFT manager.
    check_op_probe_on(seed, capsys)

    # A second run resumes: every stage finds its output, its record equal to what the config
    # asks (the RL stages' and each evaluation's: run.SeedRun.stage_settings), and nothing is
    # trained or evaluated again.
    record = json.loads((seed / "manager_grpo" / "metadata.json").read_text())["build"]
    assert record["answer"]["checkpoint"] == "last" and record["algo"] == "grpo"
    evaluated = (seed / "eval" / "test" / "memory_r1" / "results.json").stat().st_mtime_ns
    assert main(["--quick", "--workdir", str(workdir)]) == 0
    again = json.loads((seed / "summary.json").read_text())
    assert again["results"]["memory_r1"]["scores"] == summary["results"]["memory_r1"]["scores"]
    assert (seed / "eval" / "test" / "memory_r1" / "results.json").stat().st_mtime_ns == evaluated
    assert again["timings_s"]["total"] < summary["timings_s"]["total"]
