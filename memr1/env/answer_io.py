"""Answer Agent input rendering, extraction of its distilled memories and final answer, and
target formatting.

The reply format the prompts ask for (both styles)::

    - <useful memory>
    - <useful memory>
    **Answer:** <short answer>

The no-distillation ablation asks for the last line only.

Marker rule. A *marker* is the word "answer" (any case, optionally preceded by "final") followed
by a colon, where either

  * the word is opened by ``**`` or ``__`` (bold), the closing bold coming before or after the
    colon or not at all: ``**Answer:**``, ``**Answer**:``, ``__answer:__``, ``**Final Answer: x**``;
  * or the word starts a line (after spaces or tabs): ``Answer: x``, ``final answer: x``.

Only the LAST marker counts, so memory lines that quote an earlier answer, and drafts, are
skipped. The answer is the first non-empty line after that marker, with surrounding whitespace,
bold/italic/code markers, quotes, a list bullet, and trailing ``. , ; : !`` removed. Without any
marker the answer is the whole reply cleaned the same way, and ``used_fallback`` is True. Closed
``<think>...</think>`` blocks are dropped before anything else, so reasoning models are read by
their final text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from memr1.env.prompts import (
    ANSWER_MARKER,
    Message,
    Shrinkable,
    check_style,
    get_template,
    one_line,
)

_MARKER = re.compile(
    r"(?:\*\*|__)[ \t]*(?:final[ \t]+)?answer[ \t]*(?:\*\*|__)?[ \t]*:[ \t]*(?:\*\*|__)?"
    r"|^[ \t]*(?:final[ \t]+)?answer[ \t]*:[ \t]*(?:\*\*|__)?",
    re.IGNORECASE | re.MULTILINE,
)
_EDGE_CHARS = " \t\r\n*_`\"'\u201c\u201d\u2018\u2019\u00ab\u00bb"
_TRAILING_PUNCT = ".,;:!"
_BULLET = re.compile(r"^(?:[-\u2022*]|\d{1,3}[.)])[ \t]+")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def _drop_think(text: str) -> str:
    """Removes closed ``<think>...</think>`` blocks (an unclosed one is left as text)."""
    out, i = [], 0
    while True:
        start = text.find(_THINK_OPEN, i)
        end = text.find(_THINK_CLOSE, start + len(_THINK_OPEN)) if start >= 0 else -1
        if end < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:start])
        i = end + len(_THINK_CLOSE)


def _clean(text: str) -> str:
    """Strips whitespace, markdown emphasis and code marks, quotes, a bullet and end punctuation."""
    previous = None
    while text != previous:
        previous = text
        # str.strip() first: it knows every Unicode space (no-break, ideographic, ...).
        text = _BULLET.sub("", text.strip().strip(_EDGE_CHARS)).rstrip(_TRAILING_PUNCT)
    return text


def _last_marker(text: str) -> re.Match | None:
    matches = list(_MARKER.finditer(text))
    return matches[-1] if matches else None


def extract_final_answer(text: str) -> tuple[str, bool]:
    """The answer written after the last marker (see the module docstring for the rule).

    Returns:
      ``(answer, used_fallback)``; ``used_fallback`` is True when the reply had no marker and the
      whole reply (cleaned) stands in for the answer. A marker with nothing after it gives "".
    """
    if not isinstance(text, str):
        return "", True
    text = _drop_think(text)
    marker = _last_marker(text)
    if marker is None:
        return _clean(text), True
    for line in text[marker.end() :].splitlines():
        answer = _clean(line)
        if answer:
            return answer, False
    return "", False


def extract_distilled(text: str) -> list[str]:
    """The memory lines the agent wrote before its answer.

    These are the lines strictly before the line holding the last marker, each cleaned like the
    answer (bullets, emphasis, quotes, end punctuation), without empty lines, heading lines that
    end in a colon ("Useful memories:") and lines holding an earlier marker (answer drafts). A
    reply without a marker gives [], since its memory lines cannot be told apart from the answer.
    """
    if not isinstance(text, str):
        return []
    text = _drop_think(text)
    marker = _last_marker(text)
    if marker is None:
        return []
    line_start = text.rfind("\n", 0, marker.start()) + 1
    lines = []
    for raw in text[:line_start].splitlines():
        if raw.strip().strip("*_ \t").endswith(":") or _MARKER.search(raw):
            continue
        line = _clean(raw)
        if line:
            lines.append(line)
    return lines


def render_memory_lines(memories: Sequence[tuple[str, str]]) -> str:
    """``"<timestamp>: <memory>"`` lines, one per memory, in the given order."""
    return "\n".join(f"{one_line(stamp)}: {one_line(memory)}" for stamp, memory in memories)


def render_answer_input(
    question: str,
    memories_by_speaker: Mapping[str, Sequence[tuple[str, str]]],
    *,
    distill: bool = True,
    style: str = "full",
) -> list[Message]:
    """The Answer Agent's chat messages.

    Args:
      question: the question.
      memories_by_speaker: speaker name -> ``(session timestamp text, memory)`` pairs, e.g. the
        top 30 of each speaker's bank; speakers and memories are shown in the given order.
      distill: ask for the useful memories before the answer (the paper's agent); False renders
        the no-distillation ablation, which asks for the answer line only.
      style: "full", "compact" or "paper".

    Returns:
      ``[system, user]`` messages.
    """
    check_style(style)
    blocks = []
    for speaker, memories in memories_by_speaker.items():
        lines = render_memory_lines(memories) or "(none)"
        if style == "paper" and memories:  # the paper's layout: one "- " bullet a memory
            lines = "\n".join(f"{_BULLET_MARK}{line}" for line in lines.split("\n"))
        blocks.append(f"{_header(speaker, style)}\n{lines}")
    separator = "\n" if style == "compact" else "\n\n"
    memories_text = separator.join(blocks) or "(no memories)"
    agent = "answer" if distill else "answer_direct"
    return get_template(agent, style).render(memories=memories_text, question=one_line(question))


def answer_prompt(
    question: str,
    memories_by_speaker: Mapping[str, Sequence[tuple[str, str]]],
    *,
    distill: bool = True,
    style: str = "full",
) -> Shrinkable:
    """`render_answer_input` as a prompt whose lowest-ranked memories go first when it is over
    the token budget: memories are dropped by rank, the last of every speaker's list before any
    speaker's second-last, so both speakers keep their best; the instructions, the speakers'
    headers and the question always stay."""
    lists = {speaker: list(memories) for speaker, memories in memories_by_speaker.items()}
    # (rank, speaker order): the order in which memories are kept.
    order = sorted(
        (rank, i) for i, memories in enumerate(lists.values()) for rank in range(len(memories))
    )

    def build(keep: int) -> list[Message]:
        ranks = [0] * len(lists)
        for _, i in order[:keep]:
            ranks[i] += 1
        kept = {s: m[:r] for (s, m), r in zip(lists.items(), ranks, strict=True)}
        return render_answer_input(question, kept, distill=distill, style=style)

    return Shrinkable(build=build, n=len(order))


_HEADERS = {"full": "Memories of {}:", "paper": "Memories for user {}:", "compact": "{}:"}
_BULLET_MARK = "- "


def _header(speaker: str, style: str) -> str:
    return _HEADERS[style].format(speaker)


def parse_answer_input(
    messages: Sequence[Message], *, style: str = "full"
) -> tuple[str, dict[str, list[tuple[str, str]]]]:
    """The question and memories of a chat ``render_answer_input`` wrote (its inverse).

    For readers that are not language models (the demo's rule reader) and that must see exactly
    what the Answer Agent sees. Memory lines split at their first ": " (timestamps contain none).

    Returns:
      (question, speaker -> [(timestamp, memory), ...]) in the rendered order.

    Raises:
      ValueError naming the line that is not a header, a memory or "(none)".
    """
    check_style(style)
    user = next((m["content"] for m in messages if m["role"] == "user"), None)
    if user is None:
        raise ValueError("answer input: no user message")
    # The text between {memories} and {question} in the user template ("\nQ: " in compact).
    template = get_template("answer", style).user
    lead = template.split("{memories}", 1)[1].split("{question}", 1)[0]
    memories_text, found, question = user.rpartition(lead)
    if not found:
        raise ValueError(f"answer input: no {lead.strip()!r} line before the question")
    memories: dict[str, list[tuple[str, str]]] = {}
    speaker = None
    prefix = _HEADERS[style].split("{}")[0]
    for line in memories_text.split("\n"):
        if not line or line == "(no memories)":
            continue
        if style == "paper" and line.startswith(_BULLET_MARK):
            line = line[len(_BULLET_MARK) :]
        name = line[len(prefix) : -1]
        # A header; a memory line ending in ":" still has the ": " after its timestamp.
        if ": " not in line and line == _header(name, style):
            speaker = name
            memories[speaker] = []
        elif speaker is not None and line == "(none)":
            continue
        elif speaker is not None and ": " in line:
            stamp, _, text = line.partition(": ")
            memories[speaker].append((stamp, text))
        else:
            raise ValueError(f"answer input: cannot read the line {line!r}")
    return question, memories


def format_answer_output(distilled: Sequence[str], answer: str) -> str:
    """The reply an Answer Agent should write: SFT targets and test inputs.

    Each distilled memory becomes a ``- `` line and the answer follows the marker on the last
    line; with no distilled memories (the ablation format) the reply is the answer line alone.
    Whitespace inside a memory or the answer is collapsed to single spaces.
    """
    lines = [f"- {one_line(memory)}" for memory in distilled if one_line(memory)]
    lines.append(f"{ANSWER_MARKER} {one_line(answer)}")
    return "\n".join(lines)
