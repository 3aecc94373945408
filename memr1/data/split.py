"""The Memory-R1 split of LoCoMo: by conversation, in file order, adversarial questions removed.

Memory-R1 trains on one conversation, validates on the next and tests on the remaining eight
(ratio 1:1:8), after dropping category 5. On ``locomo10.json`` this gives train conv-26 with 152 QA,
validation conv-30 with 81 and test the other eight with 1,307 (categories 1/2/3/4: 239/258/83/727).
Splitting by conversation, never by question, keeps every test question about a dialogue the
agents never trained on.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

from memr1.data.categories import ADVERSARIAL
from memr1.data.records import Conversation

SPLITS = ("train", "validation", "test")
MEMORY_R1_RATIOS = (1, 1, 8)


def split_sizes(
    num_conversations: int, ratios: Sequence[float] = MEMORY_R1_RATIOS
) -> tuple[int, ...]:
    """Returns how many conversations each split gets.

    Sizes are the largest-remainder rounding of ``num_conversations * ratio / sum(ratios)`` (ties go
    to the earlier split). Then, when there are at least as many conversations as splits with a
    positive ratio, no such split is left empty: it takes one conversation from the largest split.
    So 10 conversations at 1:1:8 give (1, 1, 8) and 3 give (1, 1, 1).
    """
    if any(r < 0 for r in ratios) or sum(ratios) <= 0:
        raise ValueError(f"split ratios must be non-negative and not all zero, got {tuple(ratios)}")
    total = sum(ratios)
    exact = [num_conversations * r / total for r in ratios]
    sizes = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(ratios)), key=lambda i: (-(exact[i] - sizes[i]), i))
    for i in by_remainder[: num_conversations - sum(sizes)]:
        sizes[i] += 1
    positive = [i for i, r in enumerate(ratios) if r > 0]
    if num_conversations >= len(positive):
        for i in positive:
            if sizes[i] == 0:
                sizes[max(range(len(sizes)), key=lambda j: sizes[j])] -= 1
                sizes[i] = 1
    return tuple(sizes)


def drop_categories(conversation: Conversation, categories: Iterable[int]) -> Conversation:
    """Returns the conversation without the questions of the given categories."""
    dropped = frozenset(categories)
    kept = tuple(qa for qa in conversation.qa if qa.category not in dropped)
    return dataclasses.replace(conversation, qa=kept)


def split_conversations(
    conversations: Sequence[Conversation],
    ratios: Sequence[float] = MEMORY_R1_RATIOS,
    *,
    names: Sequence[str] = SPLITS,
    dropped_categories: Iterable[int] = (ADVERSARIAL,),
) -> dict[str, tuple[Conversation, ...]]:
    """Splits conversations by position, in the order given, into named parts.

    Args:
      conversations: the conversations in file order.
      ratios: relative sizes of the parts (Memory-R1: 1:1:8); see ``split_sizes``.
      names: one name per ratio.
      dropped_categories: question categories removed from every part (Memory-R1 drops 5).

    Returns:
      ``{name: conversations}``, each part a consecutive run of the input.
    """
    if len(names) != len(ratios):
        raise ValueError(f"{len(names)} split names for {len(ratios)} ratios")
    dropped = tuple(dropped_categories)
    parts, start = {}, 0
    for name, size in zip(names, split_sizes(len(conversations), ratios)):
        parts[name] = tuple(
            drop_categories(c, dropped) for c in conversations[start : start + size]
        )
        start += size
    return parts


def parse_ratios(text: str) -> tuple[float, ...]:
    """Reads ratios written ``"1:1:8"``; raises ValueError on anything else."""
    try:
        ratios = tuple(float(part) for part in text.split(":"))
    except ValueError:
        raise ValueError(f"cannot read split ratios {text!r}; expected e.g. '1:1:8'") from None
    if len(ratios) != len(SPLITS):
        raise ValueError(f"expected {len(SPLITS)} ratios (train:validation:test), got {text!r}")
    return ratios
