"""Prompt templates, chat rendering, manager input rendering and format -> parse round trips."""

from __future__ import annotations

import json
import string

import pytest

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
from memr1.env.prompts import AGENTS, STYLES, get_template, to_prompt_text

from .support import check_invariants, nonzero


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


@pytest.mark.parametrize("agent", AGENTS)
def test_both_styles_share_fields_and_output_format(agent):
    full, compact = get_template(agent, "full"), get_template(agent, "compact")
    assert _fields(full.user) == _fields(compact.user) and _fields(full.user)
    # System messages are sent verbatim: their JSON braces must survive rendering untouched.
    fields = dict.fromkeys(_fields(full.user), "X")
    assert full.render(**fields)[0]["content"] == full.system
    assert len(compact.system) * 3 < len(full.system)
    if agent.startswith("answer"):
        assert "**Answer:**" in full.system and "**Answer:**" in compact.system
    if agent == "manager":
        for text in (full.system, compact.system):
            assert '{"memory": [{"id": ' in text
            assert all(word in text for word in ("ADD", "UPDATE", "DELETE", "NONE", "old_memory"))


def test_unknown_agent_or_style():
    with pytest.raises(ValueError, match="agent"):
        get_template("judge")
    with pytest.raises(ValueError, match="style"):
        get_template("manager", "huge")


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]


def test_plain_chat_format():
    assert to_prompt_text(MESSAGES) == "System:\nBe brief.\n\nUser:\nHi?\n\nAssistant:\n"


class FakeTokenizer:
    """Records apply_chat_template calls; optionally refuses the system role like Gemma's."""

    def __init__(self, template="tpl", refuse_system=False):
        self.chat_template = template
        self.refuse_system = refuse_system
        self.calls = []

    def apply_chat_template(self, messages, **kwargs):
        self.calls.append((messages, kwargs))
        if self.refuse_system and any(m["role"] == "system" for m in messages):
            raise RuntimeError("System role not supported")
        return "|".join(f"{m['role']}={m['content']}" for m in messages)


def test_chat_template_is_applied_with_generation_prompt():
    tok = FakeTokenizer()
    assert to_prompt_text(MESSAGES, tok) == "system=Be brief.|user=Hi?"
    assert tok.calls[0][1] == {"add_generation_prompt": True, "tokenize": False}


def test_tokenizer_without_template_uses_plain_format():
    assert to_prompt_text(MESSAGES, FakeTokenizer(template=None)).startswith("System:\n")


def test_system_role_folded_into_user_when_refused():
    tok = FakeTokenizer(refuse_system=True)
    assert to_prompt_text(MESSAGES, tok) == "user=Be brief.\n\nHi?"
    assert len(tok.calls) == 2


def test_template_error_without_system_role_propagates():
    class Broken(FakeTokenizer):
        def apply_chat_template(self, messages, **kwargs):
            raise RuntimeError("broken template")

    with pytest.raises(RuntimeError, match="broken"):
        to_prompt_text([{"role": "user", "content": "x"}], Broken())
    with pytest.raises(RuntimeError, match="broken"):
        to_prompt_text(MESSAGES, Broken())


def test_real_hf_chat_template():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")),
        unk_token="<unk>",
    )
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    assert to_prompt_text(MESSAGES, tok) == "<system>Be brief.</s><user>Hi?</s><assistant>"


FACTS = ["Priya got a second cat, Tofu", "Priya moved to Leeds"]
RETRIEVED = [
    (905, "Priya has a cat called Miso"),
    (12, "Priya likes tea"),
    (905, "dup"),
    (3, "Priya swims"),
]


@pytest.mark.parametrize("style", STYLES)
def test_manager_input_renumbers_ids(style):
    (system, user), id_map = render_manager_input(FACTS, RETRIEVED, style=style)
    assert id_map == {0: 905, 1: 12, 2: 3}
    body = user["content"]
    assert "905" not in body and "12" not in body
    assert all(fact in body for fact in FACTS)
    assert "dup" not in body
    if style != "compact":
        shown = json.loads(body[body.index("[") : body.index("]") + 1])
        assert shown == [
            {"id": "0", "text": "Priya has a cat called Miso"},
            {"id": "1", "text": "Priya likes tea"},
            {"id": "2", "text": "Priya swims"},
        ]
    else:
        # The second cat collides with the top memory (cat, priya): marked, see below.
        shown = '0: "Priya has a cat called Miso" (related)\n1: "Priya likes tea"\n2: "Priya swims"'
        assert shown in body
    assert system["content"] == get_template("manager", style).system


@pytest.mark.parametrize("style", STYLES)
def test_manager_input_shows_the_session_date_only_when_given(style):
    (_, with_date), _ = render_manager_input(FACTS, RETRIEVED, style=style, session_date="8 May")
    (_, without), _ = render_manager_input(FACTS, RETRIEVED, style=style)
    assert "8 May" in with_date["content"]
    assert "Date" not in without["content"]
    assert with_date["content"].endswith(without["content"])


def test_manager_input_with_nothing_retrieved():
    for style in STYLES:
        (_, user), id_map = render_manager_input(["a fact"], [], style=style)
        assert id_map == {}
        assert "[]" in user["content"] or "(none)" in user["content"]


TEACHER_OPS = [
    ManagerOp(UPDATE, 905, "Priya has two cats, Miso and Tofu", "Priya has a cat called Miso"),
    ManagerOp(NOOP, 12, "Priya likes tea"),
    ManagerOp(DELETE, 3, "Priya swims"),
    ManagerOp(ADD, None, "Priya moved to Leeds"),
    ManagerOp(ADD, None, 'Priya said "hi" \u2014 in 東京 😀'),
]


@pytest.mark.parametrize("style", STYLES)
def test_manager_format_then_parse_round_trip(style):
    _, id_map = render_manager_input(FACTS, RETRIEVED, style=style)
    reply = format_manager_output(TEACHER_OPS, id_map, style=style)
    parsed = parse_manager_output(reply, id_map, new_fact_count=2)
    assert parsed.ops == TEACHER_OPS
    assert nonzero(parsed.counters) == {}
    check_invariants(parsed, id_map, 2)
    # Also inside a fence with prose, as a chat model would write it.
    fenced = parse_manager_output(f"Here you go:\n```json\n{reply}\n```", id_map, new_fact_count=2)
    assert fenced.ops == TEACHER_OPS


def test_format_manager_output_shape():
    _, id_map = render_manager_input(FACTS, RETRIEVED)
    full = format_manager_output(TEACHER_OPS, id_map, style="full")
    compact = format_manager_output(TEACHER_OPS, id_map, style="compact")
    assert json.loads(full) == json.loads(compact)
    assert "\n" not in compact and full.count("\n") == len(TEACHER_OPS) + 1
    entries = json.loads(full)["memory"]
    # ADDs take the ids after the shown ones; NOOP is written as Mem0's "NONE".
    assert [(e["id"], e["event"]) for e in entries] == [
        ("0", "UPDATE"), ("1", "NONE"), ("2", "DELETE"), ("3", "ADD"), ("4", "ADD")
    ]  # fmt: skip
    assert "old_memory" in entries[0] and all("old_memory" not in e for e in entries[1:])


def test_format_manager_output_rejects_unretrieved_targets():
    _, id_map = render_manager_input(FACTS, RETRIEVED)
    with pytest.raises(ValueError, match="not retrieved"):
        format_manager_output([ManagerOp(DELETE, 7)], id_map)
    with pytest.raises(ValueError, match="kind"):
        format_manager_output([ManagerOp("MERGE", 905)], id_map)


def test_compact_manager_input_keeps_one_memory_per_line():
    (_, user), _ = render_manager_input(["a\nfact"], [(5, "two\nlines")], style="compact")
    assert '0: "two lines"\n' in user["content"]
    assert '- "a fact"' in user["content"]


def test_compact_manager_input_marks_a_colliding_top_memory_only():
    fact = ["Ana moved from Denver to Austin yesterday."]
    shown = [(3, "Ana lives in Denver."), (5, "Ana moved from Denver to Austin in May.")]
    (_, user), _ = render_manager_input(fact, shown, style="compact")
    lines = user["content"].split("\n")
    # The top memory shares ana, denver (2 of its 3 content words): marked. The second overlaps
    # more, but only the top memory is the proxy's, as in collision.collision_score.
    assert '0: "Ana lives in Denver." (related)' in lines
    assert '1: "Ana moved from Denver to Austin in May."' in lines
    (_, user), _ = render_manager_input(["Ana likes jazz."], shown[:1], style="compact")
    assert '0: "Ana lives in Denver."' in user["content"].split("\n")
    (_, user), _ = render_manager_input(fact, shown, style="full")
    assert "related" not in user["content"]
