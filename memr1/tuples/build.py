"""Building the manager and answer tuples of a set of conversations (paper Algorithm 1).

For every turn t with facts, the bank before t is built from empty over the preceding W turns
(``window``; -1 = every turn before t, built once per conversation and read as it grows), by the
chosen builder (see ``banks``). The answer tuples read the bank built over the whole
conversation. Nothing here is random apart from a policy teacher's sampling (greedy by default),
so the same inputs give the same tuples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from memr1.data.records import Conversation, Turn
from memr1.env.answer import gold_answer, retrieve_for_questions
from memr1.env.facts import extract_facts
from memr1.env.ingest import IngestConfig
from memr1.env.memory_store import ConversationMemory, EmbedFn, to_timestamp
from memr1.env.policy import SamplingConfig
from memr1.tuples import banks
from memr1.tuples.schema import AnswerMemory, AnswerTuple, LinkedQA, ManagerTuple, MemoryRecord
from memr1.tuples.settings import WHOLE_HISTORY, TupleConfig


@dataclasses.dataclass
class TupleSet:
    """The tuples of a set of conversations and what was counted while building them."""

    manager: list[ManagerTuple]
    answer: list[AnswerTuple]
    counts: dict[str, Any]


def turn_facts(
    conversations: Sequence[Conversation],
    source: str,
    *,
    extractor=None,
    sampling: SamplingConfig | None = None,
    key: jax.Array | None = None,
) -> banks.Facts:
    """``facts[sample_id][dia_id]``: the facts of every turn (turns without facts left out)."""
    items = [(conv, turn) for conv in conversations for turn in conv.iter_turns()]
    found = extract_facts(
        items,
        source=source,
        policy=extractor,
        sampling=sampling,
        key=jax.random.key(0) if key is None else key,
    )
    facts: banks.Facts = {conv.sample_id: {} for conv in conversations}
    for (conv, turn), fs in zip(items, found):
        if fs:
            facts[conv.sample_id][turn.dia_id] = list(fs)
    return facts


def linked_qa(conv: Conversation) -> dict[str, list[LinkedQA]]:
    """dia_id -> the questions whose evidence cites it, in question order."""
    out: dict[str, list[LinkedQA]] = {}
    for index, qa in enumerate(conv.qa):
        linked = LinkedQA(index, qa.question, gold_answer(qa), qa.category, tuple(qa.evidence))
        for evidence in dict.fromkeys(qa.evidence):
            out.setdefault(evidence, []).append(linked)
    return out


def _is_policy(teacher: Any) -> bool:
    return callable(getattr(teacher, "complete", None))


def _builder_name(cfg: TupleConfig, teacher: Any) -> str:
    if cfg.builder == "observation":
        return "observation"
    name = getattr(teacher, "name", None) or getattr(teacher, "__name__", type(teacher).__name__)
    return f"teacher:{name}"


class _Collector:
    """Turns bank states into tuples as the builders report them."""

    def __init__(self, cfg, facts, links, embed, name):
        self.cfg, self.facts, self.links, self.embed, self.name = cfg, facts, links, embed, name
        self.manager: dict[tuple[str, int], ManagerTuple] = {}
        self.answer: dict[str, list[AnswerTuple]] = {}
        self.final_sizes: dict[str, int] = {}
        self.made_by: dict[tuple[str, int], str] = {}

    def __call__(self, job: banks.Job, pos: int, memory: ConversationMemory) -> None:
        conv = job.conv
        if pos == len(job.turns) and job.start == 0 and job.key == conv.sample_id:
            self._answers(conv, memory)
        if pos < len(job.turns) and pos in job.wanted:
            self._manager(job, pos, memory)

    def _manager(self, job: banks.Job, pos: int, memory: ConversationMemory) -> None:
        conv, turn = job.conv, job.turns[pos]
        facts = self.facts[conv.sample_id][turn.dia_id]
        owner = memory.owner_of(turn.speaker)
        retrieved = banks.retrieve_for_facts(memory, self.embed(facts), owner, self.cfg.k_per_fact)
        writes = banks.last_writes(memory, conv)
        bank = tuple(
            MemoryRecord(h.memory_id, h.text, h.owner, h.updated, writes.get(h.memory_id, ""))
            for h in memory.memories()
        )
        session = conv.session(turn.session)
        self.made_by[(conv.sample_id, pos)] = job.key
        self.manager[(conv.sample_id, pos)] = ManagerTuple(
            sample_id=conv.sample_id,
            dia_id=turn.dia_id,
            turn_index=pos,
            speaker=turn.speaker,
            owner=owner,
            speakers=(conv.speaker_a, conv.speaker_b),
            session_date=session.date_time_raw,
            timestamp=to_timestamp(session.date_time),
            window_start=job.start,
            facts=tuple(facts),
            retrieved=tuple(retrieved),
            bank=bank,
            qa=tuple(self.links[conv.sample_id].get(turn.dia_id, [])),
            builder=self.name,
        )

    def _answers(self, conv: Conversation, memory: ConversationMemory) -> None:
        self.final_sizes[conv.sample_id] = len(memory.memories())
        items = [(conv, i, qa) for i, qa in enumerate(conv.qa)]
        hits = retrieve_for_questions(
            items, {conv.sample_id: memory}, self.embed, self.cfg.k_per_speaker
        )
        self.answer[conv.sample_id] = [
            AnswerTuple(
                sample_id=conv.sample_id,
                qa_index=i,
                question=qa.question,
                answer=gold_answer(qa),
                category=qa.category,
                evidence=tuple(qa.evidence),
                speakers=(conv.speaker_a, conv.speaker_b),
                memories=tuple(
                    AnswerMemory(name, h.memory_id, h.when, h.text, h.score)
                    for name, speaker_hits in per_speaker.items()
                    for h in speaker_hits
                ),
                builder=self.name,
            )
            for (_, i, qa), per_speaker in zip(items, hits)
        ]


def _jobs(conv: Conversation, turns: tuple[Turn, ...], chosen: list[int], window: int):
    """The bank-building jobs of one conversation (see ``banks`` for what a job is)."""
    end = len(turns)
    if window == WHOLE_HISTORY:
        return [banks.Job(conv.sample_id, conv, turns, 0, end, frozenset(chosen) | {end})]
    jobs = [banks.Job(conv.sample_id, conv, turns, 0, end, frozenset({end}))]
    for t in chosen:
        start = max(0, t - window)
        name = f"{conv.sample_id}@{turns[t].dia_id}"
        jobs.append(banks.Job(name, conv, turns, start, t, frozenset({t})))
    return jobs


def build_tuples(
    conversations: Sequence[Conversation],
    *,
    embed: EmbedFn,
    dim: int,
    cfg: TupleConfig,
    teacher: Any = None,
    extractor: Any = None,
    key: jax.Array | None = None,
    log: Callable[[str], None] | None = None,
) -> TupleSet:
    """Builds the manager and answer tuples of ``conversations`` (one split, typically).

    Args:
      conversations: the conversations, their questions already filtered (e.g. by
        ``split_conversations``, which drops category 5).
      embed: texts -> emb_QE [Q, E] unit vectors (``Encoder.encode``).
      dim: E.
      cfg: see TupleConfig.
      teacher: for ``cfg.builder == "teacher"``: a policy (``TextPolicy``, or any object with its
        ``complete`` method), run through env.ingest; or a callable
        ``teacher(facts, retrieved) -> list[ManagerOp]``, its ops applied with
        ``ConversationMemory.apply``.
      extractor: the policy extracting facts when ``cfg.fact_source == "llm"`` (defaults to a
        policy teacher).
      key: PRNG key of the policy calls (greedy sampling ignores it).
      log: receives one line per stage, for progress on long builds.

    Returns:
      The tuples, manager tuples in conversation and turn order, answer tuples in conversation
      and question order, and counts (see ``cli`` for their names).
    """
    _check_inputs(conversations, cfg, teacher)
    ids = [c.sample_id for c in conversations]
    key = jax.random.key(0) if key is None else key
    log = log or (lambda line: None)
    if extractor is None and _is_policy(teacher):
        extractor = teacher
    facts = turn_facts(
        conversations,
        cfg.fact_source,
        extractor=extractor,
        sampling=cfg.extract_sampling,
        key=jax.random.fold_in(key, 0),
    )
    cached = banks.CachedEmbed(embed, dim)
    # One batched call up front instead of a few texts per turn: far fewer encoder calls and
    # compiled shapes, and every window reads the same cached vectors.
    cached([f for by_turn in facts.values() for fs in by_turn.values() for f in fs])
    links = {c.sample_id: linked_qa(c) for c in conversations}
    collector = _Collector(cfg, facts, links, cached, _builder_name(cfg, teacher))
    jobs, fact_turns, with_qa = _plan_jobs(conversations, facts, links, cfg)
    log(f"building {len(jobs)} banks with the {collector.name} builder")
    common = dict(embed=cached, spec=cfg.bank, dim=dim, on_state=collector)
    if _is_policy(teacher):
        runs = banks.run_ingest(
            jobs,
            facts,
            teacher=teacher,
            cfg=_teacher_ingest(cfg),
            key=jax.random.fold_in(key, 1),
            jobs_per_batch=cfg.jobs_per_batch,
            **common,
        )
        for job, record in runs:
            _check_same_view(collector, job, record)
    else:
        banks.run_direct(jobs, facts, teacher=teacher, k_per_fact=cfg.k_per_fact, **common)
    manager = [collector.manager[k] for k in sorted(collector.manager, key=_order(ids))]
    answer = [a for sample_id in ids for a in collector.answer[sample_id]]
    counts = _counts(conversations, fact_turns, with_qa, manager, answer, collector.final_sizes)
    return TupleSet(manager=manager, answer=answer, counts=counts)


def _teacher_ingest(cfg: TupleConfig) -> IngestConfig:
    """How a policy teacher's banks are built: its manager's ops on each turn's given facts."""
    return IngestConfig(
        fact_source="observation",
        extract_from="utterance",  # a tuple's facts are its turn's, handed over as they are
        use_manager=True,
        k_per_fact=cfg.k_per_fact,
        style=cfg.style,
        extract_sampling=cfg.extract_sampling,
        manager_sampling=cfg.teacher_sampling,
        rules=cfg.rules,
    )


def _plan_jobs(conversations, facts, links, cfg: TupleConfig) -> tuple[list, int, int]:
    """The bank-building jobs of every chosen turn, and the counts of turns with facts and of
    those some question cites."""
    jobs, fact_turns, with_qa = [], 0, 0
    for conv in conversations:
        turns = tuple(conv.iter_turns())
        candidates = [p for p, t in enumerate(turns) if t.dia_id in facts[conv.sample_id]]
        cited = [p for p in candidates if turns[p].dia_id in links[conv.sample_id]]
        fact_turns, with_qa = fact_turns + len(candidates), with_qa + len(cited)
        chosen = cited if cfg.only_with_qa else candidates
        jobs += _jobs(conv, turns, chosen, cfg.window)
    return jobs, fact_turns, with_qa


def _check_inputs(conversations: Sequence[Conversation], cfg: TupleConfig, teacher: Any) -> None:
    cfg.validate()
    if cfg.builder == "teacher" and teacher is None:
        raise ValueError("the teacher builder needs a teacher (a policy or a callable)")
    if cfg.builder == "observation" and teacher is not None:
        raise ValueError("the observation builder takes no teacher; use builder='teacher'")
    if teacher is not None and not (_is_policy(teacher) or callable(teacher)):
        raise TypeError(f"a teacher must be a policy or a callable, got {type(teacher).__name__}")
    ids = [c.sample_id for c in conversations]
    if len(set(ids)) != len(ids):
        raise ValueError("conversations must have distinct sample_ids")


def _counts(conversations, fact_turns, with_qa, manager, answer, final_sizes) -> dict:
    """What a build wrote, for metadata.json and the CLI's summary."""
    mean = lambda xs: float(np.mean(xs)) if xs else 0.0
    return {
        "conversations": len(conversations),
        "turns": sum(c.num_turns for c in conversations),
        "turns_with_facts": fact_turns,
        "manager_with_qa": with_qa,
        "manager_without_qa": fact_turns - with_qa,
        "manager_written": len(manager),
        "answer": len(answer),
        "mean_bank_size": mean([len(m.bank) for m in manager]),
        "mean_retrieved": mean([len(m.retrieved) for m in manager]),
        "mean_final_bank_size": mean(list(final_sizes.values())),
    }


def _order(ids: list[str]):
    position = {sample_id: i for i, sample_id in enumerate(ids)}
    return lambda k: (position[k[0]], k[1])


def _check_same_view(collector: _Collector, job: banks.Job, record) -> None:
    """A tuple's ``retrieved`` must be what the teacher was shown at that very turn.

    Only a tuple read from the same job's bank is compared: another job's bank may have been
    sampled differently.
    """
    pos = next(p for p, t in enumerate(job.turns) if t.dia_id == record.dia_id)
    where = (job.conv.sample_id, pos)
    if collector.made_by.get(where) != job.key:
        return
    tuple_ = collector.manager[where]
    if list(tuple_.retrieved) != [(int(i), text) for i, text in record.retrieved]:
        raise RuntimeError(
            f"{job.conv.sample_id} turn {record.dia_id}: the tuple's retrieved memories differ "
            f"from those env.ingest showed the teacher; banks.retrieve_for_facts must merge "
            f"hits as ingest does"
        )
