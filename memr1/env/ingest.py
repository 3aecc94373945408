"""Algorithm 2 (memory construction): turn by turn, facts -> retrieval -> manager -> bank ops.

Conversations advance in lockstep: step i takes the i-th turn of every conversation that still
has one, so a single extractor call and a single manager call serve the whole batch. Each turn's
facts belong to its speaker; retrieval, the manager's view and the ops are confined to that
speaker's memories (owner filter), so one speaker's words never land in the other's bank.
Under `memory.extract_from="pair"` (Mem0's feed, `memr1.env.facts.fact_units`) the LLM
extractor reads two messages at a time, once for each speaker's bank, at the pair's second turn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax

from memr1.data.records import Conversation, Turn
from memr1.env.facts import check_extract_from, extract_facts, extract_unit_facts, fact_units
from memr1.env.manager_io import ManagerRules, parse_manager_output, render_manager_input
from memr1.env.memory_store import ConversationMemory, EmbedFn, to_timestamp, turn_number
from memr1.env.policy import SamplingConfig, TextPolicy
from memr1.env.stats import StageStats


@dataclasses.dataclass(frozen=True)
class IngestConfig:
    """Memory construction's settings, from the config (`from_config`); `use_manager` is the
    system's (`memr1.env.systems.system_spec`)."""

    fact_source: str  # memory.fact_source: "observation" | "llm" | "turn"
    extract_from: str  # memory.extract_from: "utterance" | "pair" (what the "llm" extractor reads)
    k_per_fact: int  # memory.k_per_fact: memories retrieved per new fact for the manager
    style: str  # agents.style
    extract_sampling: SamplingConfig  # agents.temperature, agents.extract_max_new_tokens
    manager_sampling: SamplingConfig  # agents.temperature, agents.manager_max_new_tokens
    rules: ManagerRules  # agents.manager_date, agents.repeated_id, agents.adds_per_fact
    use_manager: bool = True  # False: every fact is ADDed as is (LoCoMo-RAG)

    def __post_init__(self):
        check_extract_from(self.extract_from, self.fact_source)

    @classmethod
    def from_config(cls, config) -> IngestConfig:
        return cls(
            fact_source=config.memory.fact_source,
            extract_from=config.memory.extract_from,
            k_per_fact=config.memory.k_per_fact,
            style=config.agents.style,
            extract_sampling=SamplingConfig.from_config(config, "extract"),
            manager_sampling=SamplingConfig.from_config(config, "manager"),
            rules=ManagerRules.from_config(config),
        )


@dataclasses.dataclass
class TurnRecord:
    """What the manager saw and did at one turn (diagnostics, op accuracy, RL tuples)."""

    sample_id: str
    dia_id: str
    speaker: str
    session_date: str
    facts: list[str]
    retrieved: list[tuple[int, str]]
    output: str = ""
    ops: list[dict] = dataclasses.field(default_factory=list)
    invalid: dict[str, int] = dataclasses.field(default_factory=dict)


def _schedule(conv: Conversation) -> list[Turn]:
    return list(conv.iter_turns())


def ingest(
    conversations: Sequence[Conversation],
    memories: dict[str, ConversationMemory],
    *,
    embed: EmbedFn,
    cfg: IngestConfig,
    key: jax.Array,
    extractor: TextPolicy | None = None,
    manager: TextPolicy | None = None,
    stats: StageStats | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[TurnRecord]:
    """Builds every conversation's bank from its turns; returns one record per managed turn."""
    if cfg.use_manager and manager is None:
        raise ValueError("ingest with use_manager=True needs a manager policy")
    stats = stats or StageStats()
    schedules = [_schedule(c) for c in conversations]
    observations: dict = {}
    records: list[TurnRecord] = []
    for step in range(max((len(s) for s in schedules), default=0)):
        active = [(c, s[step]) for c, s in zip(conversations, schedules) if step < len(s)]
        step_key = jax.random.fold_in(key, step)
        if cfg.extract_from == "utterance":
            facts = extract_facts(
                active,
                source=cfg.fact_source,
                policy=extractor,
                sampling=cfg.extract_sampling,
                style=cfg.style,
                key=jax.random.fold_in(step_key, 0),
                stats=stats,
                observations=observations,
            )
            owners = [(c, t, t.speaker) for c, t in active]
        else:
            units = [u for c, t in active for u in fact_units(c, t, cfg.extract_from)]
            facts = extract_unit_facts(
                units,
                policy=extractor,
                sampling=cfg.extract_sampling,
                style=cfg.style,
                key=jax.random.fold_in(step_key, 0),
                stats=stats,
            )
            owners = [(c, t, about) for c, t, about, _ in units]
        pending = [(c, t, who, f) for (c, t, who), f in zip(owners, facts) if f]
        if not cfg.use_manager:
            for conv, turn, who, fs in pending:
                _apply_plain(memories[conv.sample_id], conv, turn, who, fs, embed, stats)
        else:
            records += _manage(pending, memories, embed, cfg, manager, step_key, stats)
        if progress is not None:
            progress(len(active))
    return records


def _when(conv: Conversation, turn: Turn) -> tuple[int, str]:
    session = conv.session(turn.session)
    return to_timestamp(session.date_time), session.date_time_raw


def _turn_number(turn: Turn) -> int:
    return turn_number(turn.session, turn.index)


def _apply_plain(memory, conv, turn, who, facts, embed, stats) -> None:
    timestamp, _ = _when(conv, turn)
    with stats.time("bank_ops", items=len(facts)):
        memory.add_texts(
            facts,
            owner=memory.owner_of(who),
            timestamp=timestamp,
            turn=_turn_number(turn),
            embed=embed,
        )
    stats.count("ops", "ADD", len(facts))


def _manage(pending, memories, embed, cfg, manager, key, stats) -> list[TurnRecord]:
    if not pending:
        return []
    all_facts = [f for _, _, _, fs in pending for f in fs]
    with stats.time("embed", items=len(all_facts)):
        fact_emb = embed(all_facts)
    records, chats, id_maps = [], [], []
    offset = 0
    with stats.time("retrieval", items=len(pending)):
        for conv, turn, who, fs in pending:
            memory = memories[conv.sample_id]
            retrieved = memory.neighbours(
                fact_emb[offset : offset + len(fs)], memory.owner_of(who), cfg.k_per_fact
            )
            offset += len(fs)
            _, date = _when(conv, turn)
            messages, id_map = render_manager_input(
                fs, retrieved, style=cfg.style, session_date=date if cfg.rules.show_date else None
            )
            chats.append(messages)
            id_maps.append(id_map)
            records.append(TurnRecord(conv.sample_id, turn.dia_id, who, date, fs, retrieved))
    with stats.time("manager", items=len(chats)):
        outputs = manager.complete(chats, cfg.manager_sampling, key=key)
    with stats.time("bank_ops", items=len(chats)):
        for (conv, turn, who, fs), (sample,), id_map, record in zip(
            pending, outputs, id_maps, records
        ):
            stats.add_tokens("manager", len(sample.ids))
            parsed = parse_manager_output(
                sample.text, id_map, new_fact_count=len(fs), rules=cfg.rules
            )
            record.output = sample.text
            # The replies memr1's reading rules change (kept or rejected by cfg.rules).
            stats.count("manager_replies", "replies")
            stats.count("manager_replies", "duplicate_id", int(parsed.repeated_ids > 0))
            stats.count("manager_replies", "extra_add", int(parsed.extra_adds > 0))
            record.ops = [dataclasses.asdict(op) for op in parsed.ops if op.invalid is None]
            record.invalid = {k: v for k, v in parsed.counters.items() if v}
            for op in parsed.ops:
                stats.count("ops", op.kind if op.invalid is None else "invalid")
            for kind, n in record.invalid.items():
                stats.count("invalid_ops", kind, n)
            memory = memories[conv.sample_id]
            timestamp, _ = _when(conv, turn)
            memory.apply(
                parsed.ops,
                owner=memory.owner_of(who),
                timestamp=timestamp,
                turn=_turn_number(turn),
                embed=embed,
            )
    return records
