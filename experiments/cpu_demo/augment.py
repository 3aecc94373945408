"""Entity renaming for the warm start's traces: it makes copying the only way to be right.

A tiny model trained for a few minutes on 32 conversations learns the prior of its training
names faster than it learns to copy: asked to store "Andrew's favorite food is dumplings." it
writes "Jon's favorite food is pizza." (Jon and Nadia are the most frequent speakers of the
train split). Renaming the entities of a trace row consistently, prompt and target alike, with a
fresh random permutation per row keeps every row correct while making any name prior useless, so
the gradient goes into attending to the prompt (induction-style copying) instead.

Only pure identifiers are permuted, each within its own list: people, pet names, home cities and
trip destinations. Foods, hobbies, jobs and events are left alone: their answers are derived
(cuisine, venue), their articles differ ("a nurse" / "an engineer") or their words occur inside
other phrases ("fair" in "a craft fair").
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from memr1.data.synthloco.world import SynthConfig, Vocab
from memr1.tuples.schema import AnswerTuple


def entity_lists(synth: SynthConfig) -> tuple[tuple[str, ...], ...]:
    """The permutable lists of a synthloco world (people, pet names, cities, destinations)."""
    vocab = Vocab.from_config(synth)
    return (vocab.names, vocab.pet_names, vocab.cities, vocab.destinations)


def random_renaming(lists: Sequence[Sequence[str]], rng: random.Random) -> dict[str, str]:
    """A word -> word mapping: a random permutation within each list."""
    mapping: dict[str, str] = {}
    for words in lists:
        shuffled = list(words)
        rng.shuffle(shuffled)
        mapping.update(zip(words, shuffled))
    return mapping


def rename(text: str, mapping: Mapping[str, str]) -> str:
    """Replaces every whole-word occurrence of a mapped word, all at once (no chains)."""
    if not mapping:
        return text
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(mapping, key=len)[::-1])) + r")\b")
    return pattern.sub(lambda m: mapping[m.group(1)], text)


def rename_row(row: Mapping[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    """A trace row ({messages, target}) with the same renaming applied to every text in it."""
    messages = [{**m, "content": rename(m["content"], mapping)} for m in row["messages"]]
    return {"messages": messages, "target": rename(row["target"], mapping)}


def augment_rows(
    rows: Sequence[Mapping[str, Any]], lists: Sequence[Sequence[str]], fraction: float, seed: int
) -> list[dict[str, Any]]:
    """``rows`` with a random ``fraction`` of them renamed, each by its own random permutation
    within the lists (``random_renaming``)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"the renamed fraction must be in [0, 1], got {fraction}")
    rng = random.Random(seed)
    out = []
    for row in rows:
        if rng.random() < fraction:
            out.append(rename_row(row, random_renaming(lists, rng)))
        else:
            out.append(dict(row))
    return out


def rename_answer_tuple(t: AnswerTuple, mapping: Mapping[str, str]) -> AnswerTuple:
    """An answer tuple with the same renaming applied to its question, gold answer, speakers and
    memories (a renamed speaker keeps their memories)."""
    memories = tuple(
        dataclasses.replace(m, speaker=rename(m.speaker, mapping), text=rename(m.text, mapping))
        for m in t.memories
    )
    speakers = (rename(t.speakers[0], mapping), rename(t.speakers[1], mapping))
    return dataclasses.replace(
        t,
        question=rename(t.question, mapping),
        answer=rename(t.answer, mapping),
        speakers=speakers,
        memories=memories,
    )


def renamed_answer_states(
    tuples: Sequence[AnswerTuple], lists: Sequence[Sequence[str]], copies: int, seed: int
) -> list[AnswerTuple]:
    """RL states: ``tuples`` followed by ``copies`` renamed copies of each, every copy with its
    own random renaming. A policy rewarded on the same 600 questions again and again learns
    their answers ("Andrew's favorite food is dumplings" in this world) along with how to read;
    with the names shuffled per copy only reading the memories is rewarded."""
    if copies < 0:
        raise ValueError(f"renamed copies must be >= 0, got {copies}")
    rng = random.Random(seed)
    out = list(tuples)
    for _ in range(copies):
        out += [rename_answer_tuple(t, random_renaming(lists, rng)) for t in tuples]
    return out


def oversampled_answer_states(
    tuples: Sequence[AnswerTuple],
    kinds: Sequence[str],
    lists: Sequence[Sequence[str]],
    copies: int,
    seed: int,
) -> list[AnswerTuple]:
    """``copies`` renamed copies of each tuple whose question is of one of the template
    ``kinds`` (``sentences.parse_question``'s kinds, e.g. "pet_names", "trip"): more RL states
    for the questions the manager's operations decide, chosen by what the question asks, not
    by any gold operation. Each copy has its own renaming, as in ``renamed_answer_states``."""
    from experiments.cpu_demo.sentences import parse_question

    if copies < 0:
        raise ValueError(f"oversample copies must be >= 0, got {copies}")
    picked = []
    for t in tuples:
        q = parse_question(t.question)
        if q is not None and q.kind in kinds:
            picked.append(t)
    return renamed_answer_states(picked, lists, copies, seed)[len(picked) :]
