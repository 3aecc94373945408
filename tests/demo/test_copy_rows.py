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
