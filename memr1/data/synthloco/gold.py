"""Gold memory operations for a synthloco conversation, and the bank they build.

The gold bank follows these rules, which a scorer of memory operations should share:

* One bank per speaker (as Mem0's harness keeps), holding at most one memory per fact key
  (pets, hobbies, city, job, food, trip, event). A memory's id is the dia_id of the turn whose ADD
  created it, so ids are unique within a conversation and stable across runs.
* List-valued keys (pets, hobbies) are ONE merged memory. A new item is an UPDATE whose text names
  every item so far ("Andrew has two dogs: Toby since 7 May 2023 and Buddy since 12 October
  2023."). DELETE followed by ADD is NOT accepted for them: a plain ADD of the new fact would split
  or lose the earlier items, which is exactly the mistake the benchmark is built to expose.
* Single-valued keys (city, job, trip, event) that change are an UPDATE whose text states only
  the new value. Because that text keeps no history, DELETE of the old memory followed by ADD of
  the new text leaves the same bank, and a scorer may accept it (``delete_add_ok`` is true on
  these ops).
* A cancelled plan (trip, event) is a DELETE of its memory; a later new plan is a fresh ADD.
* A repeat of a known fact is a NOOP that names the memory it repeats; a turn without a fact
  (greetings, reactions, small talk) is a NOOP with no fact and no target.
* Dated facts carry their absolute date in the memory ("since 7 May 2023", "on 7 May 2023"), with
  relative expressions resolved against the session date, so that temporal and "as of" questions
  are answerable from the gold bank alone.

Each op is a JSON object with: ``dia_id``, ``speaker``, ``fact`` (the observation sentence, or
null), ``key`` (or null), ``op`` ("ADD" | "UPDATE" | "DELETE" | "NOOP"), ``target`` (the memory id
an UPDATE, DELETE or repeat-NOOP acts on; the new id for an ADD; null for small talk),
``old_text`` (the memory text before an UPDATE or DELETE), ``text`` (the memory text after the op;
null after a DELETE or for small talk), ``delete_add_ok`` and ``date`` (the fact's resolved date as
a gold answer string, or null). :func:`replay` rebuilds a bank from ops and is the reference
semantics of the format.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from memr1.data.synthloco.events import Fact, SpeakerState
from memr1.data.synthloco.world import LIST_KEYS, Vocab, article, number_word

OPS = ("ADD", "UPDATE", "DELETE", "NOOP")
ACTION_OPS = {"first": "ADD", "another": "UPDATE", "change": "UPDATE", "cancel": "DELETE"}


def join_items(items: Sequence[str]) -> str:
    """Joins "a", "a and b", "a, b and c": the form of every list in memories and answers."""
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


def memory_text(speaker: str, key: str, state: SpeakerState, vocab: Vocab) -> str:
    """The gold memory of ``speaker`` for ``key`` given the current state (key must be known)."""
    if key == "pets":
        count = len(state.pets)
        noun = state.species if count == 1 else vocab.plural(state.species)
        items = [f"{name} since {date.answer()}" for name, date in state.pets]
        return f"{speaker} has {number_word(count)} {noun}: {join_items(items)}."
    if key == "hobbies":
        return f"{speaker} enjoys {join_items(state.hobbies)}."
    value, date = state.values[key], state.dates.get(key)
    if key == "city":
        if date is None:
            return f"{speaker} lives in {value}."
        return f"{speaker} moved to {value} {date.phrase()}."
    if key == "job":
        if date is None:
            return f"{speaker} works as {article(value)}."
        return f"{speaker} started working as {article(value)} {date.phrase()}."
    if key == "food":
        return f"{speaker}'s favorite food is {value}."
    if key == "trip":
        return f"{speaker} is planning a trip to {value}."
    if key == "event":
        return f"{speaker} plans to go to {article(value)}."
    raise ValueError(f"unknown fact key {key!r}")


def gold_ops(
    sessions: Iterable[list[dict[str, str]]],
    story: Iterable[list[Fact]],
    speakers: tuple[str, str],
    vocab: Vocab,
    observation_text: Mapping[str, str],
) -> list[dict[str, Any]]:
    """Derives the gold operation of every turn of a rendered conversation.

    Args:
      sessions: the rendered turns of each session, in order.
      story: the facts of each session, with their dia_ids set by rendering.
      speakers: the two speakers.
      vocab: the vocabulary (for pet plurals).
      observation_text: dia_id -> the observation sentence of the fact stated there.

    Returns:
      One op object per turn, in conversation order (fields in the module docstring).
    """
    facts = {fact.dia_id: fact for facts in story for fact in facts}
    states = {speaker: None for speaker in speakers}
    memories: dict[str, dict[str, tuple[str, str]]] = {speaker: {} for speaker in speakers}
    ops = []
    for turns in sessions:
        for turn in turns:
            fact = facts.get(turn["dia_id"])
            entry: dict[str, Any] = {
                "dia_id": turn["dia_id"],
                "speaker": turn["speaker"],
                "fact": None,
                "key": None,
                "op": "NOOP",
                "target": None,
                "old_text": None,
                "text": None,
                "delete_add_ok": False,
                "date": None,
            }
            ops.append(entry)
            if fact is None:
                continue
            if states[fact.speaker] is None:
                states[fact.speaker] = SpeakerState(species=fact.species or "")
            state = states[fact.speaker]
            if fact.species is not None:
                state.species = fact.species
            bank = memories[fact.speaker]
            state.apply(fact)
            op = ACTION_OPS.get(fact.action, "NOOP")
            entry.update(
                fact=observation_text[fact.dia_id],
                key=fact.key,
                op=op,
                date=fact.date.answer() if fact.date is not None else None,
            )
            if op == "ADD":
                text = memory_text(fact.speaker, fact.key, state, vocab)
                bank[fact.key] = (fact.dia_id, text)
                entry.update(target=fact.dia_id, text=text)
                continue
            memory_id, old_text = bank[fact.key]
            entry.update(target=memory_id)
            if op == "NOOP":
                entry.update(text=old_text)
            elif op == "DELETE":
                del bank[fact.key]
                entry.update(old_text=old_text)
            else:
                text = memory_text(fact.speaker, fact.key, state, vocab)
                bank[fact.key] = (memory_id, text)
                entry.update(old_text=old_text, text=text, delete_add_ok=fact.key not in LIST_KEYS)
    return ops


def replay(ops: Iterable[Mapping[str, Any]], speakers: Sequence[str]) -> dict[str, list[str]]:
    """Applies ops to empty banks and returns each speaker's final memories in creation order.

    Raises:
      ValueError: an op is unknown, an ADD reuses a live id, an UPDATE or DELETE targets a memory
        that does not exist, or a NOOP names a missing memory.
    """
    banks: dict[str, dict[str, str]] = {speaker: {} for speaker in speakers}
    for op in ops:
        bank = banks[op["speaker"]]
        kind, target = op["op"], op["target"]
        if kind not in OPS:
            raise ValueError(f"{op['dia_id']}: unknown op {kind!r}")
        if kind == "ADD":
            if target in bank:
                raise ValueError(f"{op['dia_id']}: ADD reuses the live memory id {target!r}")
            bank[target] = op["text"]
        elif kind in ("UPDATE", "DELETE") or target is not None:
            if target not in bank:
                raise ValueError(f"{op['dia_id']}: {kind} targets missing memory {target!r}")
            if kind == "UPDATE":
                bank[target] = op["text"]
            elif kind == "DELETE":
                del bank[target]
    return {speaker: list(bank.values()) for speaker, bank in banks.items()}
