"""The GRPO loop on the answer stage with a tiny policy: it runs, logs, checkpoints, and a run
killed after step 1 and resumed ends bitwise equal to an uninterrupted run."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import pytest

from memr1.drill.checks import raw_records, record_differences
from memr1.env import rollout
from memr1.env.policy import SamplingConfig, TextPolicy
from memr1.models.tokenizer_train import train_bpe_tokenizer
from memr1.train import loop, mesh, state
from memr1.train.checkpoint import Checkpointer
from memr1.train.metrics_log import MetricsWriter, read_jsonl
from tests.train import tiny

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

STATES = [
    rollout.AnswerState(
        question=f"Where does {name} live?",
        gold=city,
        memories=((name, (("1 May 2023", f"{name} lives in {city}"),)), ("Jo", ())),
    )
    for name, city in [("Ann", "Paris"), ("Bo", "Rome"), ("Cy", "Oslo"), ("Di", "Lima")]
]


@pytest.fixture(scope="module")
def answer_policy(tmp_path_factory):
    texts = [f"{s.question} {s.memories[0][1][0][1]} **Answer:** {s.gold}" for s in STATES] * 5
    tok = train_bpe_tokenizer(texts, tmp_path_factory.mktemp("tok"), vocab_size=300)
    cfg = tiny.CFG.replace(vocab_size=len(tok), max_position=1024, remat=False)
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[cfg])
    setup, _ = state.create_train_state(m, cfg, state.OptimConfig(lr=1e-3, warmup_steps=1))
    policy = TextPolicy(
        cfg,
        setup.graphdef,
        None,
        tok,
        eos_ids=[tok.eos_token_id],
        pad_id=tok.pad_token_id,
        batch_size=2,
    )
    # One compiled update serves every run below: their setups are structurally identical.
    update = loop.make_rl_update(setup, "grpo", grpo_cfg=tiny.grpo_config(chunk=64, kl_beta=0.0))
    return cfg, m, policy, update


def _run(answer_policy, steps, workdir, drop_zero_signal=False):
    cfg, m, policy, update = answer_policy
    setup, s0 = state.create_train_state(m, cfg, state.OptimConfig(lr=1e-3, warmup_steps=1), seed=3)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=6)

    def do_rollout(params, states, key):
        return rollout.answer_rollout(
            policy, params, states, group_size=4, sampling=sampling, key=key, style="compact"
        )

    with Checkpointer(workdir / "ckpt", keep=2) as ckpt, MetricsWriter(workdir / "logs") as w:
        final = loop.run_rl(
            setup,
            s0,
            update,
            STATES,
            do_rollout,
            cfg=tiny.loop_config(
                steps=steps,
                batch_size=2,
                group_size=4,
                checkpoint_every=1,
                drop_zero_signal=drop_zero_signal,
            ),
            response_width=6,
            pad_id=policy.pad_id,
            checkpointer=ckpt,
            writer=w,
        )
    return final


def test_grpo_loop_logs_and_resumes_exactly(answer_policy, tmp_path):
    straight = _run(answer_policy, 2, tmp_path / "a")
    records = read_jsonl(tmp_path / "a" / "logs" / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1]
    for key in ("train/loss", "train/reward", "train/zero_signal_frac", "train/response_length"):
        assert key in records[0]
    assert 0.0 <= records[0]["train/reward"] <= 1.0
    for r in records:
        # Step timing: finite and positive, and tokens_per_s · step_s is the count of real
        # tokens the update saw: the response tokens plus at least one prompt token per row.
        assert math.isfinite(r["time/step_s"]) and r["time/step_s"] > 0, r
        assert math.isfinite(r["perf/tokens_per_s"]) and r["perf/tokens_per_s"] > 0, r
        tokens = r["perf/tokens_per_s"] * r["time/step_s"]
        assert abs(tokens - round(tokens)) < 1e-6 * tokens, tokens
        assert r["train/n_tokens"] + 8 <= round(tokens), (tokens, r["train/n_tokens"])
    # Interrupted after one step, then resumed by a process that asks for two.
    _run(answer_policy, 1, tmp_path / "b")
    resumed = _run(answer_policy, 2, tmp_path / "b")
    for a, b in zip(jax.tree.leaves(straight.params), jax.tree.leaves(resumed.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert int(resumed.step) == 2
    # The resumed log holds the same records but for the wall-clock fields, which include the
    # rollout's own timings: the rule the fault drill compares by must cover all of them.
    logs = [raw_records(tmp_path / d / "logs" / "metrics.jsonl") for d in ("a", "b")]
    assert "train/time_sample_s" in logs[0][1] and "train/time_reward_s" in logs[0][1]
    assert record_differences(*logs) == []


def test_dropping_zero_signal_groups_updates_on_the_signal_rows_only(answer_policy, tmp_path):
    """Same seed, same rollouts: with drop_zero_signal each step's update sees only the groups
    with a reward spread (one group of 4 rows at least), and the token counts say so."""
    _run(answer_policy, 3, tmp_path / "all")
    _run(answer_policy, 3, tmp_path / "drop", drop_zero_signal=True)
    full = read_jsonl(tmp_path / "all" / "logs" / "metrics.jsonl")
    dropped = read_jsonl(tmp_path / "drop" / "logs" / "metrics.jsonl")
    # The first rollout is identical (same parameters and key); later ones follow the updates.
    assert dropped[0]["train/reward"] == full[0]["train/reward"]
    for r in dropped:
        kept = r["train/kept_groups_frac"]
        signal = 1.0 - r["train/zero_signal_frac"]
        assert kept == max(signal, 0.5), r  # 2 groups a step, at least one kept
    first_kept = dropped[0]["train/kept_groups_frac"]
    assert dropped[0]["train/n_tokens"] <= full[0]["train/n_tokens"]
    if first_kept < 1.0:
        assert dropped[0]["train/n_tokens"] < full[0]["train/n_tokens"]


def test_bucket_length_picks_the_shortest_bucket_that_fits():
    from memr1.train.loop import bucket_length

    # length 224 in 4 buckets: 64, 112, 176, 224 (multiples of 16).
    assert [bucket_length(n, 224) for n in (1, 64, 65, 112, 113, 176, 177, 224)] == [
        64, 64, 112, 112, 176, 176, 224, 224,
    ]  # fmt: skip
    assert bucket_length(300, 224) == 224  # too long: sft_batch names the row
    assert bucket_length(10, 2048) == 512 and bucket_length(1500, 2048) == 1536


def test_oversampled_steps_update_on_the_groups_with_signal(answer_policy, tmp_path):
    """oversample=2: a step rolls out 4 states and the update sees 2 groups, those whose
    rewards differ first; rewards here are set by the state, so which groups those are is
    known (Bo and Di carry signal)."""
    cfg, m, policy, update = answer_policy
    setup, s0 = state.create_train_state(m, cfg, state.OptimConfig(lr=1e-3, warmup_steps=1))
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=6)
    spread = {"Rome": [1.0, 0.0, 0.0, 1.0], "Lima": [0.0, 1.0, 0.0, 0.0]}
    rolled, seen = [], []

    def do_rollout(params, states, key):
        groups, _, stats = rollout.answer_rollout(
            policy, params, states, group_size=4, sampling=sampling, key=key, style="compact"
        )
        rolled.append([s.gold for s in states])
        rewards = np.asarray([spread.get(s.gold, [0.0] * 4) for s in states], np.float32)
        return groups, rewards, stats

    def spy(s, batch):
        seen.append(batch["rewards"].reshape(-1, 4).tolist())
        return update(s, batch)

    w = MetricsWriter(tmp_path / "logs")
    with w:
        loop.run_rl(
            setup,
            s0,
            spy,
            STATES,
            do_rollout,
            cfg=tiny.loop_config(steps=2, batch_size=2, group_size=4, oversample=2),
            response_width=6,
            pad_id=policy.pad_id,
            writer=w,
        )
    assert [sorted(r) for r in rolled] == [sorted(s.gold for s in STATES)] * 2
    for groups in seen:
        assert sorted(groups) == sorted([spread["Rome"], spread["Lima"]])
    records = read_jsonl(tmp_path / "logs" / "metrics.jsonl")
    assert [r["train/signal_groups_frac"] for r in records] == [1.0, 1.0]
    assert [r["train/zero_signal_frac"] for r in records] == [0.5, 0.5]


def test_oversample_below_one_is_refused():
    with pytest.raises(ValueError, match="train.oversample=0"):
        tiny.loop_config(steps=1, batch_size=1, oversample=0)


def test_loop_config_reads_the_train_section_and_the_seed():
    config = tiny.config("stage=manager,algo=grpo", steps=7, batch_size=3, group_size=5)
    config.train.update(checkpoint_every=2, on_nonfinite="stop", drop_zero_signal=True)
    config.train.update(n_micro=2, oversample=3, eval_every=4, keep_best="-val/loss")
    config.seed = 9
    got = dataclasses.asdict(loop.LoopConfig.from_config(config))
    assert got == {
        "steps": 7,
        "batch_size": 3,
        "group_size": 5,
        "checkpoint_every": 2,
        "seed": 9,
        "on_nonfinite": "stop",
        "drop_zero_signal": True,
        "n_micro": 2,
        "oversample": 3,
        "desc": "manager/grpo",
        "eval_every": 4,
        "keep_best": "-val/loss",
        "packed": True,  # GRPO with train.shared_prompt (the default): one packed row a group
        "group_by_length": 0,  # train.sft_group_by_length: SFT only
        "sft_buckets": 4,
    }
