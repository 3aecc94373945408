"""Memory Manager input rendering and target formatting; its replies are read by
`memr1.env.manager_read` (re-exported here: the op types, `ManagerRules`, `parse_manager_output`).

The manager sees the retrieved memories under ids 0..k-1, not their bank ids, so a model cannot
learn or guess real ids; ``id_map`` maps the shown ids back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from memr1.env.collision import COLLIDES, collision_score
from memr1.env.manager_read import (
    ADD,
    COUNTER_KINDS,
    DELETE,
    KINDS,
    MEMR1_RULES,
    NOOP,
    REPEATED_ID_RULES,
    UPDATE,
    ManagerOp,
    ManagerRules,
    ParsedOps,
    parse_manager_output,
)
from memr1.env.prompts import Message, check_style, get_template, one_line

__all__ = [
    "ADD",
    "COUNTER_KINDS",
    "DELETE",
    "KINDS",
    "MEMR1_RULES",
    "NOOP",
    "REPEATED_ID_RULES",
    "UPDATE",
    "ManagerOp",
    "ManagerRules",
    "ParsedOps",
    "format_manager_output",
    "parse_manager_output",
    "render_manager_input",
]

_EVENT_SPELLING = {ADD: "ADD", UPDATE: "UPDATE", DELETE: "DELETE", NOOP: "NONE"}


def _json_rows(items: Sequence) -> str:
    """A JSON list with one item per line: readable, and far fewer tokens than full indenting."""
    if not items:
        return "[]"
    rows = ",\n".join("  " + json.dumps(item, ensure_ascii=False) for item in items)
    return f"[\n{rows}\n]"


def _quoted(text: str) -> str:
    """One line of text as a JSON string, the form it takes in the reply's "text" field."""
    return json.dumps(one_line(text), ensure_ascii=False)


def render_manager_input(
    facts: Sequence[str],
    retrieved: Sequence[tuple[int, str]],
    *,
    style: str = "full",
    session_date: str | None = None,
) -> tuple[list[Message], dict[int, int]]:
    """The manager's chat messages for a set of new facts.

    Args:
      facts: the new facts of the turn.
      retrieved: ``(real_id, text)`` of the memories retrieved for those facts; a real id that
        appears twice is shown once, at its first position.
      style: "full" or "compact". The compact style, for the tiny demo models, also marks the
        top shown memory " (related)" when the turn collides with it (the label-free proxy of
        `memr1.env.collision`, score >= COLLIDES): a 4-layer warm start did not learn to compare a
        fact with a shown memory by itself, and chose ADD as often at a collision as for a new
        fact (docs/demo.md, 2026-12-03). The full style shows what the paper's prompt shows.
      session_date: when the facts were said (the session's date as text); the manager needs it
        to turn relative time in a fact into a date in the memory. Omitted when None.

    Returns:
      ``(messages, id_map)`` where ``id_map[shown_id] = real_id`` and the shown ids are 0..k-1
      in retrieval order.
    """
    check_style(style)
    id_map: dict[int, int] = {}
    shown: list[tuple[int, str]] = []
    seen: set[int] = set()
    for real_id, text in retrieved:
        if int(real_id) in seen:
            continue
        seen.add(int(real_id))
        id_map[len(shown)] = int(real_id)
        shown.append((len(shown), text))
    if style == "full":
        memories = _json_rows([{"id": str(i), "text": text} for i, text in shown])
        fact_block = _json_rows(list(facts))
    elif style == "paper":
        # Mem0's layout: the old memory as a JSON list, the facts as one JSON list on the line.
        memories = _json_rows([{"id": str(i), "text": text} for i, text in shown])
        fact_block = json.dumps([one_line(fact) for fact in facts], ensure_ascii=False)
    else:
        # Quoted as the reply will quote them: a byte-level BPE cuts "Nadia after a quote and
        # " Nadia" after a space into different tokens, so an unquoted fact would have to be
        # copied into the JSON reply through a change of token (docs/demo.md).
        lines = [f"{i}: {_quoted(text)}" for i, text in shown]
        if lines and collision_score(facts, [text for _, text in shown]) >= COLLIDES:
            lines[0] += " (related)"
        memories = "\n".join(lines) or "(none)"
        fact_block = "\n".join(f"- {_quoted(fact)}" for fact in facts) or "(none)"
    if session_date is None:
        date_line = ""
    elif style != "compact":
        date_line = f"Date of the conversation: {one_line(session_date)}\n\n"
    else:
        date_line = f"Date: {one_line(session_date)}\n"
    messages = get_template("manager", style).render(
        memories=memories, facts=fact_block, date_line=date_line
    )
    return messages, id_map


def format_manager_output(
    ops: Sequence[ManagerOp],
    id_map: Mapping[int, int],
    *,
    style: str = "full",
    op_first: bool = False,
) -> str:
    """The reply a manager should write for ``ops`` (in real ids): SFT targets and test inputs.

    ADD entries get the shown ids after the retrieved ones (k, k+1, ...), as the prompt asks.
    "full" and "paper" write one entry per line; "compact" the whole object on one line.
    ``op_first`` writes each entry's "event" first (the paper's order puts it after the text):
    a policy sampling such a reply chooses its operation on the entry's first word, where the
    other order chooses it after the id and the text. The parser reads either order.

    Raises:
      ValueError: an UPDATE, DELETE or targeted NOOP names a real id that is not in ``id_map``,
        or an op has an unknown kind.
    """
    check_style(style)
    shown_of = {real: shown for shown, real in id_map.items()}
    next_new = max(id_map, default=-1) + 1
    entries = []
    for op in ops:
        if op.kind not in KINDS:
            raise ValueError(f"op kind {op.kind!r} is not one of {KINDS}")
        if op.kind == ADD or (op.kind == NOOP and op.target is None):
            shown_id, next_new = next_new, next_new + 1
        elif op.target in shown_of:
            shown_id = shown_of[op.target]
        else:
            raise ValueError(f"{op.kind} targets memory {op.target}, which was not retrieved")
        entry = {"id": str(shown_id), "text": op.text}
        if op_first:
            entry = {"event": _EVENT_SPELLING[op.kind], **entry}
        else:
            entry["event"] = _EVENT_SPELLING[op.kind]
        if op.kind == UPDATE and op.old_memory is not None:
            entry["old_memory"] = op.old_memory
        entries.append(entry)
    if style != "compact":
        return '{"memory": ' + _json_rows(entries) + "}"
    return json.dumps({"memory": entries}, ensure_ascii=False)
