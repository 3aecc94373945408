"""The RL half of the two-process check: both Memory-R1 stages with GRPO through `loop.run_rl`.

Run by `multiprocess_check.py` in each of two processes (the real rollout: the sampler on a
process-local copy of the weights, exact match for the answer stage, the frozen answerer over
the banks each sampled manager output builds for the manager stage), and replayed on one device
by `test_multiprocess.py`: each process records which states it drew and what it sampled, and
the one-device reference runs the same loop on every process's samples together.

A random tiny policy almost never earns a reward, so every group would carry no signal and the
update would test nothing. The recording rollout adds a bonus, the share of even token ids in a
sample, to the rewards of the states in `SIGNAL`; which states those are is chosen so that a
step's signal groups fall on one process only: a choice of groups made per process, rather
than over the whole step, would then keep other groups than one process holding every row.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from memr1.env import rollout
from memr1.env.answer import AnswerConfig
from memr1.env.manager_reward import ManagerState, RewardEnv
from memr1.env.memory_store import BankSpec
from memr1.env.policy import Completion, SamplingConfig, TextPolicy
from memr1.models.config import ModelConfig
from memr1.train import loop, multihost, state
from memr1.train.checkpoint import Checkpointer
from memr1.train.metrics_log import MetricsWriter
from tests.train import tiny

STAGES = ("answer", "manager")
# Adam's eps well above float noise: a gradient entry that is ~0 up to summation order (4 devices
# here, 1 in the reference) would otherwise still take a ±lr step, in either direction.
OPTIM = state.OptimConfig(lr=1e-2, warmup_steps=0, eps=1e-4)
SAMPLING = SamplingConfig(temperature=1.0, max_new_tokens=6)
LOOPS = {
    # 4 states a step, 2 per process; the update keeps 2 groups, those with signal first.
    "answer": tiny.loop_config(steps=2, batch_size=2, group_size=4, oversample=2),
    # 1 state per process a step; groups without signal are dropped.
    "manager": tiny.loop_config(steps=2, batch_size=2, group_size=4, drop_zero_signal=True),
}
GRPO = tiny.grpo_config(chunk=64, kl_beta=0.0)
# The manager stage's reward: greedy answers of up to 64 tokens over 2 memories per speaker.
REWARD_CONFIG = tiny.config()
REWARD_CONFIG.memory.update(k_per_speaker=2, capacity=8, text_bytes=64, retriever="exact_numpy")
REWARD_CONFIG.agents.update(style="compact", distill=True, temperature=0.0)
REWARD_CONFIG.agents.answer_max_new_tokens = 64

PEOPLE = [("Ann", "Paris"), ("Bo", "Rome"), ("Cy", "Oslo"), ("Di", "Lima")]
PEOPLE += [("Ed", "Kyiv"), ("Flo", "Baku"), ("Gus", "Doha"), ("Hal", "Riga")]
ANSWER_STATES = [
    rollout.AnswerState(
        question=f"Where does {name} live?",
        gold=city,
        memories=((name, (("1 May 2023", f"{name} lives in {city}"),)), ("Jo", ())),
    )
    for name, city in PEOPLE
]
MANAGER_STATES = [
    ManagerState(
        speakers=(name, "Jo"),
        owner=0,
        session_date="2:00 pm on 1 May, 2023",
        timestamp=1682949600,
        turn=30004,
        facts=(f"{name} adopted another dog named {pet}.",),
        bank=(
            {"id": 7, "text": f"{name} has a dog named Toby", "owner": 0, "updated": 1680000000},
            {"id": 9, "text": "Jo likes hiking", "owner": 1, "updated": 1680000000},
        ),
        retrieved=(7,),
        qa=((f"What are the names of {name}'s dogs?", f"Toby and {pet}"),),
    )
    for name, pet in [("Andrew", "Buddy"), ("Bea", "Rex"), ("Cal", "Max"), ("Dora", "Spot")]
]
STATES = {"answer": ANSWER_STATES, "manager": MANAGER_STATES}


def _signal(stage: str) -> frozenset[int]:
    """The states whose groups get the bonus: step 0's on process 0 (answer; both are kept,
    none of process 1's), step 0's on process 1 and all of step 1's (manager)."""
    cfg = LOOPS[stage]
    n, per_step = len(STATES[stage]), cfg.batch_size * cfg.oversample
    first, second = (loop.batch_indices(n, per_step, s, cfg.seed) for s in (0, 1))
    if stage == "answer":
        return frozenset(int(i) for i in first[:2])
    return frozenset([int(first[1]), *map(int, second)])


SIGNAL = {stage: _signal(stage) for stage in STAGES}


def make_tokenizer(out_dir):
    """A byte-level BPE tokenizer trained on the texts of both stages (saved to `out_dir`)."""
    from memr1.models.tokenizer_train import train_bpe_tokenizer

    texts = [f"{s.question} {s.memories[0][1][0][1]} **Answer:** {s.gold}" for s in ANSWER_STATES]
    texts += [
        f"{s.facts[0]} {s.bank[0]['text']} {s.qa[0]} memory event ADD" for s in MANAGER_STATES
    ]
    return train_bpe_tokenizer(texts * 5, out_dir, vocab_size=300)


def model_config(tok) -> ModelConfig:
    return tiny.CFG.replace(vocab_size=len(tok), max_position=1024, remat=False)


def make_policy(cfg, setup, tok, params=None, name="policy") -> TextPolicy:
    eos, pad = [tok.eos_token_id], tok.pad_token_id
    return TextPolicy(cfg, setup.graphdef, params, tok, eos_ids=eos, pad_id=pad, batch_size=2)


def bag_of_words(texts) -> np.ndarray:
    """A deterministic stand-in encoder: hashed bag of words, L2-normalised [N, 16]."""
    out = np.zeros((len(texts), 16), np.float32)
    for i, text in enumerate(texts):
        for word in re.findall(r"\w+", text.lower()):
            out[i, sum(map(ord, word)) % 16] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)


def real_rollout(stage: str, policy: TextPolicy, answerer: TextPolicy | None):
    """The stage's own rollout: `rollout.answer_rollout` or `rollout.manager_rollout`."""
    common = dict(group_size=LOOPS[stage].group_size, sampling=SAMPLING, style="compact")
    if stage == "answer":
        return lambda params, states, key: rollout.answer_rollout(
            policy, params, states, key=key, **common
        )
    return lambda params, states, key: rollout.manager_rollout(
        policy,
        params,
        states,
        key=key,
        env=RewardEnv(
            answerer=answerer,
            embed=bag_of_words,
            answer=AnswerConfig.from_config(REWARD_CONFIG),
            bank=BankSpec.from_config(REWARD_CONFIG),
        ),
        **common,
    )


def recording(stage: str, inner, record: list):
    """`inner` with the SIGNAL bonus added to its rewards; appends what each call drew and
    sampled to `record` (JSON-ready)."""

    def fn(params, states, key):
        groups, rewards, stats = inner(params, states, key)
        drawn = [STATES[stage].index(s) for s in states]
        for b, i in enumerate(drawn):
            if i in SIGNAL[stage]:
                rewards[b] += [float(np.mean(c.ids % 2 == 0)) for c in groups[b]]
        stats = {**stats, "reward": float(rewards.mean())}
        record.append(
            {
                "states": drawn,
                "rewards": rewards.tolist(),
                "groups": [[_to_json(c) for c in group] for group in groups],
            }
        )
        return groups, rewards, stats

    return fn


def _to_json(c: Completion) -> dict:
    return {
        "text": c.text,
        "prompt_ids": c.prompt_ids.tolist(),
        "ids": c.ids.tolist(),
        "logprobs": c.logprobs.tolist(),
        "finished": c.finished,
    }


def replay(stage: str, per_process: list[list[dict]]):
    """A rollout that returns what the processes sampled, all of a step's rows at once."""
    calls = iter(zip(*per_process, strict=True))

    def fn(params, states, key):
        parts = next(calls)
        drawn = [i for part in parts for i in part["states"]]
        assert [STATES[stage][i] for i in drawn] == list(states), (drawn, states)
        groups = [[_from_json(c) for c in g] for part in parts for g in part["groups"]]
        rewards = np.asarray([r for part in parts for r in part["rewards"]], np.float32)
        length = float(np.mean([len(c.ids) for g in groups for c in g]))
        return groups, rewards, {"reward": float(rewards.mean()), "response_length": length}

    return fn


def _from_json(c: dict) -> Completion:
    return Completion(
        text=c["text"],
        prompt_ids=np.asarray(c["prompt_ids"], np.int32),
        ids=np.asarray(c["ids"], np.int32),
        logprobs=np.asarray(c["logprobs"], np.float32),
        finished=c["finished"],
    )


def run_stage(stage, setup, s0, do_rollout, workdir: Path, *, pad_id: int, checkpoint=False):
    """`loop.run_rl` of the stage (GRPO); returns the final train state."""
    update = loop.make_rl_update(setup, "grpo", grpo_cfg=GRPO)
    with MetricsWriter(workdir / "logs", tensorboard=False) as writer:
        # Written asynchronously, as the train command writes (`open_checkpoints`): the save
        # copies arrays sharded over both processes into host memory.
        ckpt = Checkpointer(workdir / "ckpt", keep=1, async_save=True) if checkpoint else None
        try:
            return loop.run_rl(
                setup,
                s0,
                update,
                STATES[stage],
                do_rollout,
                cfg=LOOPS[stage],
                response_width=SAMPLING.max_new_tokens,
                pad_id=pad_id,
                checkpointer=ckpt,
                writer=writer,
            )
        finally:
            if ckpt is not None:
                ckpt.close()


def run_processes(out_dir: Path, tok_dir: Path, m) -> None:
    """Both stages on this process (one of several); writes its records and, on process 0,
    the final parameters of each stage to `out_dir`."""
    from memr1.models.tokenizer import load_tokenizer

    tok = load_tokenizer(str(tok_dir))
    cfg = model_config(tok)
    p = jax.process_index()
    for stage in STAGES:
        setup, s0 = state.create_train_state(m, cfg, OPTIM, seed=3)
        policy = make_policy(cfg, setup, tok)
        _check_refuses_global_params(policy, s0.params)
        answerer = None
        if stage == "manager":  # frozen: a copy of the initial policy, local to this process
            frozen = multihost.local_replica(jax.tree.map(jnp.copy, s0.params))
            answerer = make_policy(cfg, setup, tok, frozen, name="answerer")
        record: list = []
        do_rollout = recording(stage, real_rollout(stage, policy, answerer), record)
        final = run_stage(
            stage,
            setup,
            s0,
            do_rollout,
            out_dir / stage,
            pad_id=policy.pad_id,
            checkpoint=stage == "manager",
        )
        (out_dir / f"{stage}-p{p}.json").write_text(json.dumps(record))
        save_params(final.params, out_dir / f"{stage}-params.npz")


def _check_refuses_global_params(policy: TextPolicy, params) -> None:
    """Sampling with weights that live partly on the other process is a named error."""
    chat = [{"role": "user", "content": "hi"}]
    try:
        policy.complete([chat], SAMPLING, key=jax.random.key(0), params=params)
    except ValueError as err:
        assert "process-local copy" in str(err), err
    else:
        raise AssertionError("sampling with another process's weights was not refused")


def save_params(params, path: Path) -> None:
    """Every parameter, gathered whole (a collective); written by process 0."""
    from jax.experimental import multihost_utils

    leaves = multihost_utils.process_allgather(params, tiled=True)
    if jax.process_index() == 0:
        np.savez(path, *[np.asarray(x) for x in jax.tree.leaves(leaves)])


def load_params(path: Path) -> list[np.ndarray]:
    with np.load(path) as f:
        return [f[f"arr_{i}"] for i in range(len(f.files))]
