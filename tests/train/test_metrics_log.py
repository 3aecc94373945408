"""Metric logging: JSONL and TensorBoard files, one-step-late reads, the NaN/inf policy."""

import glob
import io
import math
import os
import subprocess
import sys

import jax.numpy as jnp
import pytest

from memr1.train import metrics_log


def test_writer_flushes_each_jsonl_line_and_writes_tensorboard_events(tmp_path):
    with metrics_log.MetricsWriter(tmp_path) as writer:
        writer.write(1, {"loss": 2.5, "grad_norm": 0.5})
        # Readable before the writer is closed: a crashed run keeps what it logged.
        assert metrics_log.read_jsonl(tmp_path / "metrics.jsonl") == [
            {"step": 1, "train/loss": 2.5, "train/grad_norm": 0.5}
        ]
        writer.write(2, {"loss": float("nan")})
    records = metrics_log.read_jsonl(tmp_path / "metrics.jsonl")
    assert records[1]["step"] == 2 and math.isnan(records[1]["train/loss"])
    events = glob.glob(os.path.join(tmp_path, "events.out.tfevents.*"))
    assert events and os.path.getsize(events[0]) > 0


def test_lagged_metrics_hand_over_the_previous_step():
    lag = metrics_log.LaggedMetrics()
    assert lag.push(0, {"loss": jnp.float32(3.0)}) is None
    step, values = lag.push(1, {"loss": jnp.float32(2.0)})
    assert (step, values) == (0, {"loss": 3.0}) and isinstance(values["loss"], float)
    assert lag.flush() == (1, {"loss": 2.0})
    assert lag.flush() is None


def test_nonfinite_policy_skips_or_stops():
    good = {"loss": 1.0, "grad_norm": 1.0, "update_refused": 0.0}
    refused = {"loss": float("nan"), "grad_norm": float("nan"), "update_refused": 1.0}
    assert metrics_log.check_finite(3, good, on_nonfinite="stop")
    assert not metrics_log.check_finite(3, refused, on_nonfinite="skip")
    with pytest.raises(metrics_log.NonFiniteError, match="step 3"):
        metrics_log.check_finite(3, refused, on_nonfinite="stop")
    with pytest.raises(ValueError, match="on_nonfinite"):
        metrics_log.check_finite(3, good, on_nonfinite="ignore")


def test_progress_bar_resumes_from_the_restored_step():
    out = io.StringIO()
    bar = metrics_log.progress(range(5, 8), total=8, initial=5, file=out, mininterval=0)
    assert list(bar) == [5, 6, 7]
    assert bar.n == 8
    assert "5/8" in out.getvalue() and "8/8" in out.getvalue()


def test_shares_above_five_percent_warn_loudly():
    said = []
    ok = {"answerer_cut_frac": 0.05, "malformed_frac": 0.0, "loss": 1.0}
    assert metrics_log.warn_shares(3, ok, warn=said.append) == [] and said == []
    bad = {"answerer_cut_frac": 0.25, "malformed_frac": 0.0625}
    messages = metrics_log.warn_shares(4, bad, warn=said.append)
    assert said == messages and len(messages) == 2
    assert "step 4: answerer_cut_frac=25.0%" in messages[0]
    assert "agents.answer_max_new_tokens" in messages[0]
    assert "malformed_frac=6.2%" in messages[1]


def test_the_train_command_starts_without_importing_torch(tmp_path):
    """tensorboardX imports torch where it is installed; memr1's writer keeps it out (it costs
    every `memr1.train` start more CPU than JAX's own import) and still writes events."""
    code = (
        "import sys; import memr1.train.__main__; from memr1.train import metrics_log\n"
        f"with metrics_log.MetricsWriter({str(tmp_path)!r}) as w: w.write(0, {{'a': 1.0}})\n"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )  # fmt: skip
    assert done.stdout.strip() == "False"
    assert glob.glob(str(tmp_path / "**" / "events.out.tfevents.*"), recursive=True)
