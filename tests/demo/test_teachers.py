"""The demo's rule-based teachers: what they do on the cases the demo is built around."""

from __future__ import annotations

import collections

import pytest

from experiments.cpu_demo.answer_teacher import (
    LIST_AND_PLAN_KINDS,
    UNKNOWN,
    CarelessAnswerTeacher,
    RuleReader,
)
from experiments.cpu_demo.teacher import CAREFUL, ManagerRates, MemZeroLikeTeacher
from memr1.env.answer_io import extract_distilled, extract_final_answer, render_answer_input
from memr1.env.manager_io import (
    ADD,
    DELETE,
    UPDATE,
    format_manager_output,
    parse_manager_output,
    render_manager_input,
)
from memr1.tuples.banks import check_teacher_ops

TOBY = "Andrew adopted a dog named Toby yesterday."
BUDDY = "Andrew adopted another dog named Buddy today."
ROME = "Andrew is planning a trip to Rome."
CANCEL = "Andrew cancelled the trip to Rome."
ALWAYS_MERGE = ManagerRates(list_merge=1.0, list_delete_add=0.0)
ALWAYS_DELETE_ADD = ManagerRates(list_merge=0.0, list_delete_add=1.0)


def _kinds(ops):
    return [(op.kind, op.target) for op in ops]


def test_list_item_merged_when_the_teacher_merges():
    retrieved = [(7, TOBY), (2, "Andrew lives in Boston.")]
    ops = MemZeroLikeTeacher(0, ALWAYS_MERGE)([BUDDY], retrieved)
    assert _kinds(ops) == [(UPDATE, 7)]
    assert ops[0].text == "Andrew has two dogs: Toby and Buddy."
    merged = [(7, ops[0].text)]
    third = MemZeroLikeTeacher(0, ALWAYS_MERGE)(
        ["Andrew adopted another dog named Max two days ago."], merged
    )
    assert third[0].text == "Andrew has three dogs: Toby, Buddy and Max."


def test_list_item_delete_add_loses_the_earlier_items():
    ops = MemZeroLikeTeacher(0, ALWAYS_DELETE_ADD)([BUDDY], [(7, TOBY)])
    assert _kinds(ops) == [(DELETE, 7), (ADD, None)]
    assert ops[1].text == BUDDY  # the new item alone: Toby is gone from the bank


def test_list_item_default_mix_is_mostly_wrong_and_mostly_delete_add():
    # The Figure 1 failure must be the teacher's MODAL behaviour, so that a policy cloned from it
    # and decoded greedily makes it too; the merge must stay common enough for RL to find.
    mix = collections.Counter()
    for seed in range(400):
        ops = MemZeroLikeTeacher(seed)([BUDDY], [(7, TOBY)])
        mix["+".join(op.kind for op in ops)] += 1
    assert set(mix) == {"UPDATE", "DELETE+ADD", "ADD"}
    assert mix.most_common(1)[0][0] == "DELETE+ADD"
    assert mix["UPDATE"] >= 80


def test_cancelled_plan_is_deleted_or_added_as_a_new_memory():
    forced = MemZeroLikeTeacher(0, ManagerRates(cancel_delete=1.0))([CANCEL], [(3, ROME)])
    assert _kinds(forced) == [(DELETE, 3)]
    kept = MemZeroLikeTeacher(0, ManagerRates(cancel_delete=0.0))([CANCEL], [(3, ROME)])
    assert _kinds(kept) == [(ADD, None)] and kept[0].text == CANCEL
    mix = collections.Counter(
        _kinds(MemZeroLikeTeacher(seed)([CANCEL], [(3, ROME)]))[0][0] for seed in range(200)
    )
    assert mix[ADD] > mix[DELETE] > 0


def test_related_memory_must_be_the_same_person_and_key():
    other_person = [(4, "Maria adopted a dog named Toby yesterday.")]
    assert _kinds(MemZeroLikeTeacher(0, ALWAYS_MERGE)([BUDDY], other_person)) == [(ADD, None)]
    assert _kinds(MemZeroLikeTeacher(0)([TOBY], [])) == [(ADD, None)]
    repeat = MemZeroLikeTeacher(0, ManagerRates(repeat_noop=1.0))
    assert repeat(["Andrew has a dog named Toby."], [(7, TOBY)]) == []


def test_teacher_is_deterministic_and_its_ops_format_and_parse_back():
    retrieved = [(7, TOBY), (9, ROME)]
    teacher = MemZeroLikeTeacher(3)
    for facts in ([BUDDY], [CANCEL], [BUDDY, CANCEL]):
        ops = teacher(facts, retrieved)
        assert ops == teacher(facts, retrieved)
        check_teacher_ops(ops, retrieved, "test")
        _, id_map = render_manager_input(facts, retrieved, style="compact")
        text = format_manager_output(ops, id_map, style="compact")
        parsed = parse_manager_output(text, id_map, new_fact_count=len(facts))
        assert parsed.num_valid == len(ops)
        assert [(op.kind, op.target, op.text) for op in parsed.effective()] == [
            (op.kind, op.target, op.text) for op in ops
        ]


OLD_CITY = ("3:10 pm on 2 March, 2023", "Andrew lives in Boston.")
NEW_CITY = ("9:05 am on 8 May, 2023", "Andrew moved from Boston to Denver yesterday.")
MARIA = ("9:05 am on 8 May, 2023", "Maria's favorite food is sushi.")


def _memories(*andrew, maria=(MARIA,)):
    return {"Andrew": list(andrew), "Maria": list(maria)}


def test_answer_teacher_reply_parses_and_distils_the_memory_it_used():
    teacher = CarelessAnswerTeacher(0)
    reply = teacher.reply("Where does Andrew live?", _memories(NEW_CITY), distill=True)
    assert extract_final_answer(reply) == ("Denver", False)
    assert extract_distilled(reply) == ["Andrew moved from Boston to Denver yesterday"]
    direct = teacher.reply("Where does Andrew live?", _memories(NEW_CITY), distill=False)
    assert direct == "**Answer:** Denver"
    assert extract_final_answer(direct) == ("Denver", False)


def test_answer_teacher_prefers_the_stale_memory():
    # Retrieval puts the current memory first; the teacher still reads the oldest one.
    stale = CarelessAnswerTeacher(0, stale_bias=1.0)
    assert stale("Where does Andrew live?", _memories(NEW_CITY, OLD_CITY)) == (
        ["Andrew lives in Boston."],
        "Boston",
    )
    picks = collections.Counter(
        CarelessAnswerTeacher(seed)("Where does Andrew live?", _memories(NEW_CITY, OLD_CITY))[1]
        for seed in range(200)
    )
    assert picks["Boston"] > picks["Denver"] > 0


@pytest.mark.parametrize("style", ["compact", "full"])
def test_rule_reader_reads_the_newest_own_memory_of_the_rendered_chat(style):
    # The stale memory is listed first, Maria's food is not Andrew's: the careful reader takes
    # neither, and answers from the chat the Answer Agent would get.
    memories = _memories(OLD_CITY, NEW_CITY)
    chats = [
        render_answer_input("Where does Andrew live?", memories, style=style),
        render_answer_input("What is Andrew's favorite food?", memories, style=style),
    ]
    replies = RuleReader(style=style).complete(chats, None, key=None, num_samples=2)
    assert [[c.text for c in r] for r in replies] == [
        ["**Answer:** Denver"] * 2,
        [f"**Answer:** {UNKNOWN}"] * 2,
    ]
    assert CarelessAnswerTeacher(0, newest=True)("Where does Andrew live?", memories)[1] == "Denver"


def test_person_blind_teacher_answers_from_either_speaker():
    # Andrew has no food memory: the careful reader says unknown, the blind one reads Maria's.
    question = "What is Andrew's favorite food?"
    assert CarelessAnswerTeacher(0)(question, _memories())[1] == UNKNOWN
    assert CarelessAnswerTeacher(0, person_blind=True)(question, _memories()) == (
        ["Maria's favorite food is sushi."],
        "sushi",
    )
    andrew_food = ("9:05 am on 8 May, 2023", "Andrew's favorite food is pizza.")
    picks = collections.Counter(
        CarelessAnswerTeacher(seed, stale_bias=0.0, person_blind=True)(
            question, _memories(andrew_food)
        )[1]
        for seed in range(200)
    )
    assert set(picks) == {"pizza", "sushi"} and min(picks.values()) > 60
    # Questions about both speakers still read each one's own memories.
    joint = "Who has more pets, Maria or Andrew?"
    both = {
        "Andrew": [("1:56 pm on 8 May, 2023", "Andrew has two dogs: Toby and Buddy.")],
        "Maria": [("1:56 pm on 8 May, 2023", "Maria adopted a cat named Luna today.")],
    }
    assert CarelessAnswerTeacher(0, person_blind=True)(joint, both)[1] == "Andrew"


def test_hedging_teacher_answers_every_related_memory_joined_by_or():
    question = "What is Andrew's favorite food?"
    andrew_food = ("9:05 am on 8 May, 2023", "Andrew's favorite food is pizza.")
    replies = [
        CarelessAnswerTeacher(seed, person_blind=True, hedge=1.0)(question, _memories(andrew_food))
        for seed in range(40)
    ]
    # Always both memories, both answers, in a random order (EM against "pizza" scores 0).
    assert {answer for _, answer in replies} == {"pizza or sushi", "sushi or pizza"}
    for lines, answer in replies:
        assert sorted(lines) == [
            "Andrew's favorite food is pizza.",
            "Maria's favorite food is sushi.",
        ]
        # The distilled lines come in the order of the answers they gave.
        assert [line.split()[-1].rstrip(".") for line in lines] == answer.split(" or ")
    # One related memory: nothing to hedge between; at hedge 0 the teacher always selects.
    assert CarelessAnswerTeacher(0, hedge=1.0)(question, _memories(andrew_food))[1] == "pizza"
    assert all(
        " or "
        not in CarelessAnswerTeacher(seed, person_blind=True)(question, _memories(andrew_food))[1]
        for seed in range(40)
    )
    # Part-time hedging mixes both behaviours.
    mixed = collections.Counter(
        " or "
        in CarelessAnswerTeacher(seed, person_blind=True, hedge=0.5)(
            question, _memories(andrew_food)
        )[1]
        for seed in range(200)
    )
    assert min(mixed.values()) > 60
    with pytest.raises(ValueError, match="hedge"):
        CarelessAnswerTeacher(0, hedge=1.5)


def test_hedge_zero_draws_nothing_extra():
    # At hedge 0 the random stream holds no hedging draw: one stale draw, then the choice among
    # the related memories (Andrew's, then Maria's).
    question = "What is Andrew's favorite food?"
    memories = _memories(("9:05 am on 8 May, 2023", "Andrew's favorite food is pizza."))
    for seed in range(20):
        teacher = CarelessAnswerTeacher(seed, stale_bias=0.0, person_blind=True)
        rng = teacher._rng(question, memories)
        rng.random()
        assert teacher(question, memories)[1] == rng.choice(["pizza", "sushi"])


@pytest.mark.parametrize(
    "question, memories, answer",
    [
        (
            "When did Andrew adopt Toby?",
            [("1:56 pm on 8 May, 2023", "Andrew adopted a dog named Toby yesterday.")],
            "7 May 2023",
        ),
        (
            "How many dogs does Andrew have?",
            [("1:56 pm on 8 May, 2023", "Andrew has two dogs: Toby and Buddy.")],
            "two",
        ),
        (
            "What are the names of Andrew's dogs?",
            [("1:56 pm on 8 May, 2023", "Andrew has two dogs: Toby and Buddy.")],
            "Toby and Buddy",
        ),
        (
            "Which gift would suit Andrew better, a cat toy or a dog toy?",
            [("1:56 pm on 8 May, 2023", "Andrew adopted a dog named Toby yesterday.")],
            "a dog toy",
        ),
        (
            "Which would Andrew enjoy more, a bookstore or a national park?",
            [("1:56 pm on 8 May, 2023", "Andrew enjoys painting and hiking.")],
            "a national park",
        ),
        ("What is Andrew's favorite food?", [], UNKNOWN),
        ("Is this a question the generator writes?", [NEW_CITY], UNKNOWN),
    ],
)
def test_answer_teacher_reads_each_question_kind(question, memories, answer):
    reply = CarelessAnswerTeacher(0).reply(question, _memories(*memories), distill=True)
    assert extract_final_answer(reply) == (answer, False)


def test_answer_teacher_joint_question_reads_both_speakers():
    memories = {
        "Andrew": [("1:56 pm on 8 May, 2023", "Andrew has two dogs: Toby and Buddy.")],
        "Maria": [("1:56 pm on 8 May, 2023", "Maria adopted a cat named Luna today.")],
    }
    teacher = CarelessAnswerTeacher(0)
    assert teacher("How many pets do Andrew and Maria have in total?", memories)[1] == "three"
    assert teacher("Who has more pets, Maria or Andrew?", memories)[1] == "Andrew"


def test_careful_manager_makes_every_choice_right():
    careful = MemZeroLikeTeacher(0, CAREFUL)
    retrieved = [(7, TOBY), (3, ROME), (2, "Andrew lives in Boston.")]
    merged = careful([BUDDY], retrieved)
    assert (
        _kinds(merged) == [(UPDATE, 7)] and merged[0].text == "Andrew has two dogs: Toby and Buddy."
    )
    third = careful(["Andrew adopted another dog named Max two days ago."], [(7, merged[0].text)])
    assert third[0].text == "Andrew has three dogs: Toby, Buddy and Max."
    move = "Andrew moved from Boston to Denver yesterday."
    # A change is merged as the value now holds: the new city with its date, the old one gone.
    assert [(op.kind, op.target, op.text) for op in careful([move], retrieved)] == [
        (UPDATE, 2, "Andrew moved to Denver yesterday.")
    ]
    assert _kinds(careful([CANCEL], retrieved)) == [(DELETE, 3)]
    assert careful(["Andrew lives in Boston."], retrieved) == []  # a repeat: NONE
    assert _kinds(careful(["Andrew works as a nurse."], retrieved)) == [(ADD, None)]


def test_answer_teacher_reads_a_whole_list_from_a_careful_bank_and_part_of_a_split_one():
    careful = MemZeroLikeTeacher(0, CAREFUL)
    bank = [(7, TOBY)]
    for fact in (BUDDY, "Andrew adopted another dog named Max two days ago."):
        (op,) = careful([fact], bank)
        bank = [(7, op.text)]
    when = "1:56 pm on 8 May, 2023"
    question = "What are the names of Andrew's dogs?"
    reader = CarelessAnswerTeacher(0, person_blind=True, hedge=1.0)  # the demo's flaws
    assert reader(question, _memories((when, bank[0][1])))[1] == "Toby, Buddy and Max"
    assert reader("How many dogs does Andrew have?", _memories((when, bank[0][1])))[1] == "three"
    # Split into one memory per dog, the list is in no single memory: the careful reader names
    # the newest dog alone.
    split = [
        (when, TOBY),
        (when, BUDDY),
        ("2:00 pm on 9 May, 2023", "Andrew adopted another dog named Max two days ago."),
    ]
    assert CarelessAnswerTeacher(0, newest=True)(question, _memories(*split))[1] == "Max"


PLAN = ("3:10 pm on 2 March, 2023", ROME)
MARIA_TRIP = "Maria is planning a trip to Paris."
CANCELLED = ("9:05 am on 8 May, 2023", CANCEL)
TRIP = "Where is Andrew planning to travel?"


@pytest.mark.parametrize(
    "memories, answer",
    [
        ([PLAN], "Rome"),  # the plan kept: a stale "Rome" where the gold is "nowhere"
        ([], "nowhere"),  # the plan deleted on its cancellation
        ([PLAN, CANCELLED], "nowhere"),  # the cancellation beside the plan, read newest
        ([CANCELLED], "nowhere"),
        ([PLAN, ("1:00 pm on 9 May, 2023", "Andrew is planning a trip to Paris.")], "Paris"),
    ],
)
def test_a_plan_question_reads_the_newest_plan_memory(memories, answer):
    assert CarelessAnswerTeacher(0, newest=True)(TRIP, _memories(*memories))[1] == answer
    event = "What event is Andrew planning to go to?"
    assert CarelessAnswerTeacher(0, newest=True)(event, _memories())[1] == "nothing"


def test_careful_kinds_are_read_without_the_designed_flaws():
    when = "1:56 pm on 8 May, 2023"
    memories = {
        "Andrew": [(when, "Andrew has two dogs: Toby and Buddy."), (when, ROME)],
        "Maria": [(when, "Maria adopted a cat named Luna today."), (when, MARIA_TRIP)],
    }
    flawed = CarelessAnswerTeacher(0, person_blind=True, hedge=1.0)
    names = "What are the names of Andrew's dogs?"
    # Person-blind and hedging, it mixes Maria's cat into the answer...
    assert flawed(names, memories)[1] in ("Toby and Buddy or Luna", "Luna or Toby and Buddy")
    # ...unless the kind is read carefully: Andrew's own list, whole.
    teacher = CarelessAnswerTeacher(
        0, person_blind=True, hedge=1.0, careful_kinds=LIST_AND_PLAN_KINDS
    )
    assert teacher(names, memories) == (["Andrew has two dogs: Toby and Buddy."], "Toby and Buddy")
    assert flawed(TRIP, memories)[1] in ("Rome or Paris", "Paris or Rome")
    assert teacher(TRIP, memories)[1] == "Rome"
    # Other kinds keep the flaws.
    assert " or " in teacher("What kind of pet does Andrew have?", memories)[1]
