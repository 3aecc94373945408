"""The validation passes of a run: `validate(params, step) -> {"val/...": float}` per stage.

Each scores the current policy on the whole validation set with its stage's own reward path,
greedily (temperature 0, as the paper decodes for validation and test):

  answer stage   `rollout.answer_rollout` at G = 1 (the reward's path, on the text after
                 **Answer:**): val/reward (the run's `train.reward`, as train/reward),
                 val/em, val/f1, val/no_marker_frac, val/truncated_frac,
                 val/response_length (and a judge reward's val/judge_unparseable_frac).
  manager stage  `rollout.manager_rollout` at G = 1 through the run's frozen Answer Agent
                 (`RewardEnv`, answering as evaluation does): val/reward (the stage's reward:
                 the answerer's mean answer reward over the bank each reply writes, 0 for a
                 malformed reply), val/em (the same with exact match), val/malformed_frac,
                 the op mix val/op_<kind>_frac, val/duplicate_id_frac, val/answerer_cut_frac,
                 ... Only turns with linked questions are validated (a reward needs a question).
  SFT            the target tokens' mean NLL (`sft.eval_sft_loss`): val/loss.

One engine run per process per pass (the policy's prompts, then the answerer's questions),
decoding every prompt at once unless `train.val_batch_size` caps the prompts decoded at once
(slots refill as replies end). The key is fixed, so every pass
decodes the same way and two steps' scores differ only by the weights. Multi-host: process p
scores its share [p·n/P, (p+1)·n/P) of the n states (it need not split evenly) with its own
replica of the weights; the shares' sums are gathered and every process returns the same means.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from memr1.env import rollout
from memr1.env.manager_reward import RewardEnv
from memr1.env.policy import SamplingConfig, TextPolicy, agent_budget
from memr1.eval.reward import EXACT_MATCH, AnswerReward
from memr1.train import multihost
from memr1.train.order import bucket_length
from memr1.train.sft import eval_sft_loss, sft_batch
from memr1.train.state import TrainSetup
from memr1.train.update import shard_batch
from memr1.train.validation import PREFIX, Validate

GREEDY = 0.0  # the validation temperature


def greedy(max_new_tokens: int) -> SamplingConfig:
    return SamplingConfig(temperature=GREEDY, max_new_tokens=max_new_tokens)


def process_share(n: int, *, index: int | None = None, count: int | None = None) -> slice:
    """This process's contiguous share [p·n/P, (p+1)·n/P) of n items (uneven shares allowed)."""
    index = jax.process_index() if index is None else index
    count = jax.process_count() if count is None else count
    return slice(index * n // count, (index + 1) * n // count)


def _rows(n: int, cap: int) -> int:
    """Prompts decoded at once: all n (or `cap`), rounded up to the local devices' count."""
    rows = max(1, min(n, cap) if cap > 0 else n)
    per = jax.local_device_count()
    return -(-rows // per) * per


def combine(n: int, stats: Mapping[str, float]) -> dict[str, float]:
    """`val/` means over every process's share from each one's (n, means over its n states);
    wall-clock fields are dropped (the pass logs its own `time/val_s`). A collective."""
    sums = {k: float(v) * n for k, v in stats.items() if not k.startswith("time_")}
    shares = multihost.gather({"n": int(n), "sums": sums})
    total = sum(s["n"] for s in shares)
    names = sorted({k for s in shares for k in s["sums"]})
    return {PREFIX + k: sum(s["sums"].get(k, 0.0) for s in shares) / total for k in names}


def answer_validator(
    policy: TextPolicy,
    states: Sequence[rollout.AnswerState],
    *,
    max_new_tokens: int,
    style: str,
    distill: bool,
    rows: int = 0,
    seed: int = 0,
    reward: AnswerReward = EXACT_MATCH,
) -> Validate:
    """The answer stage's pass over `states` (the validation tuples' answer states), scored
    with the run's answer `reward`."""
    if not states:
        raise ValueError("answer-stage validation: no validation states")
    mine = list(states[process_share(len(states))])
    local = policy.with_batch_size(_rows(len(mine), rows))
    key = jax.random.key(seed)

    def validate(params: Any, step: int) -> dict[str, float]:
        stats = {}
        if mine:
            _, _, stats = rollout.answer_rollout(
                local,
                params,
                mine,
                group_size=1,
                sampling=greedy(max_new_tokens),
                key=key,
                style=style,
                distill=distill,
                reward=reward,
            )
        return combine(len(mine), stats)

    return validate


def manager_validator(
    policy: TextPolicy,
    states: Sequence[Any],
    env: RewardEnv,
    *,
    max_new_tokens: int,
    style: str,
    rows: int = 0,
    seed: int = 0,
) -> Validate:
    """The manager stage's pass over `states` (ManagerStates), rewarded through `env`."""
    states = [s for s in states if s.qa]
    if not states:
        raise ValueError("manager-stage validation: no validation turn has a linked question")
    mine = states[process_share(len(states))]
    local = policy.with_batch_size(_rows(len(mine), rows))
    questions = sum(len(s.qa) for s in mine)
    env = dataclasses.replace(
        env, answerer=env.answerer.with_batch_size(_rows(max(questions, 1), rows))
    )
    key = jax.random.key(seed)

    def validate(params: Any, step: int) -> dict[str, float]:
        stats = {}
        if mine:
            _, _, stats = rollout.manager_rollout(
                local,
                params,
                mine,
                group_size=1,
                sampling=greedy(max_new_tokens),
                key=key,
                style=style,
                env=env,
            )
        return combine(len(mine), stats)

    return validate


def sft_validator(
    setup: TrainSetup,
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    batch_size: int,
    length: int,
    pad_id: int,
    chunk: int = 128,
    buckets: int = 4,
) -> Validate:
    """The mean NLL per target token of every validation pair (batches of `batch_size` pairs
    over the mesh, as SFT steps are, padded to the same `buckets` widths; a short last batch is
    padded with empty rows)."""
    if not pairs:
        raise ValueError("SFT validation: no validation pairs")

    @jax.jit
    def nll(params, batch):
        n = (batch["loss_mask"] & batch["valid"]).astype(jnp.float32).sum()
        return eval_sft_loss(setup, params, batch, chunk) * n, n

    def validate(params: Any, step: int) -> dict[str, float]:
        total = count = 0.0
        for start in range(0, len(pairs), batch_size):
            chunk_pairs = list(pairs[start : start + batch_size])
            chunk_pairs += [([], [])] * (batch_size - len(chunk_pairs))
            idx = np.arange(batch_size)[multihost.process_slice(batch_size, "validation pairs")]
            rows = [chunk_pairs[i] for i in idx]
            # (prompt, target[, weights]): validation's loss is the unweighted NLL per token.
            need = max(multihost.gather(max(len(r[0]) + len(r[1]) for r in rows)))
            batch = sft_batch(
                [r[0] for r in rows],
                [r[1] for r in rows],
                bucket_length(need, length, buckets),
                pad_id,
            )
            s, n = nll(params, shard_batch(setup, batch))
            total, count = total + float(s), count + float(n)
        return {"val/loss": total / count}

    return validate


# -- the train CLI's validation set ----------------------------------------------------------------


def check_flags(config, *, tuples, val_tuples, val_sft_data) -> None:
    """Refuses a validation set without train.eval_every (it would be ignored), the reverse,
    the other kind's set, and the training tuples themselves."""
    every, sft_run = config.train.eval_every, config.algo == "sft"
    flag, given = ("--val_sft_data", val_sft_data) if sft_run else ("--val_tuples", val_tuples)
    other, stray = ("--val_tuples", val_tuples) if sft_run else ("--val_sft_data", val_sft_data)
    if stray:
        raise ValueError(f"{other} is not read by algo={config.algo}; give {flag}")
    if given and not every:
        raise ValueError(f"{flag} given but config train.eval_every=0: it would be ignored")
    if every and not given:
        raise ValueError(f"config train.eval_every={every} needs a validation set: give {flag}")
    if val_tuples and tuples and Path(val_tuples) == Path(tuples):
        raise ValueError(f"--val_tuples {val_tuples} are the training tuples (--tuples)")


def read_records(config, val_tuples: str | None) -> list:
    """An RL stage's validation tuples, read (and checked) before any model is loaded.

    Raises a ValueError (memr1.data.errors.DataError) naming the file for a malformed or
    missing folder or split, or tuples built from the train split, and for an empty set.
    """
    if config.algo == "sft" or not config.train.eval_every:
        return []
    from memr1.tuples.io import read_metadata, read_tuples

    if not str(val_tuples).startswith("tfds:"):
        split = read_metadata(val_tuples).get("build", {}).get("split")
        if split == "train":
            raise ValueError(
                f"--val_tuples {val_tuples}: built from the train split; build them with "
                "python -m memr1.tuples --config.data.split=validation"
            )
    records = read_tuples(val_tuples, config.stage)
    if config.stage == "manager":
        from memr1.train.stages import linked_questions

        # The stage's own reward: the questions train.linked_qa links, on every such turn.
        records = [r for r in linked_questions(records, config.train.linked_qa) if r.has_qa]
    if not records:
        raise ValueError(f"--val_tuples {val_tuples}: no {config.stage} tuples to validate on")
    return records


def for_rl(
    config,
    policy: TextPolicy,
    records: Sequence[Any],
    env: RewardEnv | None,
    reward: AnswerReward = EXACT_MATCH,
):
    """The RL stage's `validate(params, step)` over its validation tuples (None without them);
    `env` is the manager stage's reward (its frozen Answer Agent and answer reward), `reward`
    the answer stage's (the run's `train.reward`)."""
    if not records:
        return None
    t = config.train
    # The stage's one budget, as its rollouts and evaluation read it.
    budget = agent_budget(config, config.stage)
    kw = dict(max_new_tokens=budget, style=config.agents.style, rows=t.val_batch_size)
    kw["seed"] = config.seed
    if config.stage == "answer":
        states = [rollout.answer_state_from_tuple(x) for x in records]
        return answer_validator(policy, states, distill=config.agents.distill, reward=reward, **kw)
    states = [rollout.manager_state_from_tuple(x) for x in records]
    return manager_validator(policy, states, env, **kw)


def for_sft(config, setup: TrainSetup, policy: TextPolicy, val_sft_data, pad_id: int):
    """SFT's `validate(params, step)` over a JSONL of {messages, target} (None without one)."""
    if not val_sft_data:
        return None
    from memr1.train.sft import read_sft_pairs

    t = config.train
    pairs = read_sft_pairs(val_sft_data, policy)
    return sft_validator(
        setup,
        pairs,
        batch_size=t.batch_size,
        length=t.sft_length,
        pad_id=pad_id,
        buckets=t.sft_buckets,
    )
