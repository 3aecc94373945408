"""Where the facts of a turn come from before the Memory Manager sees them.

- "observation": the dataset's own extracted facts (LoCoMo's `observation` field, synthloco's
  too): free, and the bank builder Memory-R1's tuples can use instead of a teacher LLM.
- "llm": the extraction prompt run through a policy (Mem0's LLMExtract step).
- "turn": the raw utterance itself, for the LoCoMo-RAG baseline (no manager at all).
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
    if policy is None:
        raise ValueError("the 'llm' fact source needs an extraction policy")
    chats = []
    for conv, turn in items:
        session = conv.session(turn.session)
        text = turn.text if not turn.image_caption else f"[{turn.image_caption}] {turn.text}"
        chats.append(
            render_fact_input(
                [(turn.speaker, text)],
                session_date=session.date_time_raw,
                about=turn.speaker,
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
