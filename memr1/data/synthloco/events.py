"""How facts evolve over a synthetic conversation: the story, before any text is written.

A story is a list of :class:`Fact` s, each stated by one speaker in one turn. A fact belongs to a
fact key (pets, hobbies, city, job, food, trip, event) and performs one action on that speaker's
state:

  key       first            another / change                cancel         repeat
  pets      adopt a pet      adopt another of the species    -              mention a pet again
  hobbies   take up a hobby  take up another one             -              mention one again
  city      say where one    move elsewhere                  -              mention the city
            lives or moved
  job       say one's job    start a new job                 -              mention the job
  food      favourite food   -                               -              mention it again
  trip      plan a trip      change the destination          call it off    mention the plan
  event     plan to go to    go to another event instead     call it off    mention the plan
            an event

The actions are chosen so that the gold memory operations (gold.py) cover all four kinds: "first"
is an ADD, "another"/"change" an UPDATE, "cancel" a DELETE and "repeat" a NOOP. The same
:class:`SpeakerState` machine is used to plan the story and, later, to derive the gold memories.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random

from memr1.data.synthloco import dates
from memr1.data.synthloco.world import FACT_KEYS, PLAN_KEYS, SynthConfig, Vocab

# How strongly the planner prefers each kind of action when several are possible. New information
# is favoured over repeats so that stories keep moving. A cancellation's weight is the config's
# (SynthConfig.cancel_weight): only plans can be called off, so they stay rarer than changes.
ACTION_WEIGHTS = {"first": 3.0, "another": 2.5, "change": 2.0, "repeat": 1.0}

# The chance that a speaker's profile includes each fact key. Below one, so that a key is often
# missing for one speaker: adversarial questions need facts the other speaker never mentions.
KEY_PROBABILITY = 0.75
MIN_KEYS = 3


@dataclasses.dataclass
class Fact:
    """One fact stated in one turn.

    Attributes:
      session: 1-based session in which the fact is stated.
      speaker: who states it (always about themselves).
      key: the fact key (see the module docstring).
      action: "first", "another", "change", "cancel" or "repeat".
      value: the item the turn names: a pet's name, a hobby, a city, a job, a food, a destination.
      species: for pets, the species ("dog").
      old: for a change, the value it replaces; for a cancel, the destination called off.
      when: the relative time expression the turn uses ("yesterday"), or None if undated.
      date: ``when`` resolved against the session date.
      dia_id: the turn that states the fact, filled in when the session is rendered.
    """

    session: int
    speaker: str
    key: str
    action: str
    value: str
    species: str | None = None
    old: str | None = None
    when: str | None = None
    date: dates.EventDate | None = None
    dia_id: str = ""


@dataclasses.dataclass
class SpeakerState:
    """What is true of one speaker after some facts.

    Attributes:
      species: the species of the speaker's pets (one species per speaker keeps merges simple).
      pets: ``(name, adoption date)`` in adoption order.
      hobbies: hobbies in the order they were taken up.
      values: current value of each single-valued key (city, job, food, trip, event), or None.
      dates: the date attached to the current single value, when the turn gave one.
      changes: how often each single-valued key has changed (and been cancelled, unless
        cancellations are counted apart).
      cancels: how often each plan key has been called off.
    """

    species: str
    pets: list[tuple[str, dates.EventDate]] = dataclasses.field(default_factory=list)
    hobbies: list[str] = dataclasses.field(default_factory=list)
    values: dict[str, str | None] = dataclasses.field(default_factory=dict)
    dates: dict[str, dates.EventDate | None] = dataclasses.field(default_factory=dict)
    changes: dict[str, int] = dataclasses.field(default_factory=dict)
    cancels: dict[str, int] = dataclasses.field(default_factory=dict)

    def known(self, key: str) -> bool:
        """Whether the speaker currently has something stored under ``key``."""
        if key == "pets":
            return bool(self.pets)
        if key == "hobbies":
            return bool(self.hobbies)
        return self.values.get(key) is not None

    def apply(self, fact: Fact) -> None:
        """Updates the state with a fact; raises ValueError for an action the state forbids."""
        if fact.action == "first" and self.known(fact.key):
            raise ValueError(f"{fact.speaker}: 'first' {fact.key} fact while one is known")
        if fact.action in ("another", "change", "cancel", "repeat") and not self.known(fact.key):
            raise ValueError(f"{fact.speaker}: {fact.action!r} {fact.key} fact with nothing known")
        if fact.action == "repeat":
            return
        if fact.key == "pets":
            self.pets.append((fact.value, fact.date))
        elif fact.key == "hobbies":
            self.hobbies.append(fact.value)
        elif fact.action == "cancel":
            self.values[fact.key] = None
            self.dates[fact.key] = None
            self.cancels[fact.key] = self.cancels.get(fact.key, 0) + 1
        else:
            self.values[fact.key] = fact.value
            self.dates[fact.key] = fact.date
            if fact.action == "change":
                self.changes[fact.key] = self.changes.get(fact.key, 0) + 1


def _actions(state: SpeakerState, key: str, config: SynthConfig) -> list[str]:
    """Lists the actions a speaker may take on ``key`` next."""
    if not state.known(key):
        return ["first"]
    actions = ["repeat"]
    if key == "pets" and len(state.pets) < config.max_pets:
        actions.append("another")
    elif key == "hobbies" and len(state.hobbies) < config.max_hobbies:
        actions.append("another")
    elif key in ("city", "job", *PLAN_KEYS):
        changes, cancels = state.changes.get(key, 0), state.cancels.get(key, 0)
        if config.max_cancels is None:  # a cancellation is one of the key's changes
            can_change = can_cancel = changes + cancels < config.max_changes
        else:
            can_change, can_cancel = changes < config.max_changes, cancels < config.max_cancels
        if can_change:
            actions.append("change")
        if can_cancel and key in PLAN_KEYS:
            actions.append("cancel")
    return actions


def _when(rng: random.Random, key: str, action: str) -> str | None:
    """Picks the relative time expression of a dated fact, or None for an undated one.

    Only the first fact of a key may reach back a month or a year: every later fact falls between
    the previous session and this one, which keeps each key's events in chronological order.
    """
    if action == "repeat":
        return None
    if key == "pets":
        return rng.choice(dates.EXPRESSIONS if action == "first" else tuple(dates.DAY_OFFSETS))
    if key in ("city", "job"):
        if action == "first":
            return rng.choice((None, None, dates.MONTH_EXPRESSION, dates.YEAR_EXPRESSION))
        if action == "change":
            return rng.choice(tuple(dates.DAY_OFFSETS))
    return None


def _make_fact(
    rng: random.Random,
    session: int,
    day: dt.date,
    speaker: str,
    key: str,
    action: str,
    state: SpeakerState,
    vocab: Vocab,
    taken_pet_names: set[str],
) -> Fact:
    """Draws the concrete values of one action and returns the fact (state not yet updated)."""
    fact = Fact(session=session, speaker=speaker, key=key, action=action, value="")
    if key == "pets":
        fact.species = state.species
        if action == "repeat":
            fact.value = rng.choice(state.pets)[0]
        else:
            fact.value = rng.choice([n for n in vocab.pet_names if n not in taken_pet_names])
            taken_pet_names.add(fact.value)
    elif key == "hobbies":
        if action == "repeat":
            fact.value = rng.choice(state.hobbies)
        else:
            fact.value = rng.choice([h for h, _ in vocab.hobbies if h not in state.hobbies])
    else:
        current = state.values.get(key)
        pool = {
            "city": vocab.cities,
            "job": vocab.jobs,
            "food": [food for food, _ in vocab.foods],
            "trip": vocab.destinations,
            "event": vocab.events,
        }[key]
        if action in ("repeat", "cancel"):
            fact.value = current
            fact.old = current if action == "cancel" else None
        else:
            fact.value = rng.choice([item for item in pool if item != current])
            fact.old = current if action == "change" else None
    fact.when = _when(rng, key, action)
    if fact.when is not None:
        fact.date = dates.resolve(fact.when, day)
    return fact


def draw_profiles(
    rng: random.Random, speakers: tuple[str, str], vocab: Vocab
) -> dict[str, tuple[str, ...]]:
    """Chooses which fact keys each speaker will ever talk about (at least ``MIN_KEYS`` each)."""
    profiles = {}
    for speaker in speakers:
        keys = [key for key in FACT_KEYS if rng.random() < KEY_PROBABILITY]
        missing = [key for key in FACT_KEYS if key not in keys]
        rng.shuffle(missing)
        keys += missing[: max(0, MIN_KEYS - len(keys))]
        profiles[speaker] = tuple(key for key in FACT_KEYS if key in keys)
    return profiles


def plan_story(
    rng: random.Random,
    speakers: tuple[str, str],
    session_days: list[dt.date],
    config: SynthConfig,
    vocab: Vocab,
) -> list[list[Fact]]:
    """Plans the facts of every session.

    Returns:
      One list of facts per session, in the order they will be stated. Within a session a speaker
      acts on each key at most once, so two facts of one turn pair never contradict each other.
    """
    profiles = draw_profiles(rng, speakers, vocab)
    states = {speaker: SpeakerState(species=rng.choice(vocab.species)[0]) for speaker in speakers}
    taken_pet_names: set[str] = set()
    action_weights = {**ACTION_WEIGHTS, "cancel": config.cancel_weight}
    story = []
    for session, day in enumerate(session_days, start=1):
        facts: list[Fact] = []
        used: set[tuple[str, str]] = set()
        for _ in range(rng.randint(*config.facts_per_session)):
            options = [
                (speaker, key, action)
                for speaker in speakers
                for key in profiles[speaker]
                if (speaker, key) not in used
                for action in _actions(states[speaker], key, config)
            ]
            if not options:
                break
            weights = [action_weights[action] for _, _, action in options]
            speaker, key, action = rng.choices(options, weights=weights)[0]
            fact = _make_fact(
                rng, session, day, speaker, key, action, states[speaker], vocab, taken_pet_names
            )
            states[speaker].apply(fact)
            used.add((speaker, key))
            facts.append(fact)
        story.append(facts)
    return story
