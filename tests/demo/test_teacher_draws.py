"""The demo's warm start (issue 26): the Mem0-like teacher's choice at a
collision as a distribution drawn several times per turn, and manager replies with the operation
first and NONE as an explicit entry, read back by the manager's parser."""

from __future__ import annotations

import collections

import pytest

from experiments.cpu_demo import traces
from experiments.cpu_demo.teacher import (
    CAREFUL,
    COLLISIONS,
    FLAW,
    RIGHT_CHOICE,
    ManagerRates,
    MemZeroLikeTeacher,
    choose,
)
from memr1.env.manager_io import (
    ADD,
    DELETE,
    NOOP,
    UPDATE,
    ManagerOp,
    format_manager_output,
    parse_manager_output,
    render_manager_input,
)

TOBY = "Andrew adopted a dog named Toby yesterday."
HOME = "Andrew lives in Boston."
ROME = "Andrew is planning a trip to Rome."
# One turn of each collision: (fact, the memory it collides with).
TURNS = {
    "item": ("Andrew adopted another dog named Buddy today.", TOBY),
    "change": ("Andrew moved from Boston to Seattle two days ago.", HOME),
    "cancel": ("Andrew cancelled the trip to Rome.", ROME),
    "repeat": (HOME, HOME),
}
# The choice each op list stands for.
SIGNATURES = {
    (UPDATE,): {"item": "merge", "change": "update"},
    (DELETE, ADD): {"item": "delete_add", "change": "delete_add"},
    (DELETE,): {"cancel": "delete"},
    (ADD,): {case: "add" for case in COLLISIONS},
    (): {"repeat": "noop"},
    (NOOP,): {"repeat": "noop"},
}


def _choice(case, ops):
    return SIGNATURES[tuple(op.kind for op in ops)][case]


def test_the_distribution_keeps_the_designed_flaw_as_its_mode():
    rates = ManagerRates()
    for case in COLLISIONS:
        dist = dict(rates.distribution(case))
        assert sum(dist.values()) == pytest.approx(1.0)
        assert dist[RIGHT_CHOICE[case]] >= 0.25, case  # the right op is sampled often enough
        mode = max(dist, key=dist.get)
        # The three collisions that change the bank lean to the flaw; a repeat is mostly kept out.
        assert mode == (RIGHT_CHOICE if case == "repeat" else FLAW)[case], case
    assert dict(CAREFUL.distribution("item"))["merge"] == 1.0
    with pytest.raises(ValueError, match="change rates"):
        ManagerRates(change_update=0.9, change_delete_add=0.2).distribution("change")
    assert [choose((("a", 0.25), ("b", 0.5), ("c", 0.25)), r) for r in (0, 0.3, 0.75, 0.99)] == [
        "a",
        "b",
        "c",
        "c",
    ]


@pytest.mark.parametrize("case", COLLISIONS)
def test_many_draws_follow_the_distribution(case):
    fact, memory = TURNS[case]
    retrieved = [(7, memory), (2, "Maria works as a nurse.")]
    counts = collections.Counter()
    n = varied = 0
    for seed in range(100):
        draws = MemZeroLikeTeacher(seed).draws([fact], retrieved, 20)
        assert len(draws) == 20
        # Draw 0 is the teacher's call, the op list that built the banks.
        assert draws[0] == MemZeroLikeTeacher(seed)([fact], retrieved)
        choices = [_choice(case, ops) for ops in draws]
        varied += len(set(choices)) > 1
        counts.update(choices)
        n += len(draws)
    # The later draws continue the turn's stream: one turn's 20 draws are not one draw repeated
    # (all 20 alike has probability 0.8 ** 20 ~ 0.012 at the likeliest choice of a repeat).
    assert varied >= 90, case
    want = dict(ManagerRates().distribution(case))
    for choice, p in want.items():
        # 2,000 draws: a binomial's std is at most 0.011; 0.04 is over 3.5 of them.
        assert counts[choice] / n == pytest.approx(p, abs=0.04), (case, choice)


def test_a_turn_without_a_choice_is_drawn_once_and_nones_can_be_explicit():
    new = "Andrew works as a baker."
    assert MemZeroLikeTeacher(0).draws([new], [(2, HOME)], 5) == [[ManagerOp(ADD, None, new)]]
    assert MemZeroLikeTeacher(0).draws([new], [], 5) == [[ManagerOp(ADD, None, new)]]
    always = MemZeroLikeTeacher(0, ManagerRates(repeat_noop=1.0))
    assert always.draws([HOME], [(2, HOME)], 2) == [[], []]
    explicit = always.draws([HOME], [(2, HOME)], 2, explicit_none=True)
    assert explicit == [[ManagerOp(NOOP, 2, HOME)]] * 2
    with pytest.raises(ValueError, match="at least 1"):
        always.draws([HOME], [(2, HOME)], 0)


@pytest.mark.parametrize(
    "ops",
    [
        [ManagerOp(ADD, None, "Andrew has a dog named Buddy.")],
        [ManagerOp(UPDATE, 7, "Andrew has two dogs: Toby and Buddy.")],
        [ManagerOp(DELETE, 7, ""), ManagerOp(ADD, None, "Andrew moved to Oslo.")],
        [ManagerOp(NOOP, 2, HOME)],
        [],
    ],
)
def test_op_first_replies_round_trip_through_the_parser(ops):
    _, id_map = render_manager_input(["Andrew moved to Oslo."], [(7, TOBY), (2, HOME)])
    for style in ("compact", "full"):
        text = format_manager_output(ops, id_map, style=style, op_first=True)
        plain = format_manager_output(ops, id_map, style=style)
        parsed = parse_manager_output(text, id_map, new_fact_count=1)
        assert parsed.ops == parse_manager_output(plain, id_map, new_fact_count=1).ops == ops
        if ops:
            assert text.startswith('{"memory": [{"event": "') if style == "compact" else True
            assert '"event"' in text.split('"id"')[0] and '"event"' not in plain.split('"id"')[0]


class _Tuple:
    def __init__(self, fact, memory):
        self.facts, self.retrieved = (fact,), ((7, memory), (2, "Maria works as a nurse."))

    def manager_input(self, style="full"):
        return render_manager_input(self.facts, self.retrieved, style=style)


def test_manager_rows_draw_collision_turns_several_times_the_first_as_built():
    turns = [_Tuple(*TURNS["cancel"]), _Tuple("Andrew works as a baker.", HOME)]
    teacher = MemZeroLikeTeacher(3)
    one, mix_one = traces.manager_rows(turns, teacher, "compact")
    many, mix = traces.manager_rows(turns, teacher, "compact", draws=4, op_first=True)
    assert len(one) == 2 and len(many) == 5  # the cancellation 4 times, the new fact once
    assert sum(mix.values()) == 5 and sum(mix_one.values()) == 2
    _, id_map = turns[0].manager_input(style="compact")
    first = parse_manager_output(many[0]["target"], id_map, new_fact_count=1).ops
    assert first == parse_manager_output(one[0]["target"], id_map, new_fact_count=1).ops
    assert all(row["target"].startswith('{"memory": [{"event": "') for row in many)
    assert many[0]["messages"] == one[0]["messages"]


def test_the_demo_config_is_the_measured_recipe_and_quick_keeps_its_warm_start():
    from experiments.cpu_demo.config import get_config

    config, quick = get_config(), get_config("quick")
    assert config.traces.draws_per_turn == 4 and config.traces.op_first is True
    assert config.traces.event_weight == 10.0 and config.pretrain.steps == 600
    # The backbone learns to copy the marked one of several quoted strings, as a manager
    # reply copies a fact from among its prompt's quoted memories.
    assert tuple(config.pretrain.spans) == (1, 4) and config.manager.linked_qa == "shown"
    # quick shrinks sizes only: its warm start writes the same kind of replies, pretrained.
    assert quick.traces.op_first is True and quick.traces.draws_per_turn == 4
    assert quick.pretrain.steps == 3 and tuple(quick.pretrain.spans) == (1, 4)
    with pytest.raises(ValueError, match="unknown config arg key 'ops'"):
        get_config("ops")  # the recipe it named is the default now
