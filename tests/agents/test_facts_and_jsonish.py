"""Fact extraction I/O and the forgiving JSON reader underneath every parser."""

from __future__ import annotations

import pytest

from memr1.env.facts_io import format_facts_output, parse_facts, render_fact_input
from memr1.env.jsonish import MAX_DEPTH, PartialDict, PartialList, find_values
from memr1.env.prompts import STYLES

TURNS = [
    ("Caroline", "I went to a support group yesterday."),
    ("Melanie", "That's great!\nHow was it?"),
]


@pytest.mark.parametrize("style", STYLES)
def test_fact_input_holds_date_speakers_and_focus(style):
    system, user = render_fact_input(TURNS, session_date="8 May 2023, 1:56 pm", style=style)
    body = user["content"]
    assert "8 May 2023, 1:56 pm" in body
    assert "Caroline: I went to a support group yesterday." in body
    assert "Melanie: That's great! How was it?" in body
    assert "JSON list" in system["content"]
    focused = render_fact_input(
        TURNS, session_date="8 May 2023, 1:56 pm", about="Melanie", style=style
    )
    # `about` adds exactly one line, naming the person, before the dialogue.
    (extra,) = set(focused[1]["content"].splitlines()) - set(body.splitlines())
    assert "Melanie" in extra
    assert len(focused[1]["content"].splitlines()) == len(body.splitlines()) + 1
    assert focused[1]["content"].index(extra) < focused[1]["content"].index("Caroline:")


FACT_CASES = [
    ("canonical", '["Ann runs.", "Ann has a dog."]', ["Ann runs.", "Ann has a dog."], True),
    ("fenced_with_prose", 'Facts:\n```json\n["a", "b"]\n```\nDone [sic', ["a", "b"], True),
    ("facts_key", '{"facts": ["a"]}', ["a"], True),
    ("empty_list", "[]", [], True),
    ("non_strings_dropped", '["a", 3, "", null, "b"]', ["a", "b"], True),
    ("single_quotes", "['Ann's dog is Rex']", ["Ann's dog is Rex"], True),
    ("truncated", '["a", "b", "c', ["a", "b"], True),
    ("last_list_wins", '["draft"] then ["final"]', ["final"], True),
    ("prose_only", "Nothing to note.", [], False),
]


@pytest.mark.parametrize(
    "text, facts, found", [c[1:] for c in FACT_CASES], ids=[c[0] for c in FACT_CASES]
)
def test_parse_facts_table(text, facts, found):
    parsed = parse_facts(text)
    assert (parsed.facts, parsed.found) == (facts, found)


def test_parse_facts_counts_drops_and_truncation():
    parsed = parse_facts('["a", 3, "", "b", "c')
    assert (parsed.dropped, parsed.truncated) == (2, True)
    assert parse_facts(None).found is False  # type: ignore[arg-type]


def test_facts_round_trip():
    facts = ["Zoë moved to 東京 on 3 May 2023.", 'She said "hi"', "multi\nline"]
    assert parse_facts(format_facts_output(facts)).facts == [
        "Zoë moved to 東京 on 3 May 2023.",
        'She said "hi"',
        "multi line",
    ]


JSONISH_CASES = [
    ("strict", '{"a": [1, 2.5, true, null]}', {"a": [1, 2.5, True, None]}),
    ("python_literals", "{'a': (None)}", None),  # parentheses are not accepted
    ("python_literal_words", "{'a': [True, False, None]}", {"a": [True, False, None]}),
    ("trailing_commas", "[1, 2, ]", [1, 2]),
    ("bare_words", "{event: ADD, id: 3}", {"event": "ADD", "id": 3}),
    ("escaped_quote", r'["a\"b"]', ['a"b']),
    ("inner_quotes", '["He said "hi" to me"]', ['He said "hi" to me']),
    ("unknown_escape", r"['a\qb']", ["aqb"]),
    ("raw_newline", '["a\nb"]', ["a\nb"]),
    ("huge_number", "[" + "9" * 100 + "]", [float("inf")]),
    ("missing_comma", '{"a": 1 "b": 2}', None),
]


@pytest.mark.parametrize(
    "text, value", [c[1:] for c in JSONISH_CASES], ids=[c[0] for c in JSONISH_CASES]
)
def test_jsonish_values(text, value):
    found = [f.value for f in find_values(text) if f.start == 0]
    assert found == ([] if value is None else [value])


def test_partial_values_keep_complete_members():
    found = find_values('{"memory": [{"id": 1}, {"id": 2, "text": "cut')[0]
    assert not found.complete and isinstance(found.value, PartialDict)
    entries = found.value["memory"]
    assert isinstance(entries, PartialList)
    assert entries[0] == {"id": 1} and not isinstance(entries[0], PartialDict)
    assert isinstance(entries[1], PartialDict) and entries[1] == {"id": 2}


def test_scan_skips_nested_values_and_continues_after_failures():
    text = 'x {bad json} y ["s", {"k": [1]}] z {"k": 2}'
    assert [(f.value, f.start) for f in find_values(text)] == [
        (["s", {"k": [1]}], text.index("[")),
        ({"k": 2}, text.rindex("{")),
    ]


def test_depth_limit_and_adversarial_input_do_not_raise():
    # Too deep from the outer brackets; the innermost MAX_DEPTH + 1 levels are still read.
    nested = "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5)
    (found,) = find_values(nested)
    assert (found.start, found.complete) == (4, True)
    assert find_values("[" * 20000) == []
    # Thousands of unbalanced quotes: bounded work, still no exception.
    assert isinstance(find_values("['" * 5000), list)
