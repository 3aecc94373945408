"""The manager stage's reward: apply G sampled manager outputs to G copies of a bank, let a
frozen Answer Agent answer the linked questions over each copy, and score exact match.

The bank work is batched and jitted: B states × G candidates become B·G banks built by one
`vmap(apply_ops)` (each candidate's ops padded with NOOPs to a common N), and the linked
questions are retrieved against all B·G banks in one masked top-k per speaker. Only what must
cross to the host does: parsing the sampled text, embedding new memory texts, and the frozen
answerer's prompts.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from memr1 import memory as mem
from memr1.agents.answer_io import extract_final_answer, render_answer_input
from memr1.agents.manager_io import ManagerOp, parse_manager_output
from memr1.eval.metrics import exact_match
from memr1.pipeline.memory_store import EmbedFn, Hit
from memr1.pipeline.policy import SamplingConfig, TextPolicy

# The frozen answerer answers greedily: the reward should reflect the bank, not sampling noise.
GREEDY_SHORT = SamplingConfig(temperature=0.0, max_new_tokens=64)
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


def base_bank(state: ManagerState, capacity: int, text_bytes: int, embed: EmbedFn):
    """The state's bank as arrays; returns (bank, {state id: bank id})."""
    bank = mem.empty_bank(capacity, text_bytes, _dim(embed), 0, overflow="evict_oldest")
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


@functools.partial(jax.jit, static_argnames="k")
def _search_banks(emb_GME, valid_GM, owner_GM, q_QE, owner, *, k):
    """Top-k slots of `owner`'s memories in each of G banks for Q queries: [G, Q, k]."""
    s = jnp.einsum("qe,gme->gqm", q_QE, emb_GME, precision=jax.lax.Precision.HIGHEST)
    ok = valid_GM & (owner_GM == owner)
    s = jnp.where(ok[:, None, :], s, -jnp.inf)
    return jax.lax.top_k(s, k)


def candidate_ops(
    state: ManagerState, text: str, id_map: dict[int, int], bank, embed: EmbedFn
) -> tuple[list, list[ManagerOp]]:
    """Parses one sampled manager output into bank ops (host numpy Ops) for `bank`."""
    parsed = parse_manager_output(text, id_map, new_fact_count=len(state.facts))
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
    return ops, parsed.ops


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


def manager_rewards(
    state: ManagerState,
    outputs: Sequence[str],
    *,
    answerer: TextPolicy,
    embed: EmbedFn,
    k_per_speaker: int,
    capacity: int = 256,
    text_bytes: int = 256,
    style: str = "compact",
    distill: bool = True,
    answer_sampling: SamplingConfig = GREEDY_SHORT,
    key: jax.Array,
) -> tuple[np.ndarray, list[list[ManagerOp]]]:
    """Exact-match reward of each of G manager outputs for one state.

    A malformed reply (``is_malformed``) scores 0 whatever the answers over its bank: the
    environment cannot execute it, so the episode fails, as a format failure does in R1-style
    outcome rewards. Without this rule an unreadable reply scores like a NOOP, and a manager that
    cannot yet write correct memories learns to emit garbage, which never damages the bank (the
    demo's first manager GRPO runs went from 6% to 100% unparseable replies in 15 steps).

    Returns:
      (rewards [G] = mean EM over the linked questions, or 0 for a malformed reply; the parsed
      ops of each output).
    """
    bank, id_of = base_bank(state, capacity, text_bytes, embed)
    shown = [id_of[i] for i in state.retrieved if i in id_of]
    id_map = dict(enumerate(shown))
    groups, parsed = [], []
    for text in outputs:
        ops, ops_parsed = candidate_ops(state, text, id_map, bank, embed)
        groups.append(ops)
        parsed.append(ops_parsed)
    banks = _apply_candidates(bank, _pad_ops(groups, bank))
    if not state.qa:
        return np.zeros(len(outputs), np.float32), parsed
    questions = [q for q, _ in state.qa]
    q_emb = jnp.asarray(embed(questions))
    host = {
        "ids": np.asarray(banks.ids_M),
        "text": np.asarray(banks.text_MC),
        "length": np.asarray(banks.length_M),
        "updated": np.asarray(banks.updated_M),
    }
    k = min(k_per_speaker, capacity)
    per_owner = []
    for owner in range(len(state.speakers)):
        scores, slots = _search_banks(banks.emb_ME, banks.valid_M, banks.owner_M, q_emb, owner, k=k)
        per_owner.append((np.asarray(scores), np.asarray(slots)))
    chats = []
    for g in range(len(outputs)):
        for qi, question in enumerate(questions):
            memories = {}
            for owner, name in enumerate(state.speakers):
                scores, slots = per_owner[owner]
                hits = [
                    Hit(
                        memory_id=int(host["ids"][g, s]),
                        text=mem.decode_text(host["text"][g, s], host["length"][g, s]),
                        owner=owner,
                        updated=int(host["updated"][g, s]),
                        score=float(sc),
                    )
                    for s, sc in zip(slots[g, qi], scores[g, qi])
                    if np.isfinite(sc)
                ]
                memories[name] = [(h.when, h.text) for h in hits]
            chats.append(render_answer_input(question, memories, distill=distill, style=style))
    answers = answerer.complete(chats, answer_sampling, key=key)
    em = np.array(
        [
            exact_match(extract_final_answer(a[0].text)[0], gold)
            for a, (_, gold) in zip(answers, [qa for _ in outputs for qa in state.qa])
        ],
        np.float32,
    ).reshape(len(outputs), len(questions))
    malformed = np.array([is_malformed(ops) for ops in parsed])
    return np.where(malformed, 0.0, em.mean(axis=1)).astype(np.float32), parsed
