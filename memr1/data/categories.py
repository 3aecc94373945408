"""LoCoMo question categories under the two labellings found in the literature.

The LoCoMo data itself means 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
5 adversarial. Mem0's and Memory-R1's tables print the same numbers as 1 single-hop, 2 temporal,
3 multi-hop, 4 open-domain; only that labelling reproduces their "Overall" figures from their
per-type columns, so tables compared with those papers must use it (and say so).
"""

from __future__ import annotations

LABELLINGS: dict[str, dict[int, str]] = {
    # What the LoCoMo authors' data means by each number.
    "locomo": {
        1: "multi-hop",
        2: "temporal",
        3: "open-domain",
        4: "single-hop",
        5: "adversarial",
    },
    # How Mem0 and Memory-R1 label the same numbers in their result tables.
    "mem0": {
        1: "single-hop",
        2: "temporal",
        3: "multi-hop",
        4: "open-domain",
        5: "adversarial",
    },
}

ADVERSARIAL = 5
VALID_CATEGORIES = frozenset(LABELLINGS["locomo"])


def category_name(category: int, labelling: str = "mem0") -> str:
    """Returns the name of a LoCoMo category number under a named labelling."""
    if labelling not in LABELLINGS:
        raise ValueError(
            f"unknown category labelling {labelling!r}; expected one of {sorted(LABELLINGS)}"
        )
    names = LABELLINGS[labelling]
    if category not in names:
        raise ValueError(f"unknown LoCoMo category {category!r}; expected one of {sorted(names)}")
    return names[category]
