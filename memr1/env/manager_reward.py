"""The manager stage's reward: apply G sampled manager outputs to G copies of a bank, let a
frozen Answer Agent answer the linked questions over each copy, and score its answers with the
run's answer reward (`train.reward`: exact match by default, as the paper).

The bank work is batched and jitted: the G candidates of a state become G banks built by one
`vmap(apply_ops)` (each candidate's ops padded with NOOPs to a common N). Answering is
evaluation's own Algorithm 3 (`memr1.env.answer.answer_over_banks`) over all B·G banks of a
step at once: each candidate bank is indexed by the configured retriever, and the answerer reads
it with evaluation's prompts, sampling and token budget (`RewardEnv`), so the reward a manager
earns is the score evaluation would give the bank it writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import numpy as np

from memr1 import memory as mem
from memr1.env.answer import AnswerConfig, answer_over_banks
from memr1.env.manager_io import (
    MEMR1_RULES,
    NOOP,
    ManagerOp,
    ManagerRules,
    ParsedOps,
    parse_manager_output,
)
from memr1.env.memory_store import BankSpec, BankView, EmbedFn, host_arrays
from memr1.env.policy import TextPolicy
from memr1.env.stats import StageStats
from memr1.eval.metrics import exact_match
from memr1.eval.reward import EXACT_MATCH, AnswerReward

_KINDS = {"NOOP": mem.NOOP, "ADD": mem.ADD, "UPDATE": mem.UPDATE, "DELETE": mem.DELETE}


@dataclasses.dataclass(frozen=True)
class ManagerState:
    """One manager decision point: the bank before turn t, the turn's facts, its linked QA."""

    speakers: tuple[str, str]
    owner: int  # whose turn it is (index into speakers)
    session_date: str
    timestamp: int
    turn: int
    facts: tuple[str, ...]
    bank: tuple[dict, ...]  # {"id", "text", "owner", "updated"} of both speakers' memories
    retrieved: tuple[int, ...]  # ids (of `bank`) the manager is shown, best first
    qa: tuple[tuple[str, str], ...]  # (question, gold answer) linked to the turn


@dataclasses.dataclass(frozen=True)
class RewardEnv:
    """The manager stage's environment: how a reply is read and how the frozen Answer Agent
    scores the bank it writes (evaluation's Algorithm 3 settings).

    answer: retrieval depth, prompt style, distillation and sampling (temperature, token budget),
      built from the config exactly as `memr1.evaluate` builds them.
    bank: capacity, text bytes, overflow policy and retriever of the candidate banks.
    reward: the answer reward (`train.reward`) of each answer over a candidate bank.
    rules: what the manager is shown and how its reply is read (`ManagerRules`, the `agents`
      section), as evaluation's ingest reads it.
    """

    answerer: TextPolicy
    embed: EmbedFn
    answer: AnswerConfig
    bank: BankSpec
    reward: AnswerReward = EXACT_MATCH
    rules: ManagerRules = MEMR1_RULES


@dataclasses.dataclass
class Rewards:
    """Rewards [B, G], the parsed ops of every output, and the reward path's shares."""

    rewards: np.ndarray
    parsed: list[list[list[ManagerOp]]]
    stats: dict[str, float]


def base_bank(state: ManagerState, spec: BankSpec, embed: EmbedFn):
    """The state's bank as arrays; returns (bank, {state id: bank id})."""
    bank = mem.empty_bank(spec.capacity, spec.text_bytes, _dim(embed), 0, overflow=spec.overflow)
    rows = sorted(state.bank, key=lambda m: m["id"])
    if not rows:
        return bank, {}
    embs = embed([m["text"] for m in rows])
    ops = [
        mem.make_op(bank, "ADD", text=m["text"], emb=e, owner=m["owner"], timestamp=m["updated"])
        for m, e in zip(rows, embs)
    ]
    bank = _apply_ops(bank, mem.stack_ops(ops))
    # A fresh bank hands out ids 0, 1, 2, ... in order of the ADDs.
    return bank, {m["id"]: i for i, m in enumerate(rows)}


def _dim(embed: EmbedFn) -> int:
    return int(getattr(embed, "dim", None) or embed(["x"]).shape[-1])


_apply_ops = jax.jit(mem.apply_ops)
_apply_candidates = jax.jit(jax.vmap(mem.apply_ops, in_axes=(None, 0)))


def candidate_ops(
    state: ManagerState,
    text: str,
    id_map: dict[int, int],
    bank,
    embed: EmbedFn,
    rules: ManagerRules = MEMR1_RULES,
) -> tuple[list, ParsedOps]:
    """Parses one sampled manager output into bank ops (host numpy Ops) for `bank`."""
    parsed = parse_manager_output(text, id_map, new_fact_count=len(state.facts), rules=rules)
    effective = parsed.effective()
    texts = [op.text for op in effective if op.kind in ("ADD", "UPDATE")]
    embs = iter(embed(texts)) if texts else iter(())
    ops = []
    for op in effective:
        emb = next(embs) if op.kind in ("ADD", "UPDATE") else None
        ops.append(
            mem.make_op(
                bank,
                _KINDS[op.kind],
                text=op.text,
                emb=emb,
                target=-1 if op.target is None else op.target,
                owner=state.owner,
                timestamp=state.timestamp,
                turn=state.turn,
            )
        )
    return ops, parsed


def _pad_ops(groups: list[list], bank) -> object:
    n = max(1, max(len(g) for g in groups))
    noop = mem.make_op(bank, "NOOP")
    padded = [mem.stack_ops(g + [noop] * (n - len(g))) for g in groups]
    return mem.stack_ops(padded)


# Parse failures that leave nothing readable in a reply (manager_io's counter kinds).
MALFORMED_KINDS = frozenset({"unparseable", "truncated"})


def is_malformed(ops: Sequence[ManagerOp]) -> bool:
    """True when a reply could not be read as an operation list: no valid op, and at least one
    entry rejected as unparseable or cut off. A reply that validly says "nothing to do" (an empty
    list, or NONE entries) is not malformed."""
    no_valid = all(op.invalid is not None for op in ops)
    return no_valid and any(op.invalid in MALFORMED_KINDS for op in ops)


def candidate_banks(
    state: ManagerState, outputs: Sequence[str], env: RewardEnv
) -> tuple[list[BankView], list[ParsedOps]]:
    """The bank each of G outputs writes (as views the answerer reads) and its parsed reply.

    Raises:
      memr1.memory.BankOverflowError: a candidate filled a bank whose overflow policy is
        "raise", as evaluation would (raise `memory.capacity` or choose an evicting policy).
    """
    bank, id_of = base_bank(state, env.bank, env.embed)
    id_map = dict(enumerate(id_of[i] for i in state.retrieved if i in id_of))
    groups, parsed = [], []
    for text in outputs:
        ops, ops_parsed = candidate_ops(state, text, id_map, bank, env.embed, env.rules)
        groups.append(ops)
        parsed.append(ops_parsed)
    banks = _apply_candidates(bank, _pad_ops(groups, bank))
    mem.raise_if_overflowed(banks)
    host = host_arrays(banks)
    views = [
        BankView.index(state.speakers, {k: v[g] for k, v in host.items()}, env.bank.retriever)
        for g in range(len(outputs))
    ]
    return views, parsed


def manager_rewards(
    states: Sequence[ManagerState],
    outputs: Sequence[Sequence[str]],
    env: RewardEnv,
    *,
    key: jax.Array,
) -> Rewards:
    """Rewards of G manager outputs for each of B states, under the answer reward `env.reward`.

    The reward of output g of state b is the mean answer reward (`train.reward`: EM by
    default) of the frozen answerer over the questions linked to b, each answered over the bank
    output g writes (0 when b has no linked question). All B·G·Q answers of the call are scored
    in one reward call (a judge sees each distinct triple once).
    A malformed reply (``is_malformed``) scores 0 whatever the answers over its bank: the
    environment cannot execute it, so the episode fails, as a format failure does in R1-style
    outcome rewards. Without this rule an unreadable reply scores like a NOOP, and a manager that
    cannot yet write correct memories learns to emit garbage, which never damages the bank.

    Stats: `em` (the same mean with exact match, whatever the reward: the paper's metric),
    `malformed_frac` (share of the B·G replies that are malformed), `duplicate_id_frac` and
    `extra_add_frac` (share of the replies that name a shown id twice, or ADD more than once per
    new fact: those `env.rules` change under memr1's rules), `answerer_cut_frac`
    (share of the answerer's replies cut by its token budget before **Answer:**, which score 0
    whatever the bank), `answerer_no_marker_frac` and `answerer_prompt_cut_frac` (share of its
    prompts that dropped their lowest-ranked memories to fit agents.max_prompt_tokens) and
    `answerer_distinct_frac` (share of its prompts it had to answer: under greedy decoding a
    prompt that recurs over the G candidate banks is answered once, `answer_over_banks`), and
    the reward's own (a judge's `judge_unparseable_frac`, `judge_distinct_frac`).
    """
    sizes = {len(group) for group in outputs}
    if len(states) != len(outputs) or len(sizes) > 1:
        raise ValueError(
            f"{len(states)} states need as many groups of G outputs; got group sizes "
            f"{[len(group) for group in outputs]}"
        )
    g_size = sizes.pop() if sizes else 0
    questions, golds, banks, where = [], [], [], []
    replies_read: list[list[ParsedOps]] = []
    for b, (state, group) in enumerate(zip(states, outputs)):
        views, parsed = candidate_banks(state, group, env)
        replies_read.append(parsed)
        for g, view in enumerate(views):
            for question, gold in state.qa:
                questions.append(question)
                golds.append(gold)
                banks.append(view)
                where.append((b, g))
    answering = StageStats()
    _, replies = answer_over_banks(
        questions, banks, embed=env.embed, answerer=env.answerer, cfg=env.answer, key=key,
        stats=answering,
    )  # fmt: skip
    answers = [reply.answer for reply in replies]
    scored = env.reward(questions, golds, answers)
    em = [exact_match(answer, gold) for answer, gold in zip(answers, golds)]
    shape = (len(states), g_size)
    malformed = np.array(
        [[is_malformed(p.ops) for p in parsed] for parsed in replies_read], bool
    ).reshape(shape)
    rewards = _per_sample(where, scored.scores, shape, malformed)
    n_replies = max(len(replies), 1)
    n_samples = max(len(states) * g_size, 1)
    read = [p for parsed in replies_read for p in parsed]
    stats = {
        "em": float(_per_sample(where, em, shape, malformed).mean()) if rewards.size else 0.0,
        "malformed_frac": float(malformed.mean()) if malformed.size else 0.0,
        "duplicate_id_frac": sum(p.repeated_ids > 0 for p in read) / n_samples,
        "extra_add_frac": sum(p.extra_adds > 0 for p in read) / n_samples,
        "answerer_cut_frac": sum(r.cut for r in replies) / n_replies,
        "answerer_no_marker_frac": sum(r.used_fallback for r in replies) / n_replies,
        "answerer_prompt_cut_frac": sum(r.prompt_cut for r in replies) / n_replies,
        "answerer_distinct_frac": answering.counters["answers"]["distinct_prompts"] / n_replies,
        **scored.stats,
    }
    parsed_ops = [[p.ops for p in parsed] for parsed in replies_read]
    return Rewards(rewards, parsed_ops, stats)


def _per_sample(where, scores, shape, malformed) -> np.ndarray:
    """f32 [B, G]: the mean score of each sample's answers (0 without any, or malformed)."""
    sums = np.zeros(shape, np.float64)
    counts = np.zeros(shape, np.float64)
    for (b, g), score in zip(where, scores):
        sums[b, g] += float(score)
        counts[b, g] += 1
    out = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
    return np.where(malformed, 0.0, out).astype(np.float32)


# The operations a sample can hold, as signal_by_op names them (NONE: no effective op).
SIGNAL_OPS = ("add", "update", "delete", "none")
SIGNAL_KEYS = tuple(f"signal_{op}_{way}" for op in SIGNAL_OPS for way in ("up", "down"))


def signal_by_op(parsed: Sequence[Sequence[Sequence[ManagerOp]]], rewards: np.ndarray) -> dict:
    """Per operation, the share of the step's samples whose reward is above
    (``signal_<op>_up``) or below (``signal_<op>_down``) their group's mean: the samples a
    group-relative advantage pushes up or down, so the log shows which operations the stage's
    gradient is about. A sample counts once for each distinct effective op it holds
    (DELETE+ADD for both); one with none (an empty or wholly invalid reply, a NONE) counts as
    "none". Shares, so that the mean over processes (`multihost.merge_stats`) is the step's;
    every key, zeros included.
    """
    out = dict.fromkeys(SIGNAL_KEYS, 0.0)
    rewards = np.asarray(rewards, np.float64)
    share = 1.0 / max(rewards.size, 1)
    for ops_group, group_rewards in zip(parsed, rewards):
        mean = group_rewards.mean()
        for ops, r in zip(ops_group, group_rewards):
            if np.isclose(r, mean):
                continue
            kinds = {op.kind.lower() for op in ops if op.invalid is None and op.kind != NOOP}
            for kind in kinds or {"none"}:
                out[f"signal_{kind}_{'up' if r > mean else 'down'}"] += share
    return out
