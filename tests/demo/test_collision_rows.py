"""Collision rows of the warm start (traces.collision_rows): renamed variants of the turns where
the Mem0-like teacher has a choice, each with the teacher's own draw on the renamed turn."""

from __future__ import annotations

import collections
import re

import pytest

from experiments.cpu_demo import traces
from experiments.cpu_demo.teacher import ManagerRates, MemZeroLikeTeacher
from memr1.env.manager_io import parse_manager_output
from tests.demo.turns import Turn

NAMES = ("Andrew", "Maria", "Jon", "Nadia", "Sam", "Lena", "Omar", "Ines", "Tom", "Kira")
LISTS = (NAMES, ("Toby", "Buddy", "Scout"), ("Boston", "Seattle", "Austin", "Denver"), ("Rome",))
TURNS = {
    "item": ("Andrew adopted another dog named Buddy today.", "Andrew has a dog named Toby."),
    "change": ("Andrew moved from Boston to Seattle two days ago.", "Andrew lives in Boston."),
    "cancel": ("Andrew cancelled the trip to Rome.", "Andrew is planning a trip to Rome."),
    "repeat": ("Andrew lives in Boston.", "Andrew lives in Boston."),
}
NEW = ("Andrew works as a baker.", "Andrew lives in Boston.")


def _tuple(fact: str, memory: str) -> Turn:
    return Turn((fact,), ((7, memory), (2, "Maria works as a nurse.")))


@pytest.mark.parametrize("case", sorted(TURNS))
def test_the_teacher_collides_where_it_has_a_choice(case):
    fact, memory = TURNS[case]
    teacher = MemZeroLikeTeacher(0)
    assert teacher.collides([fact], [(7, memory)])
    assert not teacher.collides([NEW[0]], [(7, NEW[1])])
    assert not teacher.collides([fact], [])


def test_only_collision_turns_get_renamed_variants_each_a_new_prompt():
    turns = [_tuple(*TURNS["cancel"]), _tuple(*NEW)]
    teacher = MemZeroLikeTeacher(3)
    rows, mix = traces.collision_rows(turns, teacher, "compact", LISTS, 5, seed=1, op_first=True)
    assert len(rows) == 5 and sum(mix.values()) == 5
    prompts = [row["messages"][-1]["content"] for row in rows]
    assert len(set(prompts)) >= 3  # 10 names: the variants are (almost always) new prompts
    for row in rows:
        assert row["target"].startswith('{"memory": [{"event": "')
        assert "Rome" in row["messages"][-1]["content"]  # one destination: kept as is
    assert traces.collision_rows(turns, teacher, "compact", LISTS, 0, seed=1) == ([], {})
    with pytest.raises(ValueError, match=">= 0"):
        traces.collision_rows(turns, teacher, "compact", LISTS, -1, seed=1)


def test_each_variant_is_the_teachers_draw_on_its_own_renamed_turn():
    turns = [_tuple(*TURNS["change"])]
    teacher = MemZeroLikeTeacher(0)
    rows, _ = traces.collision_rows(turns, teacher, "compact", LISTS, 40, seed=2)
    for row in rows:
        prompt = row["messages"][-1]["content"]
        fact = next(line[3:-1] for line in prompt.splitlines() if line.startswith('- "'))
        # A shown memory's line is 'i: "text"', the top one marked ' (related)' at a collision.
        shown = [m[1] for m in re.finditer(r'^[01]: "(.*)"(?: \(related\))?$', prompt, re.M)]
        assert prompt.count(" (related)") == 1
        memory = shown[0]
        want = teacher([fact], [(7, shown[0]), (2, shown[1])])
        id_map = {0: 7, 1: 2}
        got = parse_manager_output(row["target"], id_map, new_fact_count=1).ops
        assert got == want, (fact, memory)
        name = fact.split()[0]
        assert memory.startswith(name + " lives in ")  # the collision survives the renaming


def test_the_variants_carry_the_teachers_distribution_not_one_draw():
    turns = [_tuple(*TURNS["change"])]
    rates = ManagerRates()
    rows, mix = traces.collision_rows(turns, MemZeroLikeTeacher(5, rates), "compact", LISTS, 600, 4)
    assert len(rows) == 600
    want = dict(rates.distribution("change"))
    kinds = collections.Counter(mix)
    # update -> UPDATE, delete_add -> DELETE+ADD, add -> ADD; 10 x 9 x 12 distinct renamed turns.
    for mixed, choice in (("UPDATE", "update"), ("DELETE+ADD", "delete_add"), ("ADD", "add")):
        assert kinds[mixed] / 600 == pytest.approx(want[choice], abs=0.07), mixed
