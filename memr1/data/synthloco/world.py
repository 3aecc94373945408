"""The synthloco world: the generator's configuration, its presets and its closed vocabulary.

Every name, pet, city, job, hobby, food, event and destination a synthetic conversation can mention
comes from the fixed lists below. A config takes a prefix of each list (``num_cities=6`` uses the
first six cities), so the vocabulary of a preset is the same whatever the seed; that keeps a
word-level tokenizer trained on one seed valid for every other seed of the same preset.

The two presets are ``tiny`` (three conversations, for tests) and ``demo`` (70 conversations split
40/10/20, sized for the CPU demo in which few-million-parameter models learn to manage memory).
"""

from __future__ import annotations

import dataclasses
import re

# People. Names carry no gender anywhere in the generator: questions and facts always use the name
# itself ("Andrew's dogs"), never a pronoun, so the name list can be changed freely.
NAMES = (
    "Andrew", "Maria", "Jon", "Gina", "Caroline", "Melanie", "Tim", "Priya", "Sam", "Nadia",
    "Leo", "Hana", "Omar", "Julia", "Kevin", "Rosa", "Felix", "Ines", "Marcus", "Yuki",
)  # fmt: skip

# Pet species with their plurals, and the names pets get. Pet names never collide with people.
SPECIES = (
    ("dog", "dogs"), ("cat", "cats"), ("rabbit", "rabbits"), ("turtle", "turtles"),
    ("parrot", "parrots"), ("hamster", "hamsters"),
)  # fmt: skip
PET_NAMES = (
    "Toby", "Buddy", "Scout", "Luna", "Bella", "Milo", "Coco", "Daisy", "Oscar", "Rocky",
    "Pepper", "Ziggy", "Nala", "Biscuit", "Olive", "Shadow", "Mochi", "Peanut", "Maple", "Bruno",
)  # fmt: skip

# Where people live, where they plan trips to, and what they work as. Single words, so that an
# exact-match answer is one token long.
CITIES = (
    "Boston", "Denver", "Seattle", "Chicago", "Austin", "Portland", "Miami", "Atlanta",
    "Phoenix", "Dallas", "Detroit", "Nashville",
)  # fmt: skip
DESTINATIONS = (
    "Rome", "Paris", "Lisbon", "Tokyo", "London", "Madrid", "Berlin", "Prague", "Vienna",
    "Athens", "Dublin", "Oslo",
)  # fmt: skip
JOBS = (
    "nurse", "teacher", "chef", "engineer", "designer", "baker", "pilot", "lawyer", "accountant",
    "photographer", "mechanic", "librarian",
)  # fmt: skip

# Events people plan to go to; like trips, such plans change or get called off.
EVENTS = (
    "concert", "festival", "conference", "wedding", "workshop", "play", "fair", "gala",
)  # fmt: skip

# Hobbies, each with the outing it makes someone likely to enjoy. The open-domain questions ask the
# reader to infer a preference from a hobby ("Which would Andrew enjoy more, a national park or a
# bookstore?"), which no single turn states.
HOBBIES = (
    ("hiking", "a national park"), ("painting", "an art museum"), ("cooking", "a cooking class"),
    ("swimming", "a beach"), ("gardening", "a flower show"), ("cycling", "a bike race"),
    ("knitting", "a craft fair"), ("reading", "a bookstore"), ("dancing", "a dance show"),
    ("fishing", "a lake"), ("running", "a marathon"), ("baking", "a bakery"),
)  # fmt: skip

# Favourite foods with their cuisine, for the "which restaurant would X prefer" inference.
FOODS = (
    ("sushi", "Japanese"), ("pizza", "Italian"), ("tacos", "Mexican"), ("curry", "Indian"),
    ("dumplings", "Chinese"), ("paella", "Spanish"), ("ramen", "Japanese"), ("pasta", "Italian"),
    ("croissants", "French"), ("burritos", "Mexican"),
)  # fmt: skip

NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

# The fact keys: one memory per key per speaker in the gold bank (see gold.py).
LIST_KEYS = ("pets", "hobbies")
SINGLE_KEYS = ("city", "job", "food", "trip", "event")
# Single-valued keys that are plans: they can be called off (a DELETE in the gold bank).
PLAN_KEYS = ("trip", "event")
FACT_KEYS = LIST_KEYS + SINGLE_KEYS

Range = tuple[int, int]

# Files the generator writes besides one per split; a split may not take these names.
RESERVED_FILES = ("gold_ops", "metadata")


@dataclasses.dataclass(frozen=True)
class SynthConfig:
    """Sizes, vocabulary knobs and seed of one synthloco dataset.

    Attributes:
      seed: master seed; each conversation draws from its own stream derived from (seed, split,
        index), so adding conversations never changes the ones already there.
      splits: ``(split name, number of conversations)`` pairs, written one file per split.
      sessions: inclusive range of sessions per conversation.
      turns_per_session: inclusive range of turns per session; a session that needs more slots for
        its facts grows past the upper bound.
      facts_per_session: inclusive range of fact-bearing turns per session (both speakers together).
      gap_days: inclusive range of days between consecutive sessions; at least 3, so that "two days
        ago" always falls after the previous session and event dates stay in order.
      first_year, last_year: the years a conversation may start in.
      qa_per_conversation: at most this many questions of categories 1-4 per conversation.
      min_qa: a conversation with fewer candidate questions (categories 1-4) is redrawn.
      adversarial_per_conversation: at most this many category-5 questions per conversation.
      max_pets, max_hobbies: the longest a list-valued fact grows.
      max_changes: how often a single-valued fact (city, job, trip) may change per speaker.
      max_cancels: how often a speaker may call off a plan (trip, event) per key, counted apart
        from its changes; None counts a cancellation as one of the key's max_changes. A plan
        called off is gone from the gold bank, so the next plan of that key is a new fact and
        never needs the date arithmetic of a second change.
      cancel_weight: the planner's weight of calling a plan off, against 3.0 for a new fact,
        2.5 for another list item, 2.0 for a change and 1.0 for a repeat (events.py).
      change_questions: every value that changed or was called off gets its current-value
        question, citing that turn and picked before the others ("Where is Maria planning to
        travel?" -> "nowhere" once the trip is off), so that every change and cancellation has
        a question a stale memory answers wrongly (qa.py).
      cite_repeats: a question also cites the later turns that restate its answer (qa.py), so
        that repeats have linked questions as other facts do.
      names: the people speakers are drawn from (the built-in list unless replaced); capitalised
        single words that are not pet names.
      num_names ... num_events: how much of each vocabulary list is used.
    """

    seed: int = 0
    splits: tuple[tuple[str, int], ...] = (("train", 40), ("validation", 10), ("test", 20))
    sessions: Range = (6, 10)
    turns_per_session: Range = (10, 16)
    facts_per_session: Range = (3, 5)
    gap_days: Range = (3, 30)
    first_year: int = 2022
    last_year: int = 2023
    qa_per_conversation: int = 24
    min_qa: int = 15
    adversarial_per_conversation: int = 4
    max_pets: int = 3
    max_hobbies: int = 3
    max_changes: int = 2
    max_cancels: int | None = None
    cancel_weight: float = 3.0
    change_questions: bool = True
    cite_repeats: bool = True
    names: tuple[str, ...] = NAMES
    num_names: int = 16
    num_species: int = 4
    num_pet_names: int = 16
    num_cities: int = 10
    num_destinations: int = 10
    num_jobs: int = 10
    num_hobbies: int = 10
    num_foods: int = 8
    num_events: int = 6

    def validate(self) -> SynthConfig:
        """Returns the config unchanged, or raises ValueError naming the first bad field."""
        for name in ("sessions", "turns_per_session", "facts_per_session", "gap_days"):
            low, high = getattr(self, name)
            if not 1 <= low <= high:
                raise ValueError(f"SynthConfig.{name}: expected 1 <= low <= high, got {low, high}")
        if self.gap_days[0] < 3:
            raise ValueError("SynthConfig.gap_days: sessions must be at least 3 days apart")
        if self.first_year > self.last_year:
            raise ValueError("SynthConfig.first_year is after SynthConfig.last_year")
        if not self.splits or any(count < 0 for _, count in self.splits):
            raise ValueError(f"SynthConfig.splits: expected non-negative counts, got {self.splits}")
        for name, _ in self.splits:
            if not re.fullmatch(r"[a-z][a-z0-9_-]*", name) or name in RESERVED_FILES:
                raise ValueError(f"SynthConfig.splits: {name!r} cannot name a split file")
        if len({name for name, _ in self.splits}) != len(self.splits):
            raise ValueError(f"SynthConfig.splits: split names repeat in {self.splits}")
        if not 1 <= self.min_qa <= self.qa_per_conversation:
            raise ValueError("SynthConfig: expected 1 <= min_qa <= qa_per_conversation")
        if self.adversarial_per_conversation < 0:
            raise ValueError("SynthConfig.adversarial_per_conversation must not be negative")
        if not 1 <= self.max_pets < len(NUMBER_WORDS) or not 1 <= self.max_hobbies:
            raise ValueError("SynthConfig.max_pets and max_hobbies must be at least 1 (pets < 10)")
        if self.max_changes < 0 or (self.max_cancels is not None and self.max_cancels < 0):
            raise ValueError(
                f"SynthConfig.max_changes / max_cancels must not be negative, got "
                f"{self.max_changes} / {self.max_cancels}"
            )
        if not self.cancel_weight >= 0:
            raise ValueError(f"SynthConfig.cancel_weight: expected >= 0, got {self.cancel_weight}")
        for name in self.names:
            if not re.fullmatch(r"[A-Z][A-Za-z'-]*", name) or name in PET_NAMES:
                raise ValueError(f"SynthConfig.names: {name!r} is not a usable person name")
        if len(set(self.names)) != len(self.names):
            raise ValueError("SynthConfig.names: names repeat")
        limits = {
            "num_names": (self.names, 2),
            "num_species": (SPECIES, 2),
            "num_pet_names": (PET_NAMES, 2 * self.max_pets),
            "num_cities": (CITIES, 2),
            "num_destinations": (DESTINATIONS, 2),
            "num_jobs": (JOBS, 2),
            "num_hobbies": (HOBBIES, max(3, self.max_hobbies + 1)),
            "num_foods": (FOODS, 2),
            "num_events": (EVENTS, 2),
        }
        for name, (vocab, least) in limits.items():
            value = getattr(self, name)
            if not least <= value <= len(vocab):
                raise ValueError(f"SynthConfig.{name}: expected {least}..{len(vocab)}, got {value}")
        return self


@dataclasses.dataclass(frozen=True)
class Vocab:
    """The slices of the vocabulary lists that one config uses."""

    names: tuple[str, ...]
    species: tuple[tuple[str, str], ...]
    pet_names: tuple[str, ...]
    cities: tuple[str, ...]
    destinations: tuple[str, ...]
    jobs: tuple[str, ...]
    hobbies: tuple[tuple[str, str], ...]
    foods: tuple[tuple[str, str], ...]
    events: tuple[str, ...]

    @classmethod
    def from_config(cls, config: SynthConfig) -> Vocab:
        """Takes the first ``num_*`` entries of each list."""
        return cls(
            names=tuple(config.names[: config.num_names]),
            species=SPECIES[: config.num_species],
            pet_names=PET_NAMES[: config.num_pet_names],
            cities=CITIES[: config.num_cities],
            destinations=DESTINATIONS[: config.num_destinations],
            jobs=JOBS[: config.num_jobs],
            hobbies=HOBBIES[: config.num_hobbies],
            foods=FOODS[: config.num_foods],
            events=EVENTS[: config.num_events],
        )

    def plural(self, species: str) -> str:
        """Returns the plural of a pet species."""
        return dict(SPECIES)[species]

    def venue(self, hobby: str) -> str:
        """Returns the outing a person with this hobby would enjoy."""
        return dict(HOBBIES)[hobby]

    def cuisine(self, food: str) -> str:
        """Returns the cuisine a favourite food belongs to."""
        return dict(FOODS)[food]


def number_word(count: int) -> str:
    """Spells a small count ("two"), the form every count answer takes."""
    return NUMBER_WORDS[count]


def article(noun: str) -> str:
    """Returns the noun with "a" or "an" in front, chosen by its first letter."""
    return f"an {noun}" if noun[0].lower() in "aeiou" else f"a {noun}"


PRESETS: dict[str, SynthConfig] = {
    # Three conversations of four short sessions: enough for every operation and question category
    # to appear, small enough to generate in milliseconds inside a unit test.
    "tiny": SynthConfig(
        splits=(("train", 1), ("validation", 1), ("test", 1)),
        sessions=(4, 4),
        turns_per_session=(8, 10),
        facts_per_session=(3, 4),
        qa_per_conversation=16,
        min_qa=10,
        adversarial_per_conversation=3,
        num_names=6,
        num_species=3,
        num_pet_names=8,
        num_cities=5,
        num_destinations=5,
        num_jobs=5,
        num_hobbies=6,
        num_foods=5,
        num_events=4,
    ),
    "demo": SynthConfig(),
}


def get_preset(name: str, seed: int = 0) -> SynthConfig:
    """Returns the named preset with ``seed`` set; raises ValueError for an unknown name."""
    if name not in PRESETS:
        raise ValueError(f"unknown synthloco preset {name!r}; expected one of {sorted(PRESETS)}")
    return dataclasses.replace(PRESETS[name], seed=seed).validate()
