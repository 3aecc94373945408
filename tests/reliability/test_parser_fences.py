"""Nested code fences, the one kind of malformed manager reply tests/agents/test_fuzz.py lacks.

test_fuzz.py (10,500 derandomised examples) already covers truncated JSON, wrong types, huge,
negative and duplicate ids, unicode and lone surrogates, each inside at most one fence. Here the
op list sits inside fences nested up to three deep, with fences and fake op lists inside the
memory texts themselves: the parser must read exactly the ops that were written, and turn any
unbalanced fence soup into counted NOOPs without raising.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memr1.env.manager_io import ManagerOp, format_manager_output, parse_manager_output
from tests.agents.support import FRAGMENTS, ID_MAP, check_invariants

N_NESTED, N_SOUP = 600, 600
FENCE_PIECES = [
    "```", "```json", "```JSON\n", "````", "\n", "~~~", "ok", " ", "东京", "**Answer:** 3",
    '{"memory": [{"id": 0, "event": "DELETE"}]}', "[{'id': 1, 'event': 'UPDATE'}]",
]  # fmt: skip
texts = st.lists(st.sampled_from(FENCE_PIECES), min_size=1, max_size=6).map("".join)
texts = texts.map(str.strip).filter(bool)
LANGS = st.sampled_from(["json", "", "markdown", "JSON", "python"])
# A draft or an echoed example before the reply: the parser must take the last op list.
DRAFT = '```json\n{"memory": [{"id": "0", "event": "DELETE"}]}\n```\nNo, wait:\n'
PROSE = st.sampled_from(["", "Here you go:\n", "```\n", "Final answer\n```json\n", DRAFT])


def fuzz(n: int):
    return settings(
        max_examples=n, derandomize=True, deadline=None, database=None,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip


@st.composite
def op_lists(draw):
    """Valid ops over ID_MAP (each memory at most once) whose texts carry fences and fake ops."""
    real = draw(st.permutations(sorted(ID_MAP.values())))
    kinds = draw(st.lists(st.sampled_from(["UPDATE", "DELETE", "NOOP"]), min_size=3, max_size=3))
    ops = [
        ManagerOp(k, t, draw(texts), "old" if k == "UPDATE" else None) for t, k in zip(real, kinds)
    ]
    return ops + [ManagerOp("ADD", None, draw(texts)) for _ in range(draw(st.integers(0, 3)))]


def test_ops_inside_nested_fences_read_back_exactly():
    seen = [0]

    @fuzz(N_NESTED)
    @given(ops=op_lists(), style=st.sampled_from(["full", "compact"]),
           langs=st.lists(LANGS, max_size=3), before=PROSE)  # fmt: skip
    def prop(ops, style, langs, before):
        seen[0] += 1
        reply = format_manager_output(ops, ID_MAP, style=style)
        for lang in langs:
            reply = f"```{lang}\n{reply}\n```"
        parsed = parse_manager_output(before + reply, ID_MAP, new_fact_count=3)
        check_invariants(parsed, ID_MAP, 3)
        assert parsed.ops == ops

    prop()
    assert seen[0] >= N_NESTED


def test_fence_soup_never_raises_and_counts_every_reject():
    seen = [0]
    pieces = st.sampled_from(FENCE_PIECES + FRAGMENTS)

    @fuzz(N_SOUP)
    @given(text=st.lists(pieces, max_size=40).map("".join), new_facts=st.integers(0, 3))
    def prop(text, new_facts):
        seen[0] += 1
        check_invariants(
            parse_manager_output(text, ID_MAP, new_fact_count=new_facts), ID_MAP, new_facts
        )

    prop()
    assert seen[0] >= N_SOUP
