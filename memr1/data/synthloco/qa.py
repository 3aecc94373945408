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
  changes        the current value of every city, job, trip and event that changed or was called
                 off, picked first, citing the turn that changed it (single-hop; a plan called off
                 answers "nowhere" or "nothing": "Where is Maria planning to travel?" -> "nowhere")
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
      change: the question asks for a value as a change or cancellation left it, citing that
        turn (picked first with ``SynthConfig.change_questions``).
    """

    category: int
    template: str
    name: str | None
    key: str
    answer: str
    evidence: tuple[str, ...]
    change: bool = False

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

# What a plan question answers once the plan is called off and no other is made.
NO_PLAN = {"trip": "nowhere", "event": "nothing"}


def _position(dia_id: str) -> tuple[int, ...]:
    """(session, turn) of a dia_id, the order in which turns were said."""
    return tuple(int(x) for x in dia_id[1:].split(":"))


@dataclasses.dataclass
class _Asker:
    """Collects one speaker's questions.

    With ``cite_repeats``, a question whose answer a later turn restates (a repeat: "My dog Buddy
    says hi" for "What is the name of Andrew's dog?") cites that turn too, as a reader of the
    conversation would; date and count questions do not (a repeat gives no date, and one pet).
    """

    name: str
    facts: dict[str, list[Fact]]
    cite_repeats: bool
    out: list[Candidate] = dataclasses.field(default_factory=list)

    def __call__(
        self,
        category: int,
        template: str,
        key: str,
        answer: str,
        evidence: list[str],
        restated: Iterable[str] = (),
        change: bool = False,
    ) -> None:
        wanted = set(restated) if self.cite_repeats else set()
        after = _position(evidence[0])
        evidence = evidence + [
            f.dia_id
            for f in self.facts[key]
            if f.action == "repeat" and f.value in wanted and _position(f.dia_id) > after
        ]
        candidate = Candidate(
            category, template, self.name, key, answer, _in_order(evidence), change
        )
        self.out.append(candidate)


def _value_questions(ask: _Asker, rng: random.Random, vocab: Vocab, change_questions: bool) -> None:
    """The single-valued keys' questions: current value, when it was set, a cuisine."""
    for key, template in VALUE_QUESTIONS.items():
        # The fact that settled the key: the last "first", "change" or "cancel" of it.
        settled = [f for f in ask.facts[key] if f.action in ("first", "change", "cancel")]
        if not settled or (settled[-1].action == "cancel" and not change_questions):
            continue
        fact = settled[-1]
        if fact.action == "cancel":
            ask(SINGLE_HOP, template, key, NO_PLAN[key], [fact.dia_id], change=True)
            continue
        change = change_questions and fact.action == "change"
        ask(SINGLE_HOP, template, key, fact.value, [fact.dia_id], [fact.value], change=change)
        when = None if fact.date is None else fact.date.answer()
        if when is not None and key == "city":
            ask(TEMPORAL, f"When did {{name}} move to {fact.value}?", key, when, [fact.dia_id])
        if when is not None and key == "job":
            what = f"start working as {article(fact.value)}"
            ask(TEMPORAL, f"When did {{name}} {what}?", key, when, [fact.dia_id])
        if key == "food":
            cuisine = vocab.cuisine(fact.value)
            options = [cuisine, rng.choice(sorted({c for _, c in vocab.foods} - {cuisine}))]
            rng.shuffle(options)
            template = f"Which restaurant would {{name}} prefer, {options[0]} or {options[1]}?"
            ask(OPEN_DOMAIN, template, key, cuisine, [fact.dia_id], [fact.value])


def _pet_questions(
    ask: _Asker, rng: random.Random, state: SpeakerState, vocab: Vocab, days: list[dt.date]
) -> None:
    """Species, names, counts (now and as of a month), adoption dates, a fitting gift."""
    adoptions = [f for f in ask.facts["pets"] if f.action != "repeat"]
    if not adoptions:
        return
    species, plural = state.species, vocab.plural(state.species)
    first, every = [adoptions[0].dia_id], [f.dia_id for f in adoptions]
    pets = [f.value for f in adoptions]
    ask(SINGLE_HOP, "What kind of pet does {name} have?", "pets", species, first, pets)
    if len(adoptions) == 1:
        template = f"What is the name of {{name}}'s {species}?"
        ask(SINGLE_HOP, template, "pets", adoptions[0].value, first, pets)
    else:
        template = f"What are the names of {{name}}'s {plural}?"
        ask(MULTI_HOP, template, "pets", join_items(pets), every, pets)
        count = number_word(len(adoptions))
        ask(MULTI_HOP, f"How many {plural} does {{name}} have?", "pets", count, every)
        as_of = _as_of(rng, ask.name, adoptions, plural, days)
        if as_of is not None:
            ask.out.append(as_of)
    for fact in adoptions:
        template = f"When did {{name}} adopt {fact.value}?"
        ask(TEMPORAL, template, "pets", fact.date.answer(), [fact.dia_id])
    others = [s for s, _ in SPECIES[: len(vocab.species)] if s != species]
    gift = f"{article(species)} toy"
    options = [gift, f"{article(rng.choice(others))} toy"]
    rng.shuffle(options)
    template = f"Which gift would suit {{name}} better, {options[0]} or {options[1]}?"
    ask(OPEN_DOMAIN, template, "pets", gift, first, pets)


def _hobby_questions(ask: _Asker, rng: random.Random, state: SpeakerState, vocab: Vocab) -> None:
    """The hobby or the list of them, and an outing one of them suggests."""
    facts = ask.facts
    taken = [f for f in facts["hobbies"] if f.action != "repeat"]
    hobbies = [f.value for f in taken]
    if len(taken) == 1:
        template = "What hobby did {name} take up?"
        ask(SINGLE_HOP, template, "hobbies", hobbies[0], [taken[0].dia_id], hobbies)
    elif taken:
        every = [f.dia_id for f in taken]
        template = "What hobbies does {name} enjoy?"
        ask(MULTI_HOP, template, "hobbies", join_items(hobbies), every, hobbies)
    if taken:
        fact = rng.choice(taken)
        venue = vocab.venue(fact.value)
        spare = [v for h, v in vocab.hobbies if h not in state.hobbies and v != venue]
        options = [venue, rng.choice(spare)]
        rng.shuffle(options)
        template = f"Which would {{name}} enjoy more, {options[0]} or {options[1]}?"
        ask(OPEN_DOMAIN, template, "hobbies", venue, [fact.dia_id], [fact.value])


def _speaker_candidates(
    rng: random.Random,
    name: str,
    state: SpeakerState,
    facts: dict[str, list[Fact]],
    vocab: Vocab,
    days: list[dt.date],
    cite_repeats: bool = True,
    change_questions: bool = True,
) -> list[Candidate]:
    """Every question about one speaker's facts (see ``_Asker`` for ``cite_repeats``)."""
    ask = _Asker(name, facts, cite_repeats)
    _value_questions(ask, rng, vocab, change_questions)
    _pet_questions(ask, rng, state, vocab, days)
    _hobby_questions(ask, rng, state, vocab)
    return ask.out


def _in_order(dia_ids: Iterable[str]) -> tuple[str, ...]:
    """Sorts dia_ids by (session, turn), the order the evidence was said in."""
    return tuple(sorted(dia_ids, key=_position))


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

    With ``config.change_questions``, the questions about a value as a change or a cancellation
    left it come first, so that every such turn has one. Then categories 1-4 take turns
    (``PICK_ORDER``) until ``config.qa_per_conversation`` questions are picked or the candidates
    run out; then up to ``config.adversarial_per_conversation`` category-5 questions follow, as
    in the real file where they come last.

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
            rng,
            speaker,
            states[speaker],
            facts[speaker],
            vocab,
            session_days,
            config.cite_repeats,
            config.change_questions,
        )
    ]
    candidates += _joint_candidates(speakers, states, facts)

    picked = [c for c in candidates if c.change][: config.qa_per_conversation]
    pools: dict[int, list[Candidate]] = {category: [] for category in PICK_ORDER}
    for candidate in candidates:
        if not candidate.change:
            pools[candidate.category].append(candidate)
    for pool in pools.values():
        rng.shuffle(pool)
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
        and candidate.answer not in NO_PLAN.values()
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
