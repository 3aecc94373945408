"""Validation while training (tiny answer-stage GRPO, in process): the loop validates before the
first step, every train.eval_every steps and after the last; the best step by train.keep_best is
checkpointed, kept beside the last N, and loadable as DIR:best; a run killed mid-way and resumed
logs the same records and keeps the same best."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from memr1.drill.checks import raw_records, record_differences
from memr1.env import rollout
from memr1.env.policy import SamplingConfig
from memr1.train import loop, state, validation, validators
from memr1.train.checkpoint import (
    Checkpointer,
    CheckpointNotFoundError,
    resolve_checkpoint,
    restore_params,
    split_spec,
)
from memr1.train.metrics_log import read_jsonl
from tests.train import tiny
from tests.train.test_loop import STATES, answer_policy  # noqa: F401 (the shared fixture)

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

VAL = [
    rollout.AnswerState(
        question=f"Where does {name} live?",
        gold=city,
        memories=((name, (("1 May 2023", f"{name} lives in {city}"),)), ("Jo", ())),
    )
    for name, city in [("Ed", "Kyiv"), ("Fa", "Baku"), ("Gu", "Riga")]
]
STEPS, EVERY = 6, 2


class Killed(Exception):
    """Stands for a kill in the middle of a step."""


# The score the validation adds per step: its best is in the middle of the run (a tiny random
# policy's EM is 0 at every step, which would make the start weights the best). Which weights
# were validated at each step is recorded by their `fingerprint`.
PROBE = {0: 0.25, 2: 0.75, 4: 0.5, 6: 0.75}


def fingerprint(params) -> float:
    return sum(float(np.abs(np.asarray(x, np.float64)).sum()) for x in jax.tree.leaves(params))


def _run(built, workdir, *, kill_at=None, keep_best="val/probe"):
    """A 6-step run validating every 2 steps (keep_best=None: without validation)."""
    cfg, m, policy, update = built
    setup, s0 = state.create_train_state(m, cfg, state.OptimConfig(lr=1e-3, warmup_steps=1), seed=3)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=6)
    calls = []

    def do_rollout(params, states, key):
        calls.append(1)
        if kill_at is not None and len(calls) == kill_at + 1:
            raise Killed
        return rollout.answer_rollout(
            policy, params, states, group_size=4, sampling=sampling, key=key, style="compact"
        )

    real = validators.answer_validator(
        policy, VAL, max_new_tokens=6, style="compact", distill=True, seed=0
    )
    seen = {}

    def validate(params, step):
        seen[step] = fingerprint(params)
        return {**real(params, step), "val/probe": PROBE[step]}

    lcfg = tiny.loop_config(
        steps=STEPS,
        batch_size=2,
        group_size=4,
        checkpoint_every=3,
        eval_every=EVERY,
        keep_best=keep_best or "",
    )
    with (
        Checkpointer(workdir / "ckpt", keep=1, keep_best=bool(keep_best)) as ckpt,
        tiny_writer(workdir) as w,
    ):
        try:
            final = loop.run_rl(
                setup, s0, update, STATES, do_rollout, cfg=lcfg, response_width=6,
                pad_id=policy.pad_id, checkpointer=ckpt, writer=w,
                validate=validate if keep_best is not None else None,
            )  # fmt: skip
        except Killed:
            final = None
    return final, seen, setup


def tiny_writer(workdir):
    from memr1.train.metrics_log import MetricsWriter

    return MetricsWriter(workdir / "logs")


@pytest.fixture(scope="module")
def runs(answer_policy, tmp_path_factory):  # noqa: F811
    """One straight run; one killed during step 4 (after checkpoint 3, which carries the best
    record of step 2) and resumed; one killed during step 2 (after the best checkpoint 2, whose
    validation the resumed run must not repeat) and resumed."""
    root = tmp_path_factory.mktemp("val")
    straight = _run(answer_policy, root / "a")
    killed = _run(answer_policy, root / "b", kill_at=4)
    resumed = _run(answer_policy, root / "b")
    _run(answer_policy, root / "c", kill_at=2)
    resumed_at_best = _run(answer_policy, root / "c")
    return root, straight, killed, (resumed, resumed_at_best)


def _val_records(root, name):
    records = read_jsonl(root / name / "logs" / "metrics.jsonl")
    return [r for r in records if "val/em" in r]


def test_validation_is_logged_before_the_first_step_every_k_steps_and_at_the_end(runs):
    root, (final, seen, _), _, _ = runs
    assert int(final.step) == STEPS
    assert list(seen) == [0, 2, 4, 6]
    val = _val_records(root, "a")
    assert [r["step"] for r in val] == [0, 2, 4, 6]
    for r in val:
        assert {"val/em", "val/f1", "val/no_marker_frac", "val/probe"} <= r.keys(), r
        assert 0.0 <= r["val/em"] <= 1.0 and 0.0 <= r["val/f1"] <= 1.0
        assert r["time/val_s"] > 0
        assert not any(k.startswith("train/") for k in r), r  # a record of its own
    train = [r for r in read_jsonl(root / "a" / "logs" / "metrics.jsonl") if "train/loss" in r]
    assert [r["step"] for r in train] == list(range(STEPS))


def test_the_best_step_is_the_argmax_kept_beside_the_last_and_loadable(runs):
    root, (_, seen, setup), _, _ = runs
    val = _val_records(root, "a")
    values = [r["val/probe"] for r in val]
    best = val[int(np.argmax(values))]["step"]  # the first of equal values: step 2, not 6
    assert best == 2
    ckpt_dir = root / "a" / "ckpt"
    with Checkpointer(ckpt_dir) as ckpt:
        # keep=1: the last step, and the best beside it; the others were pruned.
        assert ckpt.all_steps() == [best, STEPS]
        assert ckpt.best_record() == {"step": best, "value": max(values), "metric": "val/probe"}
    assert resolve_checkpoint(f"{ckpt_dir}:best") == (str(ckpt_dir), best)
    assert resolve_checkpoint(f"{ckpt_dir}:{STEPS}") == (str(ckpt_dir), STEPS)
    assert resolve_checkpoint(ckpt_dir) == (str(ckpt_dir), STEPS)
    params = restore_params(f"{ckpt_dir}:best", setup.abstract_state.params)
    # The weights validated at that step, not those of another.
    assert fingerprint(params) == seen[best]
    assert len(set(seen.values())) == len(seen)
    with pytest.raises(CheckpointNotFoundError, match=r":3: step 3 is not a finalised"):
        resolve_checkpoint(f"{ckpt_dir}:3")


def test_a_killed_and_resumed_run_logs_the_same_records_and_keeps_the_same_best(runs):
    root, (straight, _, _), killed, resumed_runs = runs
    assert killed[0] is None
    for name, (resumed, seen, _) in zip("bc", resumed_runs):
        # The resumed process validates only what the killed one had not.
        assert list(seen) == [4, 6], name
        logs = [raw_records(root / d / "logs" / "metrics.jsonl") for d in ("a", name)]
        assert record_differences(*logs) == [], name
        assert tiny.leaves_equal(straight.params, resumed.params), name
        with Checkpointer(root / "a" / "ckpt") as a, Checkpointer(root / name / "ckpt") as b:
            assert a.best_record() == b.best_record(), name
            assert a.all_steps() == b.all_steps(), name


def test_validating_changes_no_update(runs, answer_policy, tmp_path):  # noqa: F811
    """The same run without validation ends with the same weights and training records."""
    root, (straight, _, _), _, _ = runs
    plain, seen, _ = _run(answer_policy, tmp_path / "plain", keep_best=None)
    assert seen == {} and tiny.leaves_equal(straight.params, plain.params)
    logs = [raw_records(d / "logs" / "metrics.jsonl") for d in (root / "a", tmp_path / "plain")]
    trained = [[r for r in log if "train/loss" in r] for log in logs]
    assert record_differences(*trained) == []


def test_a_run_without_keep_best_names_the_missing_best(answer_policy, tmp_path):  # noqa: F811
    cfg, m, _, _ = answer_policy
    _, s0 = state.create_train_state(m, cfg, state.OptimConfig(lr=1e-3, warmup_steps=1))
    with Checkpointer(tmp_path / "plain") as ckpt:
        ckpt.save(2, s0, {"next_step": 2})
    with pytest.raises(CheckpointNotFoundError, match="recorded no best checkpoint"):
        resolve_checkpoint(f"{tmp_path / 'plain'}:best")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_checkpoint(f"{tmp_path / 'missing'}:best")


def test_checkpoint_specs_and_keep_best_values_parse():
    assert split_spec("runs/a/checkpoints:best") == ("runs/a/checkpoints", "best")
    assert split_spec("runs/a/checkpoints:12") == ("runs/a/checkpoints", "12")
    assert split_spec("runs/a/checkpoints") == ("runs/a/checkpoints", None)
    assert split_spec("gs://bucket/ckpt") == ("gs://bucket/ckpt", None)
    assert validation.parse_keep_best("val/em") == ("val/em", True)
    assert validation.parse_keep_best("-val/loss") == ("val/loss", False)
    assert validation.parse_keep_best("") is None
    for bad in ("em", "train/loss", "-", "val/"):
        with pytest.raises(ValueError, match="train.keep_best"):
            validation.parse_keep_best(bad)
    assert [validation.is_due(d, 2, 5) for d in range(6)] == [True, False, True, False, True, True]
    assert not any(validation.is_due(d, 0, 5) for d in range(6))
    with pytest.raises(ValueError, match="train.eval_every=-1"):
        tiny.loop_config(steps=1, batch_size=1, eval_every=-1)


def test_process_shares_cover_the_set_once_even_when_uneven():
    for n, count in ((3, 1), (3, 2), (81, 4), (2, 4)):
        got = [
            list(range(n))[validators.process_share(n, index=i, count=count)] for i in range(count)
        ]
        assert sum(got, []) == list(range(n)), (n, count)


@pytest.mark.parametrize("buckets, width", [(4, 160), (8, 144)])
def test_sft_validation_pads_to_the_runs_own_bucket_widths(monkeypatch, buckets, width):
    """train.sft_buckets reaches validation: a 115-token pair pads to the smallest of the run's
    widths that holds it (4 widths up to 208: 64/112/160/208; 8: 32/64/80/112/144/...)."""
    from memr1.train import validators

    seen = []

    class Seen(Exception):
        pass

    def sft_batch(prompts, targets, length, pad_id):
        seen.append(length)
        raise Seen

    monkeypatch.setattr(validators, "sft_batch", sft_batch)
    pairs = [([1] * 100, [2] * 15)]
    validate = validators.sft_validator(
        None, pairs, batch_size=1, length=208, pad_id=0, buckets=buckets
    )
    with pytest.raises(Seen):
        validate(None, 0)
    assert seen == [width]
