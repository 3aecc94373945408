"""Reading synthloco's sentences back into structure: facts, the demo teachers' memories, questions.

The rule-based teachers of the demo need to know what a fact or a memory is about (whose pets,
which city) and what a question asks. Every sentence they meet comes from a closed set of
templates: the observation sentences of ``memr1.data.synthloco.templates`` (which the manager
teacher stores as they are), the two merged forms the manager teacher writes for list-valued facts
(``merged_pets`` and ``merged_hobbies``), and the question templates of
``memr1.data.synthloco.qa``. So a handful of regular expressions read all of them; a sentence
that matches none is reported as unknown (None) rather than guessed at.
"""

from __future__ import annotations

import dataclasses
import re

from memr1.data.synthloco.gold import join_items
from memr1.data.synthloco.templates import OBSERVATIONS
from memr1.data.synthloco.world import NUMBER_WORDS, SPECIES, article

NAME = r"(?P<name>[A-Z][\w'-]*)"
WORD = r"[\w'-]+"
# The relative time expressions synthloco's observations use (memr1.data.synthloco.dates).
WHEN = r"(?P<when>today|yesterday|two days ago|last month|last year)"
ITEMS = r"(?P<items>[\w'-]+(?:(?:, | and )[\w'-]+)*)"
PLURAL_OF = dict(SPECIES)
SINGULAR_OF = {plural: single for single, plural in SPECIES}


@dataclasses.dataclass(frozen=True)
class Sentence:
    """What one fact or memory sentence states.

    Attributes:
      name: the person it is about.
      key: the fact key (pets, hobbies, city, job, food, trip, event).
      kind: "state" (a value holds: lives in, works as, plans, has), "item" (one more item of a
        list: another pet or hobby), "change" (a value replaced by another), "cancel" (a plan
        called off) or "merged" (a list memory naming every item).
      items: the values it names, in order (one for everything but merged lists).
      old: the replaced value of a change.
      species: for pets, the singular species.
      when: the relative time expression, if the sentence has one.
    """

    name: str
    key: str
    kind: str
    items: tuple[str, ...]
    old: str | None = None
    species: str | None = None
    when: str | None = None

    @property
    def value(self) -> str:
        """The sentence's (last) value: the current city, the newest pet, the cancelled trip."""
        return self.items[-1]


def _a(noun: str) -> str:
    return rf"an? (?P<{noun}>{WORD})"


# (pattern, key, kind): tried in order, first full match wins. Patterns with more context come
# before the shorter ones they overlap with ("moved from X to Y" before "moved to Y").
_PATTERNS = [
    (rf"{NAME} has (?P<count>\w+) (?P<plural>{WORD}): {ITEMS}\.", "pets", "merged"),
    (
        rf"{NAME} adopted another (?P<species>{WORD}) named (?P<value>{WORD}) {WHEN}\.",
        "pets",
        "item",
    ),
    (rf"{NAME} adopted {_a('species')} named (?P<value>{WORD}) {WHEN}\.", "pets", "state"),
    (rf"{NAME} has {_a('species')} named (?P<value>{WORD})\.", "pets", "state"),
    (rf"{NAME} took up (?P<value>{WORD}) as another hobby\.", "hobbies", "item"),
    (rf"{NAME} took up (?P<value>{WORD}) as a hobby\.", "hobbies", "state"),
    (rf"{NAME} enjoys {ITEMS}\.", "hobbies", "merged"),
    (rf"{NAME} moved from (?P<old>{WORD}) to (?P<value>{WORD}) {WHEN}\.", "city", "change"),
    (rf"{NAME} moved to (?P<value>{WORD}) {WHEN}\.", "city", "state"),
    (rf"{NAME} lives in (?P<value>{WORD})\.", "city", "state"),
    (
        rf"{NAME} left the job as {_a('old')} and started working as {_a('value')} {WHEN}\.",
        "job",
        "change",
    ),
    (rf"{NAME} started working as {_a('value')} {WHEN}\.", "job", "state"),
    (rf"{NAME} works as {_a('value')}\.", "job", "state"),
    (rf"{NAME}'s favorite food is (?P<value>{WORD})\.", "food", "state"),
    (
        rf"{NAME} is now planning a trip to (?P<value>{WORD}) instead of (?P<old>{WORD})\.",
        "trip",
        "change",
    ),
    (rf"{NAME} cancelled the trip to (?P<value>{WORD})\.", "trip", "cancel"),
    (rf"{NAME} is planning a trip to (?P<value>{WORD})\.", "trip", "state"),
    (
        rf"{NAME} now plans to go to {_a('value')} instead of the (?P<old>{WORD})\.",
        "event",
        "change",
    ),
    (rf"{NAME} cancelled going to the (?P<value>{WORD})\.", "event", "cancel"),
    (rf"{NAME} plans to go to {_a('value')}\.", "event", "state"),
]
_COMPILED = [(re.compile(p), key, kind) for p, key, kind in _PATTERNS]


def split_items(text: str) -> tuple[str, ...]:
    """ "a, b and c" -> ("a", "b", "c"): the inverse of synthloco's ``join_items``."""
    head, _, last = text.rpartition(" and ")
    return (*[x for x in head.split(", ") if x], last) if head else (last,)


def parse_sentence(text: str) -> Sentence | None:
    """Reads a fact or memory sentence; None when it is none of the known forms."""
    text = " ".join(str(text).split())
    for pattern, key, kind in _COMPILED:
        m = pattern.fullmatch(text)
        if m is None:
            continue
        groups = m.groupdict()
        if kind == "merged":
            items = split_items(groups["items"])
            species = SINGULAR_OF.get(groups.get("plural") or "")
            if key == "pets" and (species is None or groups["count"] not in NUMBER_WORDS):
                continue
            return Sentence(groups["name"], key, kind, items, species=species)
        return Sentence(
            name=groups["name"],
            key=key,
            kind=kind,
            items=(groups["value"],),
            old=groups.get("old"),
            species=groups.get("species"),
            when=groups.get("when"),
        )
    return None


def merged_pets(name: str, species: str, pets: tuple[str, ...]) -> str:
    """The manager teacher's merged pet memory: "Andrew has two dogs: Toby and Buddy." """
    count = len(pets)
    noun = species if count == 1 else PLURAL_OF.get(species, species + "s")
    return f"{name} has {NUMBER_WORDS[min(count, 9)]} {noun}: {join_items(list(pets))}."


def merged_hobbies(name: str, hobbies: tuple[str, ...]) -> str:
    """The manager teacher's merged hobby memory: "Andrew enjoys hiking and painting." """
    return f"{name} enjoys {join_items(list(hobbies))}."


def current_form(change: Sentence) -> str:
    """A changed value's memory as it holds now: the world's own sentence for the new value,
    with its date and without the old value ("Andrew moved from Boston to Seattle yesterday."
    -> "Andrew moved to Seattle yesterday."; "... planning a trip to Rome instead of Oslo." ->
    "... planning a trip to Rome."). The teacher's UPDATE of a change writes it, so that the
    merged memory no longer names the stale value a question about the current one would read.
    """
    if change.kind != "change":
        raise ValueError(f"current_form: {change} is not a change")
    template = OBSERVATIONS.get((change.key, "first", change.when is not None))
    if template is None:
        raise ValueError(f"current_form: synthloco has no sentence for {change.key!r}")
    value = change.value
    return template.format(name=change.name, value=value, a_value=article(value), when=change.when)


@dataclasses.dataclass(frozen=True)
class Question:
    """What a synthloco question asks.

    Attributes:
      kind: one of the keys of ``_QUESTIONS`` (e.g. "city", "pet_names", "joint_total").
      key: the fact key whose memories answer it.
      names: the person asked about (two for the joint questions).
      target: the item the question names ("Denver" in "When did X move to Denver?").
      options: the two choices of an open-domain question.
      month: "September 2023" for an as-of question.
    """

    kind: str
    key: str
    names: tuple[str, ...]
    target: str | None = None
    options: tuple[str, ...] = ()
    month: str | None = None


OPTION = r"(?:an? )?[\w' -]+?"
_QUESTIONS = [
    ("city", "city", rf"Where does {NAME} live\?"),
    ("job", "job", rf"What does {NAME} do for a living\?"),
    ("food", "food", rf"What is {NAME}'s favorite food\?"),
    ("trip", "trip", rf"Where is {NAME} planning to travel\?"),
    ("event", "event", rf"What event is {NAME} planning to go to\?"),
    ("city_date", "city", rf"When did {NAME} move to (?P<target>{WORD})\?"),
    ("job_date", "job", rf"When did {NAME} start working as an? (?P<target>{WORD})\?"),
    ("pet_date", "pets", rf"When did {NAME} adopt (?P<target>{WORD})\?"),
    ("species", "pets", rf"What kind of pet does {NAME} have\?"),
    ("pet_name", "pets", rf"What is the name of {NAME}'s (?P<target>{WORD})\?"),
    ("pet_names", "pets", rf"What are the names of {NAME}'s (?P<target>{WORD})\?"),
    ("pet_count", "pets", rf"How many (?P<target>{WORD}) does {NAME} have\?"),
    (
        "pet_count_asof",
        "pets",
        rf"How many (?P<target>{WORD}) did {NAME} have as of (?P<month>\w+ \d+)\?",
    ),
    ("hobby", "hobbies", rf"What hobby did {NAME} take up\?"),
    ("hobby_list", "hobbies", rf"What hobbies does {NAME} enjoy\?"),
    (
        "cuisine",
        "food",
        rf"Which restaurant would {NAME} prefer, (?P<a>{OPTION}) or (?P<b>{OPTION})\?",
    ),
    (
        "gift",
        "pets",
        rf"Which gift would suit {NAME} better, (?P<a>{OPTION}) or (?P<b>{OPTION})\?",
    ),
    ("venue", "hobbies", rf"Which would {NAME} enjoy more, (?P<a>{OPTION}) or (?P<b>{OPTION})\?"),
    ("joint_total", "pets", r"How many pets do (?P<n1>\w+) and (?P<n2>\w+) have in total\?"),
    ("joint_more", "pets", r"Who has more pets, (?P<n1>\w+) or (?P<n2>\w+)\?"),
    ("joint_hobby", "hobbies", r"Which hobby do (?P<n1>\w+) and (?P<n2>\w+) both enjoy\?"),
]
_QUESTIONS_COMPILED = [(kind, key, re.compile(p)) for kind, key, p in _QUESTIONS]


def parse_question(text: str) -> Question | None:
    """Reads a synthloco question; None for one of another form."""
    text = " ".join(str(text).split())
    for kind, key, pattern in _QUESTIONS_COMPILED:
        m = pattern.fullmatch(text)
        if m is None:
            continue
        g = m.groupdict()
        names = (g["n1"], g["n2"]) if "n1" in g else (g["name"],)
        options = (g["a"], g["b"]) if "a" in g else ()
        return Question(kind, key, names, g.get("target"), options, g.get("month"))
    return None
