"""Fact extraction ("LLMExtract"): prompt rendering, reply parsing and target formatting.

The extractor reads a stretch of dialogue (usually one turn or a pair of turns) and replies with
one JSON list of short third-person sentences. Parsing never raises: it takes the last list of
strings found in the reply (or the list under a "facts" key), drops items that are not non-empty
strings, and reports whether any list was found at all.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from memr1.env.jsonish import PartialList, find_values
from memr1.env.prompts import Message, check_style, get_template, one_line


@dataclass(frozen=True)
class ParsedFacts:
    """Facts read from one extractor reply.

    Attributes:
      facts: the facts, stripped, in reply order.
      found: False when the reply held no readable list (the facts are then empty).
      dropped: items of the list that were not non-empty strings.
      truncated: the list was cut off by the end of the reply.
    """

    facts: list[str]
    found: bool
    dropped: int = 0
    truncated: bool = False


def render_fact_input(
    turns: Sequence[tuple[str, str]],
    *,
    session_date: str,
    about: str | None = None,
    style: str = "full",
) -> list[Message]:
    """The extractor's chat messages.

    Args:
      turns: ``(speaker, utterance)`` pairs in dialogue order; a shared picture is best passed as
        part of the utterance, e.g. ``"[shares a photo of a lake] We went here!"``.
      session_date: the session's date and time as text, used to resolve relative dates.
      about: when given, only facts about this person are asked for (one bank per speaker).
      style: "full", "compact" or "paper" (the full style's prompt).

    Returns:
      ``[system, user]`` messages.
    """
    check_style(style)
    dialogue = "\n".join(f"{one_line(speaker)}: {one_line(text)}" for speaker, text in turns)
    if about is None:
        focus = ""
    elif style != "compact":
        focus = f"List only facts about {one_line(about)}.\n"
    else:
        focus = f"About: {one_line(about)}\n"
    return get_template("facts", style).render(
        session_date=one_line(session_date), focus=focus, dialogue=dialogue or "(empty)"
    )


def format_facts_output(facts: Sequence[str]) -> str:
    """The reply an extractor should write for ``facts``: one JSON list (SFT targets)."""
    return json.dumps([one_line(fact) for fact in facts if one_line(fact)], ensure_ascii=False)


def _fact_list(value) -> list | None:
    if isinstance(value, dict):
        for key, held in value.items():
            if str(key).strip().lower() == "facts" and isinstance(held, list):
                return held
        return None
    # A list of scalars; a list holding objects or lists is some other structure.
    if isinstance(value, list) and not any(isinstance(item, (dict, list)) for item in value):
        return value
    return None


def parse_facts(text: str) -> ParsedFacts:
    """Reads the facts out of an extractor reply; never raises.

    The last ``{"facts": [...]}`` list or list of strings in the reply wins, as a model that
    drafts writes its final list last.
    """
    if not isinstance(text, str):
        return ParsedFacts([], found=False)
    candidates = []
    for found in find_values(text):
        held = _fact_list(found.value)
        # An empty cut-off list is what an unbalanced quote in trailing prose looks like.
        if held is not None and (held or found.complete):
            candidates.append(held)
    if not candidates:
        return ParsedFacts([], found=False)
    chosen = candidates[-1]
    facts = [item.strip() for item in chosen if isinstance(item, str) and item.strip()]
    return ParsedFacts(
        facts,
        found=True,
        dropped=len(chosen) - len(facts),
        truncated=isinstance(chosen, PartialList),
    )
