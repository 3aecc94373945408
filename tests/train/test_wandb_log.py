"""W&B as a metrics sink: the writer hands W&B every record under its metrics.jsonl names and
step, and a setting that cannot log is refused by name at start (no package, no key online).
The end-to-end offline run and its resume are in test_reward_cli.py."""

from __future__ import annotations

import builtins
import math

import pytest

from memr1.train import wandb_log
from memr1.train.metrics_log import MetricsWriter, read_jsonl
from tests.train import tiny


class FakeRun:
    def __init__(self):
        self.logged, self.exit_codes = [], []

    def log(self, values, step):
        self.logged.append((step, values))

    def finish(self, exit_code):
        self.exit_codes.append(exit_code)


def test_the_writer_logs_each_record_to_wandb_under_its_jsonl_names(tmp_path):
    run = FakeRun()
    with MetricsWriter(tmp_path, tensorboard=False, wandb_run=wandb_log.WandbRun(run)) as w:
        w.write(3, {"reward": 0.5, "time/step_s": 1.25, "loss": float("nan")})
        w.write(4, {"em": 0.25}, prefix="val")
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [3, 4]
    (step3, first), second = run.logged
    assert step3 == 3 and first.keys() == {"train/reward", "time/step_s", "train/loss"}
    assert first["train/reward"] == 0.5 and math.isnan(first["train/loss"])
    assert second == (4, {"val/em": 0.25})
    assert run.exit_codes == [0]  # finished once, as a success


def test_a_run_that_fails_is_finished_as_failed_once(tmp_path):
    run = FakeRun()
    wrapped = wandb_log.WandbRun(run)
    with pytest.raises(RuntimeError):
        with MetricsWriter(tmp_path, tensorboard=False, wandb_run=wrapped):
            raise RuntimeError("step failed")
    wrapped.finish()  # the trainer's own guard after the writer: nothing more
    assert run.exit_codes == [1]


def test_no_project_is_off_and_needs_nothing():
    config = tiny.config()
    assert config.train.wandb_project == ""
    wandb_log.check(config)
    assert wandb_log.open_run(config, "unused") is None


def test_a_missing_package_is_named_at_start(monkeypatch):
    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb" or name.startswith("wandb."):
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    config = tiny.config(wandb_project="memr1")
    with pytest.raises(ValueError, match=r"train\.wandb_project.*pip install 'memr1\[wandb\]'"):
        wandb_log.check(config)


def test_online_without_a_key_is_named_at_start_and_offline_needs_none(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    config = tiny.config(wandb_project="memr1")
    with pytest.raises(ValueError, match=r"no API key.*WANDB_MODE=offline"):
        wandb_log.check(config)
    monkeypatch.setenv("WANDB_MODE", "offline")
    wandb_log.check(config)
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    wandb_log.check(config)
