"""Turning a planned story into LoCoMo session text: turns, observations and summaries.

A session opens with a greeting pair and a catch-up question, then walks through its facts in
order. The two speakers strictly alternate, as in LoCoMo; when the next fact belongs to the speaker
who just talked, the other one fills the slot with a reaction to the last fact or with small talk,
and now and then an extra round of chat is slipped in so facts are not always back to back. The
session closes with a goodbye pair. Every fact gets the dia_id of the one turn that states it.
"""

from __future__ import annotations

import datetime as dt
import random

from memr1.data.synthloco import dates, templates
from memr1.data.synthloco.events import Fact
from memr1.data.synthloco.world import Vocab, article

# Chance of an extra round of small talk before a fact turn: it varies the distance between facts
# and keeps sessions from reading like lists.
EXTRA_CHAT_PROBABILITY = 0.3


def _fields(fact: Fact, other: str, vocab: Vocab) -> dict[str, str]:
    """The placeholder values of the templates for one fact."""
    fields = {
        "name": fact.speaker,
        "other": other,
        "value": fact.value,
        "Value": fact.value[:1].upper() + fact.value[1:],
        "a_value": article(fact.value),
        "old": fact.old or "",
        "a_old": article(fact.old) if fact.old else "",
        "when": fact.when or "",
        "When": (fact.when or "").capitalize(),
    }
    if fact.species is not None:
        fields.update(
            species=fact.species,
            a_species=article(fact.species),
            species_pl=vocab.plural(fact.species),
        )
    return fields


def _template_key(fact: Fact) -> tuple[str, str, bool]:
    return (fact.key, fact.action, fact.date is not None)


def fact_turn(rng: random.Random, fact: Fact, other: str, vocab: Vocab) -> str:
    """A first-person utterance that states ``fact`` (one paraphrase, chosen by ``rng``)."""
    return rng.choice(templates.TURNS[_template_key(fact)]).format(**_fields(fact, other, vocab))


def observation(fact: Fact, vocab: Vocab) -> str:
    """The third-person sentence for ``fact`` in LoCoMo's ``observation`` field."""
    return templates.OBSERVATIONS[_template_key(fact)].format(**_fields(fact, "", vocab))


def _reaction(rng: random.Random, fact: Fact, listener: str, vocab: Vocab) -> str:
    """What ``listener`` says right after hearing ``fact``."""
    kind = "cancel" if fact.action == "cancel" else fact.key
    return rng.choice(templates.REACTIONS[kind]).format(**_fields(fact, listener, vocab))


def render_session(
    rng: random.Random,
    session: int,
    facts: list[Fact],
    speakers: tuple[str, str],
    target_turns: int,
    vocab: Vocab,
) -> list[dict[str, str]]:
    """Writes one session's turns and stamps each fact with its dia_id.

    Args:
      rng: the conversation's random stream.
      session: 1-based session index, used in the dia_ids ("D<session>:<turn>").
      facts: the session's facts in story order; their ``dia_id`` is set here.
      speakers: the two speakers; which one opens the session is drawn from ``rng``.
      target_turns: the length to pad to; a session with many facts may come out longer.
      vocab: the vocabulary (for pet plurals).

    Returns:
      LoCoMo turns, each ``{"speaker", "dia_id", "text"}`` in that key order.
    """
    first = rng.choice(speakers)
    order = (first, speakers[1] if first == speakers[0] else speakers[0])
    lines: list[tuple[str, str, Fact | None]] = []
    # Small talk is drawn without replacement so a session never says the same filler twice in a
    # row; the pool is refilled if a long session uses it all.
    fillers: list[str] = []

    def next_speaker() -> str:
        return order[len(lines) % 2]

    def listener(speaker: str) -> str:
        return order[1] if speaker == order[0] else order[0]

    def chat() -> None:
        # A reaction if the last turn was the other speaker's fact, small talk otherwise.
        speaker = next_speaker()
        previous = lines[-1][2] if lines else None
        if previous is not None and previous.speaker != speaker:
            text = _reaction(rng, previous, speaker, vocab)
        elif len(lines) == 3:
            # The catch-up question was just asked, and this speaker has no news to answer with.
            text = rng.choice(templates.CATCH_UP_REPLIES)
        else:
            if not fillers:
                fillers.extend(templates.FILLERS)
                rng.shuffle(fillers)
            text = fillers.pop()
        lines.append((speaker, text, None))

    lines.append((order[0], rng.choice(templates.GREETINGS).format(other=order[1]), None))
    lines.append((order[1], rng.choice(templates.GREETING_REPLIES).format(other=order[0]), None))
    lines.append((order[0], rng.choice(templates.CATCH_UP), None))
    for fact in facts:
        if rng.random() < EXTRA_CHAT_PROBABILITY:
            chat()
            chat()
        while next_speaker() != fact.speaker:
            chat()
        text = fact_turn(rng, fact, listener(fact.speaker), vocab)
        previous = lines[-1][2]
        if previous is not None and previous.speaker != fact.speaker:
            # Answer the other speaker's news before sharing one's own, as people do.
            text = f"{_reaction(rng, previous, fact.speaker, vocab)} {text}"
        lines.append((fact.speaker, text, fact))
    while len(lines) < target_turns - 2 or lines[-1][2] is not None:
        chat()
    closer = next_speaker()
    lines.append((closer, rng.choice(templates.CLOSINGS).format(other=listener(closer)), None))
    lines.append(
        (listener(closer), rng.choice(templates.CLOSING_REPLIES).format(other=closer), None)
    )

    turns = []
    for index, (speaker, text, fact) in enumerate(lines, start=1):
        dia_id = f"D{session}:{index}"
        if fact is not None:
            fact.dia_id = dia_id
        turns.append({"speaker": speaker, "dia_id": dia_id, "text": text})
    return turns


def observations(
    facts: list[Fact], speakers: tuple[str, str], vocab: Vocab
) -> dict[str, list[list[str]]]:
    """LoCoMo's ``session_<N>_observation`` value: speaker -> [[fact sentence, dia_id], ...].

    Both speakers are always present, with an empty list when they stated nothing, as in the real
    file. Repeats of known facts are listed too, as LoCoMo's annotators did.
    """
    result: dict[str, list[list[str]]] = {speaker: [] for speaker in speakers}
    for fact in facts:
        result[fact.speaker].append([observation(fact, vocab), fact.dia_id])
    return result


def event_summary(
    facts: list[Fact], speakers: tuple[str, str], day: dt.date, vocab: Vocab
) -> dict[str, object]:
    """LoCoMo's ``events_session_<N>`` value: what changed for each speaker, plus the date."""
    result: dict[str, object] = {speaker: [] for speaker in speakers}
    for fact in facts:
        if fact.action != "repeat":
            result[fact.speaker].append(observation(fact, vocab))
    result["date"] = dates.format_day(day, comma=True)
    return result


def session_summary(
    facts: list[Fact], speakers: tuple[str, str], date_time: str, vocab: Vocab
) -> str:
    """A short prose summary of a session, in the spirit of LoCoMo's ``session_summary``."""
    news = [observation(fact, vocab) for fact in facts if fact.action != "repeat"]
    if not news:
        news = ["They caught up on everyday life."]
    return " ".join([f"{speakers[0]} and {speakers[1]} met at {date_time}.", *news])
