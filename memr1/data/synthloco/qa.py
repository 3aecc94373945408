"""Questions about a synthloco conversation, in every LoCoMo category, with evidence dia_ids.

Categories use the LoCoMo data's own numbering (memr1.data.categories): 1 multi-hop, 2 temporal,
3 open-domain, 4 single-hop, 5 adversarial. Questions are asked as of the end of the conversation,
and every answer of categories 1, 2 and 4 can be read or counted off the gold final bank
(gold.py); category 3 needs one step of inference from a stored preference. Answers are short
(one to five words), so exact match is a meaningful reward:

  4 single-hop   the current value of one fact: "Where does Andrew live?" -> "Denver"
  1 multi-hop    several facts combined: all pet names, a pet count, both speakers' pets in total,
                 a hobby both speakers share
  2 temporal     when a dated fact happened ("yesterday" said on 8 May 2023 -> "7 May 2023"), and
                 "as of" counts that need the history of a list ("How many dogs did Andrew have as
                 of September 2023?" -> "one")
  3 open-domain  a preference inferred from a fact: a hobby suggests an outing, a favourite food a
                 cuisine, a pet a fitting gift
  5 adversarial  a question about one speaker asked with the other speaker's name, where the other
                 speaker never mentioned that topic; like LoCoMo, it has ``adversarial_answer``
                 (the first speaker's answer) and no ``answer``
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from collections.abc import Iterable
from typing import Any

from memr1.data.synthloco import dates
from memr1.data.synthloco.events import Fact, SpeakerState
from memr1.data.synthloco.gold import join_items
from memr1.data.synthloco.world import FACT_KEYS, SPECIES, SynthConfig, Vocab, article, number_word

MULTI_HOP, TEMPORAL, OPEN_DOMAIN, SINGLE_HOP, ADVERSARIAL = 1, 2, 3, 4, 5
# The order in which categories take turns when questions are picked, so that a conversation with
# few candidates still gets every category it can.
PICK_ORDER = (SINGLE_HOP, MULTI_HOP, TEMPORAL, OPEN_DOMAIN)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A possible question.

    Attributes:
      category: LoCoMo category number.
      template: the question with ``{name}`` for the speaker it is about.
      name: that speaker (None for questions about both speakers, which are never swapped).
      key: the fact key the question is about.
      answer: the gold answer.
      evidence: dia_ids of the turns that support the answer.
    """

    category: int
    template: str
    name: str | None
    key: str
    answer: str
    evidence: tuple[str, ...]

    def as_qa(self) -> dict[str, Any]:
        """The LoCoMo ``qa`` entry, keys in the real file's order."""
        return {
            "question": self.template.format(name=self.name),
            "answer": self.answer,
            "evidence": list(self.evidence),
            "category": self.category,
        }


def _final_states(story: list[list[Fact]], speakers: tuple[str, str]) -> dict[str, SpeakerState]:
    states = {speaker: SpeakerState(species="") for speaker in speakers}
    for fact in (fact for facts in story for fact in facts):
        if fact.species is not None:
            states[fact.speaker].species = fact.species
        states[fact.speaker].apply(fact)
    return states


def _as_of(
    rng: random.Random, name: str, adoptions: list[Fact], plural: str, days: list[dt.date]
) -> Candidate | None:
    """An "as of <month>" pet count that differs from the final count, if the dates allow one."""
    months = []
    for year, month in dates.months_between(days[0], days[-1]):
        known = [fact.date.before_end_of(year, month) for fact in adoptions]
        count = sum(1 for k in known if k)
        if None not in known and 0 < count < len(adoptions):
            months.append((year, month, count))
    if not months:
        return None
    year, month, count = rng.choice(months)
    return Candidate(
        TEMPORAL,
        f"How many {plural} did {{name}} have as of {dates.month_year(year, month)}?",
        name,
        "pets",
        number_word(count),
        tuple(fact.dia_id for fact in adoptions[: count + 1]),
    )


# Single-hop questions about the current value of each single-valued key.
VALUE_QUESTIONS = {
    "city": "Where does {name} live?",
    "job": "What does {name} do for a living?",
    "food": "What is {name}'s favorite food?",
    "trip": "Where is {name} planning to travel?",
    "event": "What event is {name} planning to go to?",
}


def _speaker_candidates(
    rng: random.Random,
    name: str,
    state: SpeakerState,
    facts: dict[str, list[Fact]],
    vocab: Vocab,
    days: list[dt.date],
) -> list[Candidate]:
    """Every question about one speaker's facts."""
    out: list[Candidate] = []

    def ask(category: int, template: str, key: str, answer: str, evidence: Iterable[str]) -> None:
        out.append(Candidate(category, template, name, key, answer, tuple(evidence)))

    for key, template in VALUE_QUESTIONS.items():
        if not state.known(key):
            continue
        # The fact that set the current value: the last "first" or "change" of the key.
        fact = [f for f in facts[key] if f.action in ("first", "change")][-1]
        ask(SINGLE_HOP, template, key, fact.value, [fact.dia_id])
        if fact.date is not None and key == "city":
            ask(
                TEMPORAL,
                f"When did {{name}} move to {fact.value}?",
                key,
                fact.date.answer(),
                [fact.dia_id],
            )
        if fact.date is not None and key == "job":
            what = f"start working as {article(fact.value)}"
            ask(TEMPORAL, f"When did {{name}} {what}?", key, fact.date.answer(), [fact.dia_id])
        if key == "food":
            cuisine = vocab.cuisine(fact.value)
            options = [cuisine, rng.choice(sorted({c for _, c in vocab.foods} - {cuisine}))]
            rng.shuffle(options)
            template = f"Which restaurant would {{name}} prefer, {options[0]} or {options[1]}?"
            ask(OPEN_DOMAIN, template, key, cuisine, [fact.dia_id])

    _pet_questions(rng, name, state, facts["pets"], vocab, days, ask, out)
    _hobby_questions(rng, state, facts["hobbies"], vocab, ask)
    return out


def _pet_questions(rng, name, state, pet_facts, vocab, days, ask, out) -> None:
    """The questions about a speaker's pets: kind, names, count, adoption dates, a gift."""
    adoptions = [f for f in pet_facts if f.action != "repeat"]
    if adoptions:
        species, plural = state.species, vocab.plural(state.species)
        first, every = [adoptions[0].dia_id], [f.dia_id for f in adoptions]
        ask(SINGLE_HOP, "What kind of pet does {name} have?", "pets", species, first)
        if len(adoptions) == 1:
            template = f"What is the name of {{name}}'s {species}?"
            ask(SINGLE_HOP, template, "pets", adoptions[0].value, first)
        else:
            pet_names = join_items([f.value for f in adoptions])
            ask(MULTI_HOP, f"What are the names of {{name}}'s {plural}?", "pets", pet_names, every)
            count = number_word(len(adoptions))
            ask(MULTI_HOP, f"How many {plural} does {{name}} have?", "pets", count, every)
            as_of = _as_of(rng, name, adoptions, plural, days)
            if as_of is not None:
                out.append(as_of)
        for fact in adoptions:
            template = f"When did {{name}} adopt {fact.value}?"
            ask(TEMPORAL, template, "pets", fact.date.answer(), [fact.dia_id])
        others = [s for s, _ in SPECIES[: len(vocab.species)] if s != species]
        gift = f"{article(species)} toy"
        options = [gift, f"{article(rng.choice(others))} toy"]
        rng.shuffle(options)
        template = f"Which gift would suit {{name}} better, {options[0]} or {options[1]}?"
        ask(OPEN_DOMAIN, template, "pets", gift, first)


def _hobby_questions(rng, state, hobby_facts, vocab, ask) -> None:
    """The questions about a speaker's hobbies: which, and a venue they would enjoy."""
    taken = [f for f in hobby_facts if f.action != "repeat"]
    if len(taken) == 1:
        ask(
            SINGLE_HOP,
            "What hobby did {name} take up?",
            "hobbies",
            taken[0].value,
            [taken[0].dia_id],
        )
    elif taken:
        hobbies = join_items([f.value for f in taken])
        ask(
            MULTI_HOP,
            "What hobbies does {name} enjoy?",
            "hobbies",
            hobbies,
            [f.dia_id for f in taken],
        )
    if taken:
        fact = rng.choice(taken)
        venue = vocab.venue(fact.value)
        spare = [v for h, v in vocab.hobbies if h not in state.hobbies and v != venue]
        options = [venue, rng.choice(spare)]
        rng.shuffle(options)
        template = f"Which would {{name}} enjoy more, {options[0]} or {options[1]}?"
        ask(OPEN_DOMAIN, template, "hobbies", venue, [fact.dia_id])


def _in_order(dia_ids: Iterable[str]) -> tuple[str, ...]:
    """Sorts dia_ids by (session, turn), the order the evidence was said in."""
    return tuple(sorted(dia_ids, key=lambda d: tuple(int(x) for x in d[1:].split(":"))))


def _joint_candidates(
    speakers: tuple[str, str], states: dict[str, SpeakerState], facts: dict[str, dict]
) -> list[Candidate]:
    """Multi-hop questions that need both speakers' memories."""
    a, b = speakers
    out = []
    pets = {s: [f for f in facts[s]["pets"] if f.action != "repeat"] for s in speakers}
    if pets[a] and pets[b]:
        ids = _in_order(f.dia_id for f in pets[a] + pets[b])
        total = number_word(len(pets[a]) + len(pets[b]))
        question = f"How many pets do {a} and {b} have in total?"
        out.append(Candidate(MULTI_HOP, question, None, "pets", total, ids))
        if len(pets[a]) != len(pets[b]):
            more = a if len(pets[a]) > len(pets[b]) else b
            question = f"Who has more pets, {a} or {b}?"
            out.append(Candidate(MULTI_HOP, question, None, "pets", more, ids))
    shared = [h for h in states[a].hobbies if h in states[b].hobbies]
    if shared:
        ids = _in_order(
            f.dia_id
            for s in speakers
            for f in facts[s]["hobbies"]
            if f.action != "repeat" and f.value in shared
        )
        question = f"Which hobby do {a} and {b} both enjoy?"
        out.append(Candidate(MULTI_HOP, question, None, "hobbies", join_items(shared), ids))
    return out


def make_qa(
    rng: random.Random,
    story: list[list[Fact]],
    speakers: tuple[str, str],
    session_days: list[dt.date],
    config: SynthConfig,
    vocab: Vocab,
) -> list[dict[str, Any]]:
    """Builds a conversation's ``qa`` list.

    Categories 1-4 take turns (``PICK_ORDER``) until ``config.qa_per_conversation`` questions are
    picked or the candidates run out; then up to ``config.adversarial_per_conversation``
    category-5 questions follow, as in the real file where they come last.

    Returns:
      LoCoMo ``qa`` entries; category 5 entries have ``adversarial_answer`` and no ``answer``.
    """
    states = _final_states(story, speakers)
    facts: dict[str, dict[str, list[Fact]]] = {
        speaker: {key: [] for key in FACT_KEYS} for speaker in speakers
    }
    for fact in (fact for session in story for fact in session):
        facts[fact.speaker][fact.key].append(fact)
    candidates = [
        candidate
        for speaker in speakers
        for candidate in _speaker_candidates(
            rng, speaker, states[speaker], facts[speaker], vocab, session_days
        )
    ]
    candidates += _joint_candidates(speakers, states, facts)

    pools: dict[int, list[Candidate]] = {category: [] for category in PICK_ORDER}
    for candidate in candidates:
        pools[candidate.category].append(candidate)
    for pool in pools.values():
        rng.shuffle(pool)
    picked: list[Candidate] = []
    while len(picked) < config.qa_per_conversation and any(pools.values()):
        for category in PICK_ORDER:
            if pools[category] and len(picked) < config.qa_per_conversation:
                picked.append(pools[category].pop())

    # A question about one speaker becomes adversarial when asked of the other speaker, provided
    # that speaker never said anything on the topic, so "not mentioned" is the right reply.
    swappable = [
        candidate
        for candidate in candidates
        if candidate.name is not None
        and candidate.category != OPEN_DOMAIN
        and not facts[_other(speakers, candidate.name)][candidate.key]
    ]
    rng.shuffle(swappable)
    adversarial = [
        {
            "question": candidate.template.format(name=_other(speakers, candidate.name)),
            "evidence": list(candidate.evidence),
            "category": ADVERSARIAL,
            "adversarial_answer": candidate.answer,
        }
        for candidate in swappable[: config.adversarial_per_conversation]
    ]
    return [candidate.as_qa() for candidate in picked] + adversarial


def _other(speakers: tuple[str, str], name: str) -> str:
    return speakers[1] if name == speakers[0] else speakers[0]
