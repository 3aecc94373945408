"""The op-sampling probe: which operations does a manager checkpoint sample, per kind of turn?

GRPO can only reward an operation that the policy samples: a group whose G samples all ADD
compares ADD with ADD. This probe samples G replies at the rollout temperature on each
manager-stage state (a train-split turn with linked questions, the states the manager stage
draws), parses them with the manager's own parser (:func:`memr1.env.manager_io
.parse_manager_output`) and reports, per gold kind of the turn, the share of samples of each
category of :data:`CATEGORIES` and the share that does the kind's right operation (:data:`RIGHT`).

The gold kind (synthloco's label: a new fact, a repeat, a changed value, another list item, a
cancelled plan) only groups the report and the gate; no reward and no state choice sees it.
:data:`GATE` holds issue 26's thresholds for a warm start whose samples give the manager stage
something to compare: the right operation at a collision with probability >= 0.25, NONE >= 0.45
on repeats, ADD >= 0.85 on new facts.

The label-free collision proxy (:func:`memr1.env.collision.collision_score`) is reported beside
it: per gold kind, its mean and the share of states at or above a threshold, which says how well
a state choice by overlap alone would find the collision states.

:func:`first_event_table` reads the same states teacher-forced instead of sampled: per gold
kind, the checkpoint's probability of each first event of an op-first reply. It tells a warm
start that does not condition its operation on the prompt (the same mix for every kind) from
one that does but samples badly, at no sampling noise.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from memr1.env.collision import COLLIDES, collision_score
from memr1.env.manager_io import (
    ADD,
    DELETE,
    NOOP,
    UPDATE,
    ManagerOp,
    format_manager_output,
    parse_manager_output,
)
from memr1.env.manager_reward import is_malformed

KINDS = ("new", "repeat", "change", "list", "cancel")
# Exclusive categories of one sample: its effective ops (valid ADD / UPDATE / DELETE), NONE for a
# valid reply that changes nothing, "invalid" for one whose every entry was rejected on a rule
# (an unknown id, an empty text: manager_io's counters) but that was read, "other" for any
# other mix of ops, "malformed" for an unreadable or cut-off reply (the reward's is_malformed).
CATEGORIES = ("ADD", "UPDATE", "DELETE", "DELETE+ADD", "NONE", "invalid", "other", "malformed")
# The right operation of each kind (a changed single value may also be DELETE+ADD: synthloco's
# delete_add_ok); a turn without a fact wants nothing.
RIGHT = {
    "new": ("ADD",),
    "repeat": ("NONE",),
    "change": ("UPDATE", "DELETE+ADD"),
    "list": ("UPDATE",),
    "cancel": ("DELETE",),
    "small_talk": ("NONE",),
}
# The events of an op-first reply's first entry, as the reply spells them.
EVENTS = ("ADD", "UPDATE", "DELETE", "NONE")
# Issue 26's thresholds on the share of samples doing the right operation.
GATE = {"new": 0.85, "repeat": 0.45, "change": 0.25, "list": 0.25, "cancel": 0.25}


def gold_kind(entry: Mapping[str, Any]) -> str:
    """The kind of a turn from its synthloco gold entry (op, fact, delete_add_ok)."""
    op = entry["op"]
    if op == "ADD":
        return "new"
    if op == "UPDATE":
        return "change" if entry["delete_add_ok"] else "list"
    if op == "DELETE":
        return "cancel"
    if op == "NOOP":
        return "repeat" if entry.get("fact") is not None else "small_talk"
    raise ValueError(f"gold entry {entry.get('dia_id')!r}: unknown op {op!r}")


def sample_category(ops: Sequence[ManagerOp]) -> str:
    """The category (:data:`CATEGORIES`) of one parsed reply."""
    if is_malformed(ops):
        return "malformed"
    effective = [op.kind for op in ops if op.invalid is None and op.kind != NOOP]
    if not effective:
        return "NONE" if all(op.invalid is None for op in ops) else "invalid"
    counts = collections.Counter(effective)
    for name, want in (
        ("ADD", {ADD: 1}),
        ("UPDATE", {UPDATE: 1}),
        ("DELETE", {DELETE: 1}),
        ("DELETE+ADD", {DELETE: 1, ADD: 1}),
    ):
        if counts == want:
            return name
    return "other"


def tally(samples: Sequence[tuple[str, Sequence[str]]]) -> dict[str, dict[str, Any]]:
    """Per kind: states, samples, the share of each category and of the right operation.

    Args:
      samples: (gold kind, the categories of its G samples) per state.
    """
    by_kind: dict[str, list[str]] = collections.defaultdict(list)
    states: collections.Counter = collections.Counter()
    for kind, categories in samples:
        by_kind[kind].extend(categories)
        states[kind] += 1
    out = {}
    for kind in [*KINDS, "small_talk"]:
        cats = by_kind.get(kind)
        if not cats:
            continue
        n = len(cats)
        counts = collections.Counter(cats)
        out[kind] = {
            "states": states[kind],
            "samples": n,
            "share": {c: counts[c] / n for c in CATEGORIES},
            "right": sum(counts[c] for c in RIGHT[kind]) / n,
        }
    return out


def gate_failures(table: Mapping[str, Mapping], gate: Mapping[str, float] = GATE) -> list[str]:
    """One line per gated kind that misses its threshold (or has no state to measure)."""
    failures = []
    for kind, need in gate.items():
        if kind not in table:
            failures.append(f"{kind}: no state of this kind to measure (needs right >= {need})")
        elif table[kind]["right"] < need:
            got = table[kind]["right"]
            failures.append(f"{kind}: right op {'/'.join(RIGHT[kind])} {got:.3f} < {need}")
    return failures


def probe_ops(
    states: Sequence[Any],
    gold: Mapping[tuple[str, str], Mapping],
    sample: Callable[[Sequence[Any]], Sequence[Sequence[str]]],
    *,
    style: str,
) -> dict[str, Any]:
    """The op table over ManagerTuples ``states``: ``sample(states)`` returns G reply texts per
    state, each parsed against the state's shown ids as the manager stage parses it.

    Returns:
      {"states", "group_size", "kinds": tally(...)}; a state without a gold entry is a KeyError.
    """
    kinds = [_kind_of(t, gold) for t in states]
    replies = sample(states)
    if len(replies) != len(states):
        raise ValueError(f"sample returned {len(replies)} groups for {len(states)} states")
    rows = []
    for t, kind, group in zip(states, kinds, replies):
        _, id_map = t.manager_input(style=style)
        categories = [
            sample_category(parse_manager_output(text, id_map, new_fact_count=len(t.facts)).ops)
            for text in group
        ]
        rows.append((kind, categories))
    sizes = sorted({len(g) for g in replies})
    group_size = sizes[0] if len(sizes) == 1 else sizes
    return {"states": len(states), "group_size": group_size, "kinds": tally(rows)}


def event_continuations(style: str) -> list[str]:
    """For each of :data:`EVENTS`, the op-first reply in ``style`` up to its first entry's id
    value, as format_manager_output writes it: the replies differ only in the event word and
    end on the same next key, so that every event is scored as the targets tokenise it."""
    out = []
    for kind in (ADD, UPDATE, DELETE, NOOP):
        op = ManagerOp(kind, None if kind == ADD else 0, "x")
        text = format_manager_output([op], {0: 0}, style=style, op_first=True)
        out.append(text[: text.index('"id": "') + len('"id": "')])
    return out


def first_event_table(
    states: Sequence[Any],
    gold: Mapping[tuple[str, str], Mapping],
    score: Callable[[Sequence[Any], Sequence[str]], Any],
    *,
    style: str,
) -> dict[str, Any]:
    """Per gold kind: the states and the mean probability of each of :data:`EVENTS` as the
    first event of an op-first reply, teacher-forced.

    Args:
      score: ``score(chats, continuations)`` -> [len(chats), len(continuations)] summed
        log-probabilities of each continuation after each chat's prompt; here the continuations
        are :func:`event_continuations`, normalised over the events.
    """
    kinds = [_kind_of(t, gold) for t in states]
    chats = [t.manager_input(style=style)[0] for t in states]  # the stage's prompt (rollout)
    logp = np.asarray(score(chats, event_continuations(style)), float)
    if logp.shape != (len(states), len(EVENTS)) or not np.all(np.isfinite(logp)):
        raise ValueError(f"score gave {logp.shape} (finite: {np.isfinite(logp).all()})")
    p = np.exp(logp - logp.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    out = {}
    for kind in [*KINDS, "small_talk"]:
        rows = [i for i, k in enumerate(kinds) if k == kind]
        if rows:
            mean = p[rows].mean(axis=0)
            out[kind] = {"states": len(rows), "p": dict(zip(EVENTS, map(float, mean)))}
    return out


def collision_report(
    states: Sequence[Any],
    gold: Mapping[tuple[str, str], Mapping],
    *,
    threshold: float = COLLIDES,
) -> dict[str, Any]:
    """How well the overlap proxy separates the kinds: per kind, its mean over the states and
    the share at or above ``threshold``; and the share of the states above it that collide
    (gold kind other than new), i.e. the precision of choosing states by the proxy."""
    scores: dict[str, list[float]] = collections.defaultdict(list)
    for t in states:
        shown = [text for _, text in t.retrieved]
        scores[_kind_of(t, gold)].append(collision_score(list(t.facts), shown))
    kinds = {
        kind: {
            "states": len(s),
            "mean_overlap": float(np.mean(s)),
            "above": float(np.mean([x >= threshold for x in s])),
        }
        for kind in [*KINDS, "small_talk"]
        if (s := scores.get(kind))
    }
    above = {k: sum(x >= threshold for x in s) for k, s in scores.items()}
    chosen = sum(above.values())
    precision = sum(n for k, n in above.items() if k != "new") / chosen if chosen else None
    return {"threshold": threshold, "kinds": kinds, "chosen": chosen, "precision": precision}


def _kind_of(t: Any, gold: Mapping[tuple[str, str], Mapping]) -> str:
    entry = gold.get((t.sample_id, t.dia_id))
    if entry is None:
        raise KeyError(f"no gold operation for {t.sample_id} {t.dia_id}")
    return gold_kind(entry)


def policy_sampler(policy, sampling, *, group_size: int, style: str, key):
    """``sample(states)`` for :func:`probe_ops`: G completions per ManagerTuple from ``policy``
    at ``sampling`` (the rollout's temperature and budget), on the prompts the manager stage
    renders (`memr1.env.rollout.manager_messages`)."""
    from memr1.env.rollout import manager_messages, manager_state_from_tuple

    def sample(states):
        chats = [manager_messages(manager_state_from_tuple(t), style=style) for t in states]
        groups = policy.complete(chats, sampling, key=key, num_samples=group_size)
        return [[c.text for c in g] for g in groups]

    return sample
