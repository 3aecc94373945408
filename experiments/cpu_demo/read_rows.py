"""Answer rows that can only be learned by reading: lists and values over random words.

Trained on the traces alone, the tiny Answer Agent writes the training prior instead of what its
memories say: asked for "Pepper, Luna and Toby" it answers "Luna, Luna and Luna", and names a
city or destination it was not shown. A reward through such a reader cannot tell a merged list
from a split one, or a deleted plan from a kept one. These rows keep the real templates,
renderer and formatter but fill every value with a random word of the corpus, so that the
answer can only be found in the prompt:

* list rows: the asked speaker's memory names a list ("Kalo has three cats: rope, dusk and
  tide." or "Kalo enjoys rope and dusk."), the question asks for it, the answer copies it whole;
* value rows: the asked speaker's memory holds a value ("Kalo is planning a trip to Rope.",
  "Kalo lives in Rope.", "Kalo works as a rope.", "Kalo plans to go to a rope."), the question
  asks for it ("Where is Kalo planning to travel?"), the answer copies it; for a plan, half of
  the time the memory is its cancellation or there is none on the topic, and the answer is
  "nowhere" or "nothing".

The other speaker's memories are random-word facts of the same kinds, so that the asked person's
memory must be told apart by name (a person-blind reader answers from either). The manager's
copy rows (``traces.manager_copy_rows``) do the same for writing memories.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from memr1.data.synthloco.dates import MONTHS
from memr1.data.synthloco.gold import join_items
from memr1.data.synthloco.qa import NO_PLAN
from memr1.data.synthloco.world import NUMBER_WORDS, SPECIES, article
from memr1.env.answer_io import format_answer_output, render_answer_input

# (key, memory template, question) of the value rows; {v} is the value, {a_v} it with "a"/"an".
VALUES = (
    ("trip", "{n} is planning a trip to {v}.", "Where is {n} planning to travel?"),
    ("event", "{n} plans to go to {a_v}.", "What event is {n} planning to go to?"),
    ("city", "{n} lives in {v}.", "Where does {n} live?"),
    ("job", "{n} works as {a_v}.", "What does {n} do for a living?"),
)
CANCELLED = {"trip": "{n} cancelled the trip to {v}.", "event": "{n} cancelled going to the {v}."}


def random_timestamp(rng: random.Random) -> str:
    """A session timestamp in LoCoMo's form ("9:05 am on 8 May, 2023")."""
    month = rng.choice(MONTHS)
    hour, minute, half = rng.randint(1, 12), rng.randint(0, 59), rng.choice(("am", "pm"))
    return f"{hour}:{minute:02d} {half} on {rng.randint(1, 28)} {month}, {rng.choice((2022, 2023))}"


def _list_row(rng: random.Random, name: str, words: Sequence[str]) -> tuple[str, str, str]:
    """(memory, question, answer) of a list row: pets or hobbies, two or three of them."""
    items = rng.sample(list(words), rng.randint(2, 3))
    if rng.random() < 0.5:
        noun = rng.choice(SPECIES)[1]
        memory = f"{name} has {NUMBER_WORDS[len(items)]} {noun}: {join_items(items)}."
        return memory, f"What are the names of {name}'s {noun}?", join_items(items)
    return (
        f"{name} enjoys {join_items(items)}.",
        f"What hobbies does {name} enjoy?",
        join_items(items),
    )


def _value_row(rng: random.Random, name: str, words: Sequence[str]) -> tuple[str | None, str, str]:
    """(memory or None, question, answer) of a value row."""
    key, memory, question = rng.choice(VALUES)
    value = rng.choice(words)
    answer = value
    if key in NO_PLAN and rng.random() < 0.5:
        answer = NO_PLAN[key]
        # The plan called off, or nothing on the topic.
        memory = CANCELLED[key] if rng.random() < 0.5 else None
    fields = dict(n=name, v=value, a_v=article(value))
    return (memory.format(**fields) if memory else None), question.format(n=name), answer


def _distractor(rng: random.Random, name: str, words: Sequence[str], kind: str) -> str:
    """A random-word fact about ``name``: a list ("list") or a held value ("value")."""
    if kind == "list":
        return _list_row(rng, name, words)[0]
    memory = rng.choice(VALUES)[1]
    value = rng.choice(words)
    return memory.format(n=name, v=value, a_v=article(value))


def answer_read_rows(
    words: Sequence[str], n_rows: int, k: int, seed: int, style: str
) -> list[dict[str, object]]:
    """``n_rows`` rows ``{messages, target}``, alternately list and value rows, each speaker
    showing ``k`` memories (the answerer's k_per_speaker).

    Raises:
      ValueError: fewer than two capitalised or three lower-case words, or ``k`` < 1.
    """
    capitals = [w for w in words if w[:1].isupper()]
    plain = [w for w in words if w.islower()]
    if len(capitals) < 2 or len(plain) < 3 or k < 1:
        raise ValueError(
            f"answer_read_rows: needs 2 capitalised and 3 lower-case words and k >= 1, got "
            f"{len(capitals)} capitalised, {len(plain)} lower-case, k={k}"
        )
    rng = random.Random(seed)
    rows = []
    for i in range(n_rows):
        asked, other = rng.sample(capitals, 2)
        values = capitals if rng.random() < 0.5 else plain
        kind = ("list", "value")[i % 2]
        if kind == "list":
            memory, question, answer = _list_row(rng, asked, plain)
        else:
            memory, question, answer = _value_row(rng, asked, values)
        # The asked person's other memories are of the other kind, so that only one answers.
        other_kind = "value" if kind == "list" else "list"
        own = [memory] if memory else []
        own += [_distractor(rng, asked, plain, other_kind) for _ in range(k - len(own))]
        rng.shuffle(own)
        theirs = [_distractor(rng, other, plain, rng.choice(("list", "value"))) for _ in range(k)]
        order = [(asked, own), (other, theirs)]
        rng.shuffle(order)
        memories = {n: [(random_timestamp(rng), text) for text in texts] for n, texts in order}
        rows.append(
            {
                "messages": render_answer_input(question, memories, distill=True, style=style),
                "target": format_answer_output([memory] if memory else [], answer),
            }
        )
    return rows
