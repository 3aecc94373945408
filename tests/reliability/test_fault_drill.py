"""tools/fault_drill.py: its metrics.jsonl comparison, and a short train-kills drill run as a user
runs it, so that the promise of docs/reliability.md is checked by the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memr1.drill.checks import log_differences, raw_records, record_differences
from memr1.train.metrics_log import LaggedMetrics, is_wall_clock

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}


def _record(step: int, loss: float, step_s: float, **extra) -> dict:
    return {"step": step, "train/loss": loss, "train/update_refused": 0.0,
            "time/step_s": step_s, "perf/tokens_per_s": 6 / step_s, **extra}  # fmt: skip


def test_the_wall_clock_rule_names_exactly_the_timing_fields():
    timing = ["time/step_s", "perf/tokens_per_s", "train/time_sample_s", "train/time_reward_s"]
    other = ["step", "train/loss", "train/grad_norm", "train/lr", "train/update_refused",
             "train/response_length", "train/truncated_frac", "train/n_tokens"]  # fmt: skip
    assert [k for k in timing + other if is_wall_clock(k)] == timing
    # Whatever LaggedMetrics adds to a step's metrics is timing, and covered by the rule.
    lag = LaggedMetrics()
    lag.push(0, {"loss": 1.0}, started=0.0, tokens=6)
    _, out = lag.flush()
    assert set(out) - {"loss"} and all(is_wall_clock(k) for k in set(out) - {"loss"}), out


def test_records_equal_but_for_timing_agree():
    a = [_record(0, 2.5, 4.9), _record(1, "nan", 0.3, **{"train/time_sample_s": 0.1})]
    b = [_record(0, 2.5, 0.2), _record(1, "nan", 0.25, **{"train/time_sample_s": 0.7})]
    assert record_differences(a, b) == []


def test_a_differing_loss_is_named_by_record_step_and_field():
    a = [_record(0, 2.5, 4.9), _record(1, 2.25, 0.3)]
    b = [_record(0, 2.5, 0.2), _record(1, 2.3, 0.3)]
    assert record_differences(a, b) == ["record 1 (step 1): train/loss = 2.3, uninterrupted 2.25"]


def test_missing_records_and_fields_are_differences():
    a = [_record(0, 2.5, 4.9), _record(1, 2.25, 0.3)]
    b = [{k: v for k, v in _record(0, 2.5, 0.2).items() if k != "time/step_s"}]
    assert record_differences(a, b) == [
        "1 records, the uninterrupted run has 2",
        "record 0 (step 0): field 'time/step_s' only in the uninterrupted run",
    ]


def test_a_torn_line_is_a_difference(tmp_path):
    whole = "".join(json.dumps(r) + "\n" for r in [_record(0, 2.5, 4.9), _record(1, 2.25, 0.3)])
    (tmp_path / "a.jsonl").write_text(whole)
    (tmp_path / "b.jsonl").write_text(whole + '{"step": 2, "train/lo')
    assert log_differences(tmp_path / "a.jsonl", tmp_path / "a.jsonl") == []
    (diff,) = log_differences(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    assert "b.jsonl: line 3 is not a whole JSON record" in diff


@pytest.mark.slow
def test_a_short_drill_of_training_kills_passes(tmp_path):
    """Two SIGKILLs of the tiny SFT run (one aimed inside a checkpoint save), then a run to the
    end: it must finish in the uninterrupted run's state, with its metrics records."""
    runs = tmp_path / "runs"
    cmd = [sys.executable, "tools/fault_drill.py", "--parts=train", "--kills=2", "--steps=8",
           "--seed=3", f"--json={tmp_path / 'drill.json'}", f"--workdir={runs}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "drill passed" in proc.stdout, proc.stdout[-3000:]
    t = json.loads((tmp_path / "drill.json").read_text())["train_kills"]
    assert (t["kills"], t["launches"], t["final_exit"], t["checkpoints_lost"]) == (2, 3, 0, 0), t
    # Each kill came after a finished save, so both later launches resumed from a checkpoint.
    assert t["resumes"] == 2, t
    assert t["final_state_equal"] and t["metrics_jsonl_equal"], t
    # The comparison that passed is not blind: the runs' logs differ in their step times, and a
    # changed loss in the resumed log is caught and named.
    ref, killed = (runs / d / "logs" / "metrics.jsonl" for d in ("reference", "killed"))
    assert ref.read_bytes() != killed.read_bytes()
    records = raw_records(killed)
    records[5]["train/loss"] += 1e-6
    killed.write_text("".join(json.dumps(r) + "\n" for r in records))
    (diff,) = log_differences(ref, killed)
    assert diff.startswith("record 5 (step 5): train/loss = "), diff
