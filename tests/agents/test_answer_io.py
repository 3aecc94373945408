"""Answer Agent: final-answer and distilled-memory extraction tables, rendering, round trips."""

from __future__ import annotations

import pytest

from memr1.env.answer_io import (
    extract_distilled,
    extract_final_answer,
    format_answer_output,
    parse_answer_input,
    render_answer_input,
)
from memr1.env.prompts import STYLES

ANSWER_CASES = [
    (
        "canonical",
        "- 8 May 2023: Ann went hiking\n**Answer:** 29 April 2023",
        "29 April 2023",
        False,
    ),
    ("last_marker_wins", "**Answer:** Paris\nWait, newer memory.\n**Answer:** Rome", "Rome", False),
    (
        "marker_inside_memory_line",
        "- 3 June 2023: Bob wrote **Answer:** yes on the form\n**Answer:** a red bike",
        "a red bike",
        False,
    ),
    ("marker_only_in_last_memory_line", "- Bob wrote **Answer:** yes\nso no", "yes", False),
    ("no_marker_fallback", "  The answer is Rome.  \n", "The answer is Rome", True),
    ("mid_line_plain_answer_is_not_a_marker", "My answer: Rome", "My answer: Rome", True),
    ("bold_word_colon_outside", "**Answer**: Lisbon", "Lisbon", False),
    ("underscore_bold", "__Answer:__ Lisbon", "Lisbon", False),
    ("whole_answer_bold", "**Answer: Lisbon**", "Lisbon", False),
    ("plain_marker_at_line_start", "- memory\n  Answer: Lisbon", "Lisbon", False),
    ("final_answer", "**Final Answer:** three kids", "three kids", False),
    ("lower_case", "**answer:** three kids", "three kids", False),
    ("answer_on_next_line", "**Answer:**\n\n  7 May 2023\n", "7 May 2023", False),
    (
        "explanation_after",
        "**Answer:** 7 May 2023\nBecause the memory says so.",
        "7 May 2023",
        False,
    ),
    ("quotes_and_period", '**Answer:** "Paris."', "Paris", False),
    ("curly_quotes", "**Answer:** \u201cthe Smiths\u201d", "the Smiths", False),
    ("code_marks", "**Answer:** `42`", "42", False),
    ("bullet_after_marker", "**Answer:**\n- Paris", "Paris", False),
    ("inner_punctuation_kept", "**Answer:** Dr. Who, Jr.", "Dr. Who, Jr", False),
    ("unicode", "**Answer:** 東京 🗼", "東京 🗼", False),
    ("marker_with_nothing_after", "- memory\n**Answer:**", "", False),
    ("empty_reply", "", "", True),
    ("think_block_dropped", "<think>**Answer:** A</think>\nB.", "B", True),
    ("think_then_marker", "<think>maybe A</think>**Answer:** B", "B", False),
    ("unclosed_think_is_text", "<think>**Answer:** A", "A", False),
]


@pytest.mark.parametrize(
    "text, answer, fallback", [c[1:] for c in ANSWER_CASES], ids=[c[0] for c in ANSWER_CASES]
)
def test_extract_final_answer_table(text, answer, fallback):
    assert extract_final_answer(text) == (answer, fallback)


DISTILLED_CASES = [
    ("bullets", "- a memory\n- b memory\n**Answer:** x", ["a memory", "b memory"]),
    ("heading_dropped", "**Useful memories:**\n* a\n\n* b\n**Answer:** x", ["a", "b"]),
    (
        "numbered",
        "1. 8 May 2023: Ann ran.\n2) Bob swam\n**Answer:** x",
        ["8 May 2023: Ann ran", "Bob swam"],
    ),
    ("only_before_last_marker", "- a\n**Answer:** x\n- b\n**Answer:** y\n- c", ["a", "b"]),
    ("marker_line_prefix_excluded", "- a\nSo, **Answer:** x", ["a"]),
    ("no_marker", "- a\n- b", []),
    ("answer_only", "**Answer:** x", []),
]


@pytest.mark.parametrize(
    "text, lines", [c[1:] for c in DISTILLED_CASES], ids=[c[0] for c in DISTILLED_CASES]
)
def test_extract_distilled_table(text, lines):
    assert extract_distilled(text) == lines


def test_non_string_replies():
    assert extract_final_answer(None) == ("", True)  # type: ignore[arg-type]
    assert extract_distilled(None) == []  # type: ignore[arg-type]


MEMORIES = {
    "Caroline": [("8 May 2023, 1:56 pm", "Caroline went to a support group yesterday")],
    "Melanie": [
        ("25 May 2023, 1:14 pm", "Melanie ran a charity race"),
        ("9 June 2023, 10:37 am", "Melanie signed up for a pottery\nclass"),
    ],
}


@pytest.mark.parametrize("style", STYLES)
def test_render_shows_both_speakers_with_timestamps(style):
    system, user = render_answer_input("When did Caroline go?", MEMORIES, style=style)
    assert (system["role"], user["role"]) == ("system", "user")
    body = user["content"]
    assert "Caroline" in body and "Melanie" in body
    assert "8 May 2023, 1:56 pm: Caroline went to a support group yesterday" in body
    # A memory is always one line: an embedded newline would read as two memories.
    assert "9 June 2023, 10:37 am: Melanie signed up for a pottery class" in body
    assert body.index("25 May 2023") < body.index("9 June 2023")
    assert body.rstrip().endswith("When did Caroline go?")
    assert "**Answer:**" in system["content"]


def test_render_speaker_order_and_empty_banks():
    _, user = render_answer_input("q?", {"Zed": [], "Amy": [("1 Jan 2023", "Amy skis")]})
    body = user["content"]
    assert body.index("Zed") < body.index("Amy")
    assert "(none)" in body
    _, user = render_answer_input("q?", {})
    assert "(no memories)" in user["content"]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("distill", [True, False])
def test_parse_answer_input_inverts_render(style, distill):
    memories = {
        "Zed": [],
        "Maria": [("2:55 am on 13 August, 2023", "Maria has two cats: Luna and Toby.")],
        **MEMORIES,
    }
    chat = render_answer_input(
        "What are  the names of\nMaria's cats?", memories, style=style, distill=distill
    )
    question, parsed = parse_answer_input(chat, style=style)
    assert question == "What are the names of Maria's cats?"
    # Newlines inside a memory are collapsed, as the agent sees them.
    want = {k: [(t, " ".join(m.split())) for t, m in v] for k, v in memories.items()}
    assert parsed == want and list(parsed) == list(memories)
    assert parse_answer_input(render_answer_input("q?", {}, style=style), style=style) == ("q?", {})


def test_parse_answer_input_names_what_it_cannot_read():
    with pytest.raises(ValueError, match="no user message"):
        parse_answer_input([{"role": "system", "content": "x"}], style="compact")
    with pytest.raises(ValueError, match="no 'Q:' line"):
        parse_answer_input([{"role": "user", "content": "Amy:\nQuestion: q?"}], style="compact")
    with pytest.raises(ValueError, match="cannot read the line 'a stray line'"):
        parse_answer_input([{"role": "user", "content": "a stray line\nQ: q?"}], style="compact")


@pytest.mark.parametrize("style", STYLES)
def test_distill_flag_changes_the_instructions(style):
    full = render_answer_input("q?", MEMORIES, distill=True, style=style)
    direct = render_answer_input("q?", MEMORIES, distill=False, style=style)
    assert full[1] == direct[1]  # same memories and question
    assert "**Answer:**" in direct[0]["content"]
    if style == "paper":  # the paper's numbered instructions: write out the memories first
        assert "write out the memories" in full[0]["content"]
        assert "write out the memories" not in direct[0]["content"]
        return
    assert "- " in full[0]["content"] and "memor" in full[0]["content"]
    assert "copy out" not in direct[0]["content"] and "'- '" not in direct[0]["content"]


def test_compact_is_much_shorter():
    full = render_answer_input("q?", MEMORIES, style="full")
    compact = render_answer_input("q?", MEMORIES, style="compact")
    assert len(compact[0]["content"]) * 3 < len(full[0]["content"])
    assert len(compact[1]["content"]) < len(full[1]["content"])


def test_unknown_style_is_rejected():
    with pytest.raises(ValueError, match="style"):
        render_answer_input("q?", MEMORIES, style="tiny")


@pytest.mark.parametrize(
    "distilled, answer",
    [
        (["8 May 2023, 1:56 pm: Caroline went to a support group", "Bob likes tea"], "7 May 2023"),
        ([], "Paris"),
        (["multi\nline   memory"], "two  words"),
        (["Zoë visited 東京"], "東京"),
    ],
)
def test_format_then_extract_round_trip(distilled, answer):
    reply = format_answer_output(distilled, answer)
    assert extract_final_answer(reply) == (" ".join(answer.split()), False)
    assert extract_distilled(reply) == [" ".join(line.split()) for line in distilled]


def test_format_answer_output_shape():
    assert format_answer_output(["a", "  "], "x") == "- a\n**Answer:** x"
    assert format_answer_output([], "x") == "**Answer:** x"
