"""Property-based fuzzing of the parsers: no exception, valid ops, consistent counters.

Derandomised with fixed example counts, so every run checks the same 10,500 inputs. Each test
counts the examples hypothesis really ran and asserts it reached its quota, so a strategy that
quietly stops generating cannot pass; run with ``-s`` to see the counts.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memr1.env.answer_io import extract_distilled, extract_final_answer, format_answer_output
from memr1.env.manager_io import format_manager_output, parse_manager_output

from .support import (
    ID_MAP,
    PROSE,
    WRAPPERS,
    check_invariants,
    containers,
    nonzero,
    random_text,
    reference_ops,
    serialize,
    valid_ops,
)

# Thousands of generated inputs: about a minute on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

N_RANDOM, N_STRUCTURED, N_MUTATED, N_ANSWER_RANDOM, N_ANSWER_BUILT = 2500, 2000, 1800, 3200, 1000


def fuzz(n: int):
    return settings(
        max_examples=n,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def run_counted(prop, name: str, quota: int) -> None:
    """Runs a @given property whose first argument is a one-item counter list."""
    seen = [0]
    prop(seen)
    print(f"\n{name}: {seen[0]} examples")
    assert seen[0] >= quota, f"{name}: hypothesis ran {seen[0]} of {quota} examples"


def test_manager_random_text():
    @fuzz(N_RANDOM)
    @given(text=random_text, new_facts=st.integers(0, 3))
    def prop(seen, text, new_facts):
        seen[0] += 1
        parsed = parse_manager_output(text, ID_MAP, new_fact_count=new_facts)
        check_invariants(parsed, ID_MAP, new_facts)

    run_counted(prop, "manager random text", N_RANDOM)


def test_manager_structured_replies_match_reference():
    @fuzz(N_STRUCTURED)
    @given(
        container=containers,
        how=st.sampled_from(["json", "json_indent", "python"]),
        wrapper=WRAPPERS,
        before=PROSE,
        after=PROSE,
        new_facts=st.integers(0, 3),
    )
    def prop(seen, container, how, wrapper, before, after, new_facts):
        seen[0] += 1
        value, items = container
        text = before + wrapper.format(serialize(value, how)) + after
        parsed = parse_manager_output(text, ID_MAP, new_fact_count=new_facts)
        check_invariants(parsed, ID_MAP, new_facts)
        assert parsed.ops == reference_ops(items, ID_MAP, new_facts)

    run_counted(prop, "manager structured", N_STRUCTURED)


MUTATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("cut"), st.floats(0, 1)),
        st.tuples(st.just("drop"), st.floats(0, 1), st.integers(1, 8)),
        st.tuples(st.just("insert"), st.floats(0, 1), random_text),
        st.tuples(st.just("quotes"), st.just(0.0)),
        st.tuples(st.just("upper"), st.just(0.0)),
    ),
    min_size=1,
    max_size=3,
)


def mutate(text: str, mutation: tuple) -> str:
    kind, where, *rest = mutation
    at = int(where * len(text))
    if kind == "cut":
        return text[:at]
    if kind == "drop":
        return text[:at] + text[at + rest[0] :]
    if kind == "insert":
        return text[:at] + rest[0] + text[at:]
    if kind == "quotes":
        return text.replace('"', "'")
    return text.upper()


def test_manager_mutated_valid_replies():
    @fuzz(N_MUTATED)
    @given(ops=valid_ops(ID_MAP), style=st.sampled_from(["full", "compact"]), mutations=MUTATIONS)
    def prop(seen, ops, style, mutations):
        seen[0] += 1
        reply = format_manager_output(ops, ID_MAP, style=style)
        assert parse_manager_output(reply, ID_MAP, new_fact_count=3).ops == ops
        for mutation in mutations:
            reply = mutate(reply, mutation)
        parsed = parse_manager_output(reply, ID_MAP, new_fact_count=3)
        check_invariants(parsed, ID_MAP, 3)
        if [m[0] for m in mutations] == ["cut"]:
            # A reply cut short yields a prefix of the ops and at most the one cut-off entry.
            valid = [op for op in parsed.ops if op.invalid is None]
            assert valid == ops[: len(valid)]
            assert nonzero(parsed.counters) in ({}, {"truncated": 1}, {"unparseable": 1})

    run_counted(prop, "manager mutated", N_MUTATED)


def test_answer_random_text():
    @fuzz(N_ANSWER_RANDOM)
    @given(text=random_text)
    def prop(seen, text):
        seen[0] += 1
        answer, fallback = extract_final_answer(text)
        assert isinstance(answer, str) and isinstance(fallback, bool)
        assert answer == answer.strip()
        assert fallback or "\n" not in answer  # after a marker the answer is one line
        lines = extract_distilled(text)
        assert all(line and "\n" not in line for line in lines)
        assert not (fallback and lines)

    run_counted(prop, "answer random text", N_ANSWER_RANDOM)


WORDS = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyz0123456789 \t\u00e9\u00fc\u6771\u4eac", max_size=30
)


def test_answer_built_replies_round_trip():
    @fuzz(N_ANSWER_BUILT)
    @given(
        noise=st.text(alphabet="abcdefghij .:-\n#*", max_size=60),
        distilled=st.lists(WORDS, max_size=5),
        answer=WORDS,
    )
    def prop(seen, noise, distilled, answer):
        seen[0] += 1
        # The noise alphabet cannot spell "answer", so the only marker is the formatted one.
        reply = noise + "\n" + format_answer_output(distilled, answer)
        assert extract_final_answer(reply) == (" ".join(answer.split()), False)
        expected = [" ".join(d.split()) for d in distilled if d.split()]
        got = extract_distilled(reply)
        assert got[len(got) - len(expected) :] == expected

    run_counted(prop, "answer built", N_ANSWER_BUILT)
