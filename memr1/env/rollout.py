"""Rollouts of the two Memory-R1 stages: sample G outputs per state and score them.

Answer stage: state = (question, retrieved memories of both speakers); reward = the run's answer
reward (`train.reward`, `memr1.eval.reward`: exact match by default, as the paper) of the text
after the last **Answer:** against the gold answer. Manager stage: state = (bank before turn t,
facts of turn t, QA linked to t); reward = the same answer reward of a FROZEN Answer Agent over
the bank each sampled output produces, answered as evaluation answers
(memr1.env.manager_reward).
Both return the completions grouped per state with rewards [B, G] and rollout statistics, ready
for `pack_rollout`; among them `slot_occupancy`, the share of the engine's slot-steps that
decoded a live row (`memr1.sampling.engine.EngineStats`), logged as `train/slot_occupancy`.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from memr1.env.answer_io import answer_prompt, extract_final_answer
from memr1.env.manager_io import render_manager_input
from memr1.env.manager_reward import ManagerState, RewardEnv, manager_rewards, signal_by_op
from memr1.env.policy import Completion, SamplingConfig, TextPolicy
from memr1.eval.metrics import exact_match, token_f1
from memr1.eval.reward import EXACT_MATCH, AnswerReward


@dataclasses.dataclass(frozen=True)
class AnswerState:
    """One answer-stage state: a question and the memories retrieved for it."""

    question: str
    gold: str
    memories: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]  # speaker -> ((when, text), ...)


def answer_messages(state: AnswerState, *, style: str, distill: bool):
    """The Answer Agent's prompt of a state, dropping its lowest-ranked memories to fit the
    prompt budget (`answer_prompt`), as evaluation's does."""
    return answer_prompt(
        state.question, {s: list(m) for s, m in state.memories}, distill=distill, style=style
    )


def manager_messages(state: ManagerState, *, style: str, show_date: bool = True):
    """The manager prompt of a state (ids shown 0..k-1 in retrieval order), with the
    conversation's date when `show_date` (`ManagerRules.show_date`)."""
    by_id = {m["id"]: m["text"] for m in state.bank}
    retrieved = [(i, by_id[i]) for i in state.retrieved if i in by_id]
    date = state.session_date if show_date else None
    messages, _ = render_manager_input(list(state.facts), retrieved, style=style, session_date=date)
    return messages


def answer_rollout(
    policy: TextPolicy,
    params: Any,
    states: Sequence[AnswerState],
    *,
    group_size: int,
    sampling: SamplingConfig,
    key: jax.Array,
    style: str,
    distill: bool = True,
    reward: AnswerReward = EXACT_MATCH,
) -> tuple[list[list[Completion]], np.ndarray, dict[str, float]]:
    """G sampled answers per state, with their rewards [B, G] under `reward` (`train.reward`;
    stats: the step's mean reward, and the mean EM and token F1 as evaluation scores them,
    whatever the reward; validation reads them at G = 1, greedily)."""
    chats = [answer_messages(s, style=style, distill=distill) for s in states]
    start = time.perf_counter()
    # One decode copy of the weights, one engine run for all of the rollout's samples.
    policy = policy.decode_copy(params)
    groups = policy.complete(chats, sampling, key=key, num_samples=group_size)
    run = policy.last_run
    sampled = time.perf_counter()
    questions, golds, answers = [], [], []
    fallbacks = 0
    for state, group in zip(states, groups):
        for c in group:
            answer, fallback = extract_final_answer(c.text)
            fallbacks += fallback
            questions.append(state.question)
            golds.append(state.gold)
            answers.append(answer)
    scored = reward(questions, golds, answers)
    rewards = scored.scores.reshape(len(states), group_size)
    n = max(len(answers), 1)
    lengths = [len(c.ids) for group in groups for c in group]
    stats = {
        "reward": float(rewards.mean()),
        "em": sum(exact_match(a, g) for a, g in zip(answers, golds)) / n,
        "f1": sum(token_f1(a, g) for a, g in zip(answers, golds)) / n,
        **scored.stats,
        "no_marker_frac": fallbacks / n,
        "response_length": float(np.mean(lengths)),
        "truncated_frac": float(np.mean([not c.finished for g in groups for c in g])),
        "prompt_truncated_frac": prompt_truncated_frac(groups),
        "slot_occupancy": occupancy(run),
        "time_sample_s": sampled - start,
        "time_reward_s": time.perf_counter() - sampled,
    }
    return groups, rewards, stats


def occupancy(run) -> float:
    """The share of an engine run's slot-steps that decoded a live row (1 without a run)."""
    return 1.0 if run is None else float(run.slot_occupancy)


def prompt_truncated_frac(groups: Sequence[Sequence[Completion]]) -> float:
    """The share of rows whose prompt dropped its lowest-ranked memories to fit
    `agents.max_prompt_tokens` (`TextPolicy.fit`): distinct from `truncated_frac`, the replies
    cut at the budget."""
    return float(np.mean([c.prompt_truncated for g in groups for c in g]))


def manager_rollout(
    policy: TextPolicy,
    params: Any,
    states: Sequence[ManagerState],
    *,
    group_size: int,
    sampling: SamplingConfig,
    key: jax.Array,
    style: str,
    env: RewardEnv,
) -> tuple[list[list[Completion]], np.ndarray, dict[str, float]]:
    """G sampled manager outputs per state, shown and read under `env.rules` and rewarded
    through the frozen answerer of `env` with its answer reward."""
    chats = [manager_messages(s, style=style, show_date=env.rules.show_date) for s in states]
    sample_key, answer_key = jax.random.split(key)
    start = time.perf_counter()
    # One decode copy of the policy's weights and one engine run for all of its samples, then
    # the policy's copy goes and one of the frozen answerer's serves the reward's run.
    policy = policy.decode_copy(params)
    groups = policy.complete(chats, sampling, key=sample_key, num_samples=group_size)
    run = policy.last_run
    del policy
    sampled = time.perf_counter()
    env = dataclasses.replace(env, answerer=env.answerer.decode_copy())
    scored = manager_rewards(states, [[c.text for c in g] for g in groups], env, key=answer_key)
    answered = env.answerer.last_run
    kinds: collections.Counter = collections.Counter()
    for parsed in scored.parsed:
        for ops in parsed:
            for op in ops:
                kinds[op.kind if op.invalid is None else "invalid"] += 1
    total = max(sum(kinds.values()), 1)
    stats = {
        "reward": float(scored.rewards.mean()),
        "response_length": float(np.mean([len(c.ids) for g in groups for c in g])),
        "truncated_frac": float(np.mean([not c.finished for g in groups for c in g])),
        "prompt_truncated_frac": prompt_truncated_frac(groups),
        **scored.stats,
        **{f"op_{k.lower()}_frac": v / total for k, v in sorted(kinds.items())},
        # Which operations the step's advantages are about (samples above / below their mean).
        **signal_by_op(scored.parsed, scored.rewards),
        "slot_occupancy": occupancy(run),
        # The frozen answerer's run (none when the step's states link no question).
        "answerer_slot_occupancy": occupancy(answered),
        "time_sample_s": sampled - start,
        "time_reward_s": time.perf_counter() - sampled,
    }
    return groups, scored.rewards, stats


def answer_state_from_tuple(t: Any) -> AnswerState:
    """An answer-stage state from a `memr1.tuples.AnswerTuple`."""
    by_speaker = t.memories_by_speaker()
    return AnswerState(
        question=t.question,
        gold=t.answer,
        memories=tuple((name, tuple(by_speaker[name])) for name in t.speakers),
    )


def manager_state_from_tuple(t: Any) -> ManagerState:
    """A manager-stage state from a `memr1.tuples.ManagerTuple`."""
    return ManagerState(
        speakers=tuple(t.speakers),
        owner=t.owner,
        session_date=t.session_date,
        timestamp=t.timestamp,
        turn=t.turn_index,
        facts=tuple(t.facts),
        bank=tuple(
            {"id": m.id, "text": m.text, "owner": m.owner, "updated": m.updated} for m in t.bank
        ),
        retrieved=tuple(i for i, _ in t.retrieved),
        qa=tuple((q.question, q.answer) for q in t.qa),
    )
