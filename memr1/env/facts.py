"""Where the facts of a turn come from before the Memory Manager sees them.

- "observation": the dataset's own extracted facts (LoCoMo's `observation` field, synthloco's
  too): free, and the bank builder Memory-R1's tuples can use instead of a teacher LLM.
- "llm": the extraction prompt run through a policy (Mem0's LLMExtract step).
- "turn": the raw utterance itself, for the LoCoMo-RAG baseline (no manager at all).

What the "llm" extractor reads (`memory.extract_from`, `fact_units`): "utterance" (memr1's
default) reads one turn and asks for facts about its speaker; "pair" feeds the dialogue as
Mem0's LoCoMo run does, two messages at a time (a session's turns 1-2, 3-4, ..., the last alone
when the count is odd), each pair read once for each speaker's bank ("facts about X"), so that
"Yes, last week!" keeps the question it answers. A pair's facts enter a bank at its second turn.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import jax

from memr1.data.records import Conversation, Turn
from memr1.env.facts_io import parse_facts, render_fact_input
from memr1.env.policy import SamplingConfig, TextPolicy
from memr1.env.stats import StageStats

FACT_SOURCES = ("observation", "llm", "turn")
EXTRACT_FROM = ("utterance", "pair")

# (conversation, the schedule's turn, whose facts, the turns they are read from)
FactUnit = tuple[Conversation, Turn, str, tuple[Turn, ...]]


def check_extract_from(extract_from: str, source: str) -> None:
    """Refuses an unknown `memory.extract_from`, and "pair" where no extractor reads it."""
    if extract_from not in EXTRACT_FROM:
        raise ValueError(
            f"config memory.extract_from={extract_from!r} is not one of {list(EXTRACT_FROM)}"
        )
    if extract_from == "pair" and source != "llm":
        raise ValueError(
            f"config memory.extract_from='pair' is what an LLM extractor reads, but "
            f"memory.fact_source={source!r} (set fact_source='llm', or extract_from='utterance')"
        )


def fact_units(conv: Conversation, turn: Turn, extract_from: str) -> list[FactUnit]:
    """The extractions due at `turn` of the schedule (see the module docstring): its own
    utterance for its speaker, or under "pair", when it closes a pair, the pair for each
    speaker of the conversation."""
    if extract_from == "utterance":
        return [(conv, turn, turn.speaker, (turn,))]
    turns = conv.session(turn.session).turns
    at = next(i for i, t in enumerate(turns) if t.dia_id == turn.dia_id)
    if at % 2 == 0 and at != len(turns) - 1:
        return []  # the first message of a pair: read with the next one
    pair = turns[at - 1 : at + 1] if at % 2 else (turn,)
    return [(conv, turn, speaker, pair) for speaker in (conv.speaker_a, conv.speaker_b)]


def _shown_text(turn: Turn) -> str:
    return turn.text if not turn.image_caption else f"[{turn.image_caption}] {turn.text}"


def observation_index(conv: Conversation) -> dict[str, list[str]]:
    """dia_id -> the observation facts it supports (a fact citing several turns: the last)."""
    order = {t.dia_id: i for i, t in enumerate(conv.iter_turns())}
    index: dict[str, list[str]] = collections.defaultdict(list)
    for obs in conv.observation:
        known = [d for d in obs.dia_ids if d in order]
        if known:
            index[max(known, key=order.__getitem__)].append(obs.fact)
    return index


def turn_text(turn: Turn) -> str:
    """The utterance as a self-contained memory line ("Name: text [shares caption]")."""
    text = turn.text
    if turn.image_caption:
        text = f"{text} [shares a photo: {turn.image_caption}]"
    return f"{turn.speaker}: {text}"


def extract_facts(
    items: Sequence[tuple[Conversation, Turn]],
    *,
    source: str,
    policy: TextPolicy | None = None,
    sampling: SamplingConfig | None = None,
    style: str = "full",
    key: jax.Array | None = None,
    stats: StageStats | None = None,
    observations: dict[str, dict[str, list[str]]] | None = None,
) -> list[list[str]]:
    """The facts of each (conversation, turn), batched over the items for the "llm" source."""
    if source not in FACT_SOURCES:
        raise ValueError(f"unknown fact source {source!r}; expected one of {FACT_SOURCES}")
    if source == "turn":
        return [[turn_text(turn)] for _, turn in items]
    if source == "observation":
        observations = observations or {}
        out = []
        for conv, turn in items:
            if conv.sample_id not in observations:
                observations[conv.sample_id] = observation_index(conv)
            out.append(list(observations[conv.sample_id].get(turn.dia_id, [])))
        return out
    units = [(conv, turn, turn.speaker, (turn,)) for conv, turn in items]
    return extract_unit_facts(
        units, policy=policy, sampling=sampling, style=style, key=key, stats=stats
    )


def extract_unit_facts(
    units: Sequence[FactUnit],
    *,
    policy: TextPolicy | None,
    sampling: SamplingConfig | None,
    style: str = "full",
    key: jax.Array | None = None,
    stats: StageStats | None = None,
) -> list[list[str]]:
    """The LLM extractor's facts of each unit (`fact_units`), in one batched policy call."""
    if policy is None:
        raise ValueError("the 'llm' fact source needs an extraction policy")
    if not units:
        return []
    chats = []
    for conv, turn, about, turns in units:
        session = conv.session(turn.session)
        chats.append(
            render_fact_input(
                [(t.speaker, _shown_text(t)) for t in turns],
                session_date=session.date_time_raw,
                about=about,
                style=style,
            )
        )
    stats = stats or StageStats()
    with stats.time("extraction", items=len(chats)):
        if sampling is None:
            raise ValueError("the 'llm' fact source needs the extractor's sampling settings")
        completions = policy.complete(chats, sampling, key=key)
    facts = []
    for (sample,) in completions:
        stats.add_tokens("extraction", len(sample.ids))
        parsed = parse_facts(sample.text)
        if not parsed.found:
            stats.count("extraction", "unparseable")
        facts.append(parsed.facts)
    return facts
