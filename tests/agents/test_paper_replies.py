"""The paper's agents (`agents.style="paper"`, recipe=paper): its prompts as the agents see them,
and paper-shaped replies read as the paper's pipeline (Mem0's reader) reads them."""

from __future__ import annotations

import json

from memr1.env.answer_io import (
    extract_distilled,
    extract_final_answer,
    parse_answer_input,
    render_answer_input,
)
from memr1.env.manager_io import ManagerRules, parse_manager_output, render_manager_input
from memr1.env.prompts import get_template

MEM0 = ManagerRules(show_date=False, repeated_id="in_order", adds_per_fact=0)
ID_MAP = {0: 40, 1: 41}  # shown id -> bank id
FACTS = ["Nadia adopted a cat named Pixel", "Nadia started rowing"]


def kinds(parsed):
    return [(op.kind, op.target, op.invalid) for op in parsed.ops]


def test_the_paper_manager_prompt_shows_old_memory_and_facts_as_json_and_no_date():
    retrieved = [(40, "Nadia has a dog named Rex"), (41, "Nadia works in Oslo")]
    messages, id_map = render_manager_input(FACTS, retrieved, style="paper", session_date=None)
    system, user = messages[0]["content"], messages[1]["content"]
    for event in ("ADD", "UPDATE", "DELETE", "NONE"):
        assert event in system
    assert '"old_memory"' in system and "never a new" in system
    assert id_map == {0: 40, 1: 41}
    assert user.startswith("Old memory:\n[\n")
    assert '{"id": "1", "text": "Nadia works in Oslo"}' in user
    assert f"New facts: {json.dumps(FACTS)}" in user
    assert "Date" not in user and user.endswith("New memory:")


def test_per_fact_entries_with_every_old_memory_listed_are_read_whole():
    # Mem0's layout: every old memory with its event, then one ADD a new fact.
    reply = {"memory": [
        {"id": "0", "text": "Nadia has a dog named Rex", "event": "NONE"},
        {"id": "1", "text": "Nadia works in Oslo", "event": "NONE"},
        {"id": "2", "text": "Nadia adopted a cat named Pixel", "event": "ADD"},
        {"id": "3", "text": "Nadia started rowing", "event": "ADD"},
    ]}  # fmt: skip
    for rules in (ManagerRules(), MEM0):
        parsed = parse_manager_output(json.dumps(reply), ID_MAP, new_fact_count=2, rules=rules)
        assert kinds(parsed) == [
            ("NOOP", 40, None),
            ("NOOP", 41, None),
            ("ADD", None, None),
            ("ADD", None, None),
        ]
        assert parsed.repeated_ids == parsed.extra_adds == 0
    # One object a line, no list around them (a model writing one entry per fact).
    loose = "\n".join(json.dumps(e) for e in reply["memory"][2:])
    assert kinds(parse_manager_output(loose, ID_MAP, new_fact_count=2, rules=MEM0)) == [
        ("ADD", None, None),
        ("ADD", None, None),
    ]


def test_an_id_named_twice_applies_in_reply_order_under_mem0s_reading():
    reply = json.dumps({"memory": [
        {"id": "0", "text": "Nadia has a dog named Rex", "event": "NONE"},
        {"id": "0", "text": "Nadia has a dog named Rex and a cat named Pixel", "event": "UPDATE",
         "old_memory": "Nadia has a dog named Rex"},
        {"id": "1", "text": "Nadia works in Oslo", "event": "DELETE"},
        {"id": "1", "text": "Nadia works in Bergen", "event": "UPDATE"},
    ]})  # fmt: skip
    mem0 = parse_manager_output(reply, ID_MAP, new_fact_count=2, rules=MEM0)
    # Every entry reaches the bank in order; the UPDATE of the memory just deleted finds nothing
    # there and changes nothing (memr1.memory counts it as an unknown id), as Mem0 skips it.
    assert kinds(mem0) == [
        ("NOOP", 40, None),
        ("UPDATE", 40, None),
        ("DELETE", 41, None),
        ("UPDATE", 41, None),
    ]
    assert mem0.repeated_ids == 2 and mem0.counters["duplicate_id"] == 0
    first = parse_manager_output(reply, ID_MAP, new_fact_count=2)
    assert kinds(first) == [
        ("NOOP", 40, None),
        ("NOOP", None, "duplicate_id"),
        ("DELETE", 41, None),
        ("NOOP", None, "duplicate_id"),
    ]
    assert first.repeated_ids == 2 and first.counters["duplicate_id"] == 2


def test_several_adds_for_one_fact_are_all_kept_under_mem0s_reading():
    adds = [{"id": str(i), "text": f"Nadia rows on lake {i}", "event": "ADD"} for i in (2, 3, 4)]
    reply = json.dumps({"memory": adds})
    mem0 = parse_manager_output(reply, ID_MAP, new_fact_count=1, rules=MEM0)
    assert [op.text for op in mem0.effective()] == [a["text"] for a in adds]
    first = parse_manager_output(reply, ID_MAP, new_fact_count=1)
    assert [op.invalid for op in first.ops] == [None, "excess_add", "excess_add"]
    assert mem0.extra_adds == first.extra_adds == 2


def test_the_paper_answer_prompt_carries_its_rules_and_approach():
    memories = {"Nadia": [("1:56 pm on 8 May, 2023", "Nadia adopted a cat last week")], "Ben": []}
    messages = render_answer_input("When did Nadia adopt a cat?", memories, style="paper")
    system, user = messages[0]["content"], messages[1]["content"]
    for rule in ("states it", "do not mix up the two people", "most recent", "step by step",
                 "timestamp", "**Answer:**", "5-6 words"):  # fmt: skip
        assert rule in system, rule
    assert "Memories for user Nadia:\n- 1:56 pm on 8 May, 2023: Nadia adopted" in user
    assert "Memories for user Ben:\n(none)" in user
    assert parse_answer_input(messages, style="paper") == (
        "When did Nadia adopt a cat?",
        {"Nadia": [("1:56 pm on 8 May, 2023", "Nadia adopted a cat last week")], "Ben": []},
    )
    direct = get_template("answer_direct", "paper").system
    assert "write out the memories" not in direct and "**Answer:**" in direct


def test_a_reasoning_block_before_the_answer_is_read_from_the_last_marker():
    reply = (
        "Let me go step by step.\n"
        "1. Nadia's memory from 8 May 2023 says she adopted a cat last week.\n"
        "2. A week before 8 May 2023 is 1 May 2023. Answer: maybe May 2023? No, be specific.\n"
        "**Memories selected as relevant:**\n"
        "- 1:56 pm on 8 May, 2023: Nadia adopted a cat last week\n"
        "**Answer:** The week of 1 May 2023."
    )
    assert extract_final_answer(reply) == ("The week of 1 May 2023", False)
    distilled = extract_distilled(reply)
    assert distilled[-1] == "1:56 pm on 8 May, 2023: Nadia adopted a cat last week"
    assert not any("Memories selected" in line for line in distilled)
    # A reasoning model's closed think block is dropped before the marker is looked for.
    think = "<think>**Answer:** Rex</think>\n**Answer:** Pixel"
    assert extract_final_answer(think) == ("Pixel", False)
