"""The manager copy rows of the warm start: random-word facts, stored by ADD, read back by the real
parser."""

from __future__ import annotations

import pytest

from experiments.cpu_demo.traces import manager_copy_rows, target_words
from memr1.env.manager_io import ADD, parse_manager_output


def test_manager_copy_rows_store_the_fact_verbatim_through_the_real_parser():
    words = target_words([{"target": 'Andrew adopted a dog named "Toby".'}])
    assert words == ["Andrew", "Toby", "a", "adopted", "dog", "named"]
    rows = manager_copy_rows(words, 50, (4, 9), seed=3, style="compact")
    assert rows == manager_copy_rows(words, 50, (4, 9), seed=3, style="compact")
    for row in rows:
        user = row["messages"][-1]["content"]
        fact = user.split("Facts:\n- ")[1]
        shown = user.count('\n0: "') + user.count('\n1: "') + user.count('\n2: "')
        parsed = parse_manager_output(row["target"], {i: i for i in range(shown)}, new_fact_count=1)
        (op,) = parsed.ops
        assert op.kind == ADD and op.invalid is None and f'"{op.text}"' == fact
        assert 4 <= len(op.text.rstrip(".").split()) <= 9
    with pytest.raises(ValueError, match="no words"):
        manager_copy_rows([], 1, (4, 9), seed=0, style="compact")


def test_named_copy_rows_open_every_fact_and_memory_with_a_name():
    from experiments.cpu_demo.augment import entity_lists
    from experiments.cpu_demo.config import get_config, synth_config

    words = ["adopted", "a", "dog", "named"]
    names = entity_lists(synth_config(get_config(), 0))[0]  # the people run.make_traces passes
    assert "Andrew" in names and "Boston" not in names
    rows = manager_copy_rows(words, 200, (2, 4), seed=1, style="compact", names=names)
    opened_apart = 0
    for row in rows:
        user = row["messages"][-1]["content"]
        texts = [line.split('"')[1] for line in user.splitlines() if '"' in line]
        assert all(t.split()[0] in names and 3 <= len(t.rstrip(".").split()) <= 5 for t in texts)
        (op,) = parse_manager_output(row["target"], {i: i for i in range(5)}, new_fact_count=1).ops
        assert op.kind == ADD and op.text == texts[-1]  # the fact: the last quoted line
        opened_apart += any(t.split()[0] != op.text.split()[0] for t in texts[:-1])
    # Most rows show a memory about another person above the fact, whose name must not be copied.
    assert opened_apart > 100
    plain = manager_copy_rows(words, 20, (2, 4), seed=1, style="compact")
    assert all(row["target"].split('"text": "')[1].split()[0] in words for row in plain)
