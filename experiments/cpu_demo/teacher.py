"""The demo's Memory Manager teacher: a rule-based, Mem0-like manager that is wrong on purpose.

It is the callable teacher of ``memr1.tuples.build_tuples``: ``teacher(facts, retrieved)``
returns the operations for one turn. It reads each fact and the retrieved memories with
``experiments.cpu_demo.sentences``, finds the top-retrieved memory about the same thing (same
person, same
fact key) and then behaves like Mem0's prompted manager often does in practice (the failure shown
in Figure 1 of the Memory-R1 paper):

* another item of a list (a second dog, a new hobby): it merges the item into the memory
  (UPDATE with "Andrew has two dogs: Toby and Buddy.") only sometimes; more often it DELETEs the
  memory and ADDs the new fact alone, which loses the earlier items, or it ADDs the new fact
  next to the old memory, which splits the list;
* a changed value (a move, a new job, a different trip): UPDATE sometimes, DELETE+ADD sometimes,
  and most often a plain ADD that leaves the stale value in the bank next to the new one;
* a cancelled plan: DELETE sometimes, more often it ADDs "cancelled ..." as a new memory;
* a repeat of something stored: NOOP mostly, now and then a duplicate ADD;
* anything with no related memory retrieved: ADD.

The choices are drawn from a random stream seeded by the teacher's seed and the turn's content
(facts and retrieved memories), so the same turn always gets the same ops: the SFT traces written
later from the tuples are exactly what built the tuples' banks. Each choice at a collision is a
distribution (``ManagerRates.distribution``); ``draws`` continues a turn's stream for more SFT
rows than the one draw that built the banks (the demo's opt-in "ops" warm start). Memory texts
are the fact sentences themselves (relative dates included, as Mem0 keeps them), the merged
list forms, or, for the UPDATE of a changed value, the value as it now holds
(``sentences.current_form``: "Andrew moved to Seattle yesterday.", the old city gone), so that
an UPDATE leaves a memory a question about the current value reads right where the raw fact
beside a DELETE+ADD still names the stale value.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Sequence

from experiments.cpu_demo.sentences import (
    Sentence,
    current_form,
    merged_hobbies,
    merged_pets,
    parse_sentence,
)
from memr1.env.manager_io import ADD, DELETE, NOOP, UPDATE, ManagerOp


@dataclasses.dataclass(frozen=True)
class ManagerRates:
    """How often the teacher does each thing (the rest of each case is a plain ADD).

    Attributes:
      list_merge: another list item -> UPDATE with the merged list (the right op).
      list_delete_add: another list item -> DELETE the list memory, ADD the new item alone.
      change_update: changed value -> UPDATE with the new fact (right).
      change_delete_add: changed value -> DELETE + ADD (accepted as right for single values).
      cancel_delete: cancelled plan -> DELETE (right); otherwise ADD the cancellation.
      repeat_noop: repeated fact -> NOOP (right); otherwise ADD a duplicate.
    """

    list_merge: float = 0.35
    list_delete_add: float = 0.45
    change_update: float = 0.35
    change_delete_add: float = 0.15
    cancel_delete: float = 0.4
    repeat_noop: float = 0.8

    def distribution(self, case: str) -> tuple[tuple[str, float], ...]:
        """The teacher's choice at a collision of ``case`` (one of COLLISIONS) as (choice,
        probability) pairs summing to 1, in the order `choose` lays them out."""
        rest = {
            "item": (("merge", self.list_merge), ("delete_add", self.list_delete_add)),
            "change": (("update", self.change_update), ("delete_add", self.change_delete_add)),
            "cancel": (("delete", self.cancel_delete),),
            "repeat": (("noop", self.repeat_noop),),
        }[case]
        left = 1.0 - sum(p for _, p in rest)
        if left < -1e-9 or any(p < 0 for _, p in rest):
            raise ValueError(f"ManagerRates: the {case} rates {rest} are not a distribution")
        return (*rest, ("add", max(left, 0.0)))


# The facts that collide with a shown memory of the same person and key: another list item, a
# changed value, a cancelled plan, a repeat. Only there does the teacher choose.
COLLISIONS = ("item", "change", "cancel", "repeat")
# The right choice of each collision (the careful manager's) and the designed flaw, which is
# the mode of the default rates' choice at the three collisions that change the bank; a repeat
# is mostly kept out (NOOP 0.8) and now and then stored twice (its flaw).
RIGHT_CHOICE = {"item": "merge", "change": "update", "cancel": "delete", "repeat": "noop"}
FLAW = {"item": "delete_add", "change": "add", "cancel": "add", "repeat": "add"}

# Every choice made right: merge a list item, UPDATE a change, DELETE a cancellation, NONE for a
# repeat. The careful manager that builds the banks an Answer Agent learns to read lists from (as
# the paper's Answer Agent was trained on a capable manager's banks), and the probe's "clean".
CAREFUL = ManagerRates(
    list_merge=1.0,
    list_delete_add=0.0,
    change_update=1.0,
    change_delete_add=0.0,
    cancel_delete=1.0,
    repeat_noop=1.0,
)


class MemZeroLikeTeacher:
    """``teacher(facts, retrieved) -> list[ManagerOp]`` with the behaviour of the module docstring.

    Args:
      seed: mixes into every turn's random stream (the demo passes its run seed).
      rates: the behaviour mix.
    """

    name = "mem0-like-rules"

    def __init__(self, seed: int = 0, rates: ManagerRates = ManagerRates()):
        self.seed = int(seed)
        self.rates = rates

    def rng_for(self, facts: Sequence[str], retrieved: Sequence[tuple[int, str]]) -> random.Random:
        """The turn's random stream: a function of the seed and the turn's content only."""
        blob = json.dumps([self.seed, list(facts), [[int(i), t] for i, t in retrieved]])
        return random.Random(hashlib.sha256(blob.encode("utf-8")).hexdigest())

    def __call__(
        self, facts: Sequence[str], retrieved: Sequence[tuple[int, str]]
    ) -> list[ManagerOp]:
        """The ops for one turn's facts given the memories retrieved for them (real ids)."""
        return self.draws(facts, retrieved, 1)[0]

    def draws(
        self,
        facts: Sequence[str],
        retrieved: Sequence[tuple[int, str]],
        n: int,
        *,
        explicit_none: bool = False,
    ) -> list[list[ManagerOp]]:
        """Up to ``n`` draws of the turn's ops from its one random stream, for SFT rows that
        carry the teacher's distribution rather than one sample of it.

        Draw 0 is the teacher's call (``__call__``): the op list that built the banks. The
        later draws continue the same stream and build no bank: they are other replies to the
        same prompt. A turn with no choice to make (no fact collides with a shown memory) is
        drawn once. ``explicit_none``: a repeat is answered with a NONE entry on the memory it
        repeats (ManagerOp(NOOP, id, text)) instead of nothing, which leaves the same bank.
        """
        if n < 1:
            raise ValueError(f"draws: n must be at least 1, got {n}")
        rng = self.rng_for(facts, retrieved)
        shown = [(int(i), text, parse_sentence(text)) for i, text in retrieved]
        out, chose = [], False
        for _ in range(n):
            ops: list[ManagerOp] = []
            used: set[int] = set()
            for fact in facts:
                fact_ops, case = self._one_fact(fact, shown, used, rng, explicit_none)
                ops += fact_ops
                chose = chose or case in COLLISIONS
            out.append(ops)
            if not chose:
                break
        return out

    def _one_fact(self, fact, shown, used, rng, explicit_none=False):
        """(the fact's ops, its case: "plain" or one of COLLISIONS)."""
        new = parse_sentence(fact)
        if new is None:
            return [ManagerOp(ADD, None, fact)], "plain"
        # The top-retrieved live memory about the same person and key: Mem0's manager works on
        # whatever the search put first, not on the best of several related memories.
        related = [
            (i, text, old)
            for i, text, old in shown
            if old is not None and i not in used and (old.name, old.key) == (new.name, new.key)
        ]
        if not related:
            return [ManagerOp(ADD, None, fact)], "plain"
        target, old_text, old = related[0]
        r = rng.random()
        if new.kind in ("item", "change", "cancel"):
            case = new.kind
        elif new.value in old.items and old.kind != "cancel":
            case = "repeat"  # a plain statement whose related memory already names the value
        else:
            return [ManagerOp(ADD, None, fact)], "plain"
        choice = choose(self.rates.distribution(case), r)
        if choice not in ("add", "noop") or (choice == "noop" and explicit_none):
            used.add(target)  # each shown memory is acted on once, as the parser allows
        ops = {
            "merge": [ManagerOp(UPDATE, target, merge(old, new))] if case == "item" else None,
            "update": [ManagerOp(UPDATE, target, current_form(new))] if case == "change" else None,
            "delete_add": [ManagerOp(DELETE, target, ""), ManagerOp(ADD, None, fact)],
            "delete": [ManagerOp(DELETE, target, "")],
            "noop": [ManagerOp(NOOP, target, old_text)] if explicit_none else [],
            "add": [ManagerOp(ADD, None, fact)],
        }[choice]
        return ops, case


def choose(distribution: Sequence[tuple[str, float]], r: float) -> str:
    """The choice of ``distribution`` ((name, probability) pairs, the rest to the last) that a
    uniform draw ``r`` in [0, 1) falls in, the choices' intervals laid out in order."""
    edge = 0.0
    for name, p in distribution[:-1]:
        edge += p
        if r < edge:
            return name
    return distribution[-1][0]


def merge(old: Sentence, new: Sentence) -> str:
    """The merged list memory of an old list memory and a new item."""
    items = tuple(dict.fromkeys((*old.items, *new.items)))
    if new.key == "pets":
        return merged_pets(new.name, new.species or old.species or "pet", items)
    return merged_hobbies(new.name, items)
