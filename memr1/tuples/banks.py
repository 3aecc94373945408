"""Temporal memory banks for the tuples: the three builders and the loop that drives them.

A *job* builds one bank from empty over a run of consecutive turns ``[start, stop)`` of one
conversation and reports the bank's state before chosen positions (``wanted``): position p means
"after turns start .. p-1", so ``stop`` is the finished bank. A window of W turns before turn t is
the job ``[t - W, t)`` reporting at t; the whole history (W = -1) is one job per conversation that
reports before every tuple turn and at the end.

Builders (what turns a turn's facts into bank operations):

* ``observation``: every fact is ADDed as it is (``ConversationMemory.add_texts``, the same call
  as env.ingest without a manager). No model, no retrieval.
* a callable teacher ``teacher(facts, retrieved) -> list[ManagerOp]``: it is shown the speaker's
  top ``k_per_fact`` memories per fact (merged as env.ingest merges them) and its ops go
  through ``ConversationMemory.apply``.
* a policy teacher (a ``TextPolicy``, or anything with its ``complete`` method): the jobs run
  through ``env.ingest`` itself, in lockstep, so one batched manager call serves every job.

Facts come in precomputed (``facts[sample_id][dia_id]``), so every builder and every window sees
the same facts for a turn; for ingest they are handed over as the conversation's observations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

import jax
import numpy as np

from memr1 import memory as mem
from memr1.data.records import Conversation, Observation, Session, Turn, dia_id
from memr1.env.ingest import IngestConfig, TurnRecord, ingest
from memr1.env.manager_io import KINDS, ManagerOp
from memr1.env.memory_store import (
    TURN_BASE,
    BankSpec,
    ConversationMemory,
    EmbedFn,
    to_timestamp,
    turn_number,
)

Teacher = Callable[[list[str], list[tuple[int, str]]], list[ManagerOp]]
Facts = dict[str, dict[str, list[str]]]


def turn_code(turn: Turn) -> int:
    """The op-log turn number of a turn (env.ingest's numbering)."""
    return turn_number(turn.session, turn.index)


@dataclasses.dataclass(frozen=True)
class Job:
    """One bank built from empty over turns ``[start, stop)`` of ``conv``.

    ``key`` names the job's bank (unique across jobs); ``wanted`` holds the positions in
    ``start .. stop`` at which ``on_state`` sees the bank.
    """

    key: str
    conv: Conversation
    turns: tuple[Turn, ...]
    start: int
    stop: int
    wanted: frozenset[int]


StateFn = Callable[[Job, int, ConversationMemory], None]


class CachedEmbed:
    """An embedding function that embeds each distinct text once.

    Windows overlap, so the same facts are embedded many times over; the cache also makes a
    text's vector independent of which batch it happened to be encoded in.
    """

    def __init__(self, embed: EmbedFn, dim: int):
        self.embed = embed
        self.dim = int(dim)
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """Returns emb_QE float32 [Q, E] for Q texts."""
        texts = list(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            for text, row in zip(missing, np.asarray(self.embed(missing), np.float32)):
                self.cache[text] = row
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.cache[t] for t in texts])


def retrieve_for_facts(
    memory: ConversationMemory, fact_emb_QE: np.ndarray, owner: int, k: int
) -> list[tuple[int, str]]:
    """The memories the manager is shown for a turn's facts (exactly as env.ingest)."""
    return memory.neighbours(fact_emb_QE, owner, k)


def last_writes(memory: ConversationMemory, conv: Conversation) -> dict[int, str]:
    """memory id -> dia_id of the turn that last ADDed or UPDATEd it, read from the op log.

    Raises:
      RuntimeError: a logged turn number names no turn of ``conv`` (the op-log numbering of
        env.ingest is no longer ``turn_code``'s).
    """
    log = memory.bank.log
    kind_L = np.asarray(log.kind_L)
    ids_L = np.asarray(log.memory_id_L)
    turn_L = np.asarray(log.turn_L)
    cursor, size = int(log.cursor), len(kind_L)
    out: dict[int, str] = {}
    for seq in range(max(cursor - size, 0), cursor):
        at = seq % size
        if int(kind_L[at]) in (mem.ADD, mem.UPDATE):
            code = int(turn_L[at])
            name = dia_id(code // TURN_BASE, code % TURN_BASE)
            if not conv.has_turn(name):
                raise RuntimeError(
                    f"{conv.sample_id}: the bank's op log names turn number {code}, which is no "
                    f"turn of the conversation; memr1.tuples.banks.turn_code must match the "
                    f"numbering env.ingest writes"
                )
            out[int(ids_L[at])] = name
    return out


def check_teacher_ops(
    ops: Sequence[ManagerOp], retrieved: Sequence[tuple[int, str]], where: str
) -> list[ManagerOp]:
    """Checks a callable teacher's ops: known kinds, UPDATE/DELETE only on retrieved ids.

    The parser holds model output to the same rule; a teacher breaking it is a bug in the
    teacher, so it is reported rather than skipped.
    """
    if not isinstance(ops, (list, tuple)):
        raise TypeError(f"{where}: the teacher returned {type(ops).__name__}, not a list of ops")
    shown = {int(i) for i, _ in retrieved}
    for op in ops:
        if not isinstance(op, ManagerOp):
            raise TypeError(f"{where}: the teacher returned {op!r}, not a ManagerOp")
        if op.kind not in KINDS:
            raise ValueError(f"{where}: teacher op kind {op.kind!r} is not one of {KINDS}")
        if op.invalid is None and op.kind in ("UPDATE", "DELETE") and op.target not in shown:
            raise ValueError(
                f"{where}: the teacher's {op.kind} targets memory {op.target}, which is not "
                f"among the memories retrieved for the turn {sorted(shown)}"
            )
    return list(ops)


def _new_memory(job: Job, spec: BankSpec, dim: int) -> ConversationMemory:
    return ConversationMemory(job.key, (job.conv.speaker_a, job.conv.speaker_b), spec, dim)


def run_direct(
    jobs: Sequence[Job],
    facts: Facts,
    *,
    embed: EmbedFn,
    spec: BankSpec,
    dim: int,
    on_state: StateFn,
    teacher: Teacher | None,
    k_per_fact: int,
) -> None:
    """Runs jobs with the observation builder (``teacher=None``) or a callable teacher."""
    for job in jobs:
        memory = _new_memory(job, spec, dim)
        by_turn = facts[job.conv.sample_id]
        for pos in range(job.start, job.stop + 1):
            if pos in job.wanted:
                on_state(job, pos, memory)
            if pos == job.stop:
                break
            turn = job.turns[pos]
            turn_facts = by_turn.get(turn.dia_id, [])
            if not turn_facts:
                continue
            owner = memory.owner_of(turn.speaker)
            when = to_timestamp(job.conv.session(turn.session).date_time)
            if teacher is None:
                memory.add_texts(
                    turn_facts, owner=owner, timestamp=when, turn=turn_code(turn), embed=embed
                )
                continue
            retrieved = retrieve_for_facts(memory, embed(turn_facts), owner, k_per_fact)
            where = f"{job.conv.sample_id} turn {turn.dia_id}"
            ops = check_teacher_ops(teacher(list(turn_facts), list(retrieved)), retrieved, where)
            memory.apply(ops, owner=owner, timestamp=when, turn=turn_code(turn), embed=embed)


def window_conversation(job: Job, facts: Facts) -> Conversation:
    """The job's turns as a conversation of their own, its facts given as observations."""
    kept = job.turns[job.start : job.stop]
    sessions = []
    for session in job.conv.sessions:
        turns = tuple(t for t in kept if t.session == session.index)
        if turns:
            sessions.append(Session(session.index, session.date_time, session.date_time_raw, turns))
    by_turn = facts[job.conv.sample_id]
    observation = tuple(
        Observation(turn.speaker, turn.session, fact, (turn.dia_id,))
        for turn in kept
        for fact in by_turn.get(turn.dia_id, [])
    )
    return dataclasses.replace(
        job.conv, sample_id=job.key, sessions=tuple(sessions), qa=(), observation=observation
    )


def run_ingest(
    jobs: Sequence[Job],
    facts: Facts,
    *,
    embed: EmbedFn,
    spec: BankSpec,
    dim: int,
    on_state: StateFn,
    teacher,
    cfg: IngestConfig,
    key: jax.Array,
    jobs_per_batch: int,
) -> Iterator[tuple[Job, TurnRecord]]:
    """Runs jobs through env.ingest with ``teacher`` as the manager policy.

    Jobs go in lockstep in batches of ``jobs_per_batch`` (bounding how many banks are alive at
    once). The state before each step comes from ingest's ``progress`` callback, which ingest
    calls once per lockstep step after that step's operations are applied.

    Yields:
      ``(job, record)`` for every turn the teacher managed, so callers can check that they saw
      what the manager saw.
    """
    if cfg.fact_source != "observation" or not cfg.use_manager:
        raise ValueError("run_ingest hands facts over as observations and needs the manager")
    for first in range(0, len(jobs), jobs_per_batch):
        batch = list(jobs[first : first + jobs_per_batch])
        conversations = [window_conversation(job, facts) for job in batch]
        memories = {job.key: _new_memory(job, spec, dim) for job in batch}
        for job in batch:
            if job.start in job.wanted:
                on_state(job, job.start, memories[job.key])
        steps = 0

        def after_step(_active: int, batch=batch, memories=memories) -> None:
            nonlocal steps
            steps += 1
            for job in batch:
                if job.start + steps <= job.stop and job.start + steps in job.wanted:
                    on_state(job, job.start + steps, memories[job.key])

        records = ingest(
            conversations,
            memories,
            embed=embed,
            cfg=cfg,
            key=jax.random.fold_in(key, first),
            manager=teacher,
            progress=after_step,
        )
        expected = max(job.stop - job.start for job in batch)
        if steps != expected:
            raise RuntimeError(
                f"env.ingest reported {steps} steps for jobs of up to {expected} turns; the "
                f"tuple builder relies on one progress call per lockstep step"
            )
        by_key = {job.key: job for job in batch}
        for record in records:
            yield by_key[record.sample_id], record
