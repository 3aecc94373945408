"""The scorer shipped with the LoCoMo benchmark, offered as a second, named scorer.

It differs from the Mem0 harness (``metrics.py``) that memory papers report: answers are
normalised (punctuation and the words a/an/the/and removed), Porter-stemmed, and compared as token
*multisets*; and each question category has its own rule. Category numbers here are the data's own
(1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial), whatever labelling a
results table later prints them under.
"""

from __future__ import annotations

import functools
import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from memr1.data.categories import VALID_CATEGORIES

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_DROPPED_WORDS = re.compile(r"\b(a|an|the|and)\b")
# An adversarial question is answered correctly by declining; these are the two phrasings the
# LoCoMo scorer accepts, matched anywhere in the lowercased output.
_REFUSAL_PHRASES = ("no information available", "not mentioned")


def normalize_answer(text: str) -> str:
    """Lowercase, delete ASCII punctuation, drop a/an/the/and, collapse whitespace."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_DROPPED_WORDS.sub(" ", text).split())


@functools.cache
def _stemmer() -> Any:
    """NLTK's Porter stemmer, imported on first use (`import nltk` loads scipy.stats)."""
    from nltk.stem import PorterStemmer

    return PorterStemmer()


def stemmed_tokens(text: str) -> list[str]:
    """Porter stems of the normalised answer's words."""
    stem = _stemmer().stem
    return [stem(word) for word in normalize_answer(text).split()]


def token_f1(prediction: str, gold: str) -> float:
    """F1 over stemmed token multisets (a token repeated in both counts as often as it matches)."""
    pred_tokens, gold_tokens = stemmed_tokens(prediction), stemmed_tokens(gold)
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(prediction: str, gold: str) -> float:
    """Mean over the gold's comma-separated parts of the best F1 against any predicted part."""
    pred_parts = [p.strip() for p in prediction.split(",")]
    gold_parts = [g.strip() for g in gold.split(",")]
    return float(np.mean([max(token_f1(p, g) for p in pred_parts) for g in gold_parts]))


def locomo_score(prediction: Any, gold: Any, category: int) -> float:
    """Scores one answer under LoCoMo's per-category rule.

    Args:
      prediction: the model's answer (stringified).
      gold: the gold answer (stringified); ignored, and may be None, for category 5.
      category: the LoCoMo category number in the data's own labelling (1..5).

    Returns:
      A score in [0, 1]: multi-answer F1 (category 1), F1 against the gold before its first ';'
      (category 3), plain F1 (categories 2 and 4), refusal detection (category 5).
    """
    if category not in VALID_CATEGORIES:
        raise ValueError(
            f"LoCoMo scorer got category {category!r}; expected one of {sorted(VALID_CATEGORIES)}"
        )
    output = "" if prediction is None else str(prediction)
    if category == 5:
        lowered = output.lower()
        return float(any(phrase in lowered for phrase in _REFUSAL_PHRASES))
    if gold is None:
        raise ValueError(f"LoCoMo scorer got no gold answer for a category-{category} question")
    reference = str(gold)
    if category == 1:
        return multi_answer_f1(output, reference)
    if category == 3:
        # Open-domain golds often append a justification after ';' that is not part of the answer.
        reference = reference.split(";")[0].strip()
    return token_f1(output, reference)


def locomo_scores(
    predictions: Sequence[Any], golds: Sequence[Any], categories: Sequence[int]
) -> np.ndarray:
    """Scores aligned lists; returns f64[Q] with ``locomo_score`` of each question."""
    if not len(predictions) == len(golds) == len(categories):
        raise ValueError(
            "locomo_scores needs lists of the same length; got "
            f"{len(predictions)} predictions, {len(golds)} golds, {len(categories)} categories"
        )
    return np.asarray(
        [locomo_score(p, g, c) for p, g, c in zip(predictions, golds, categories)],
        dtype=np.float64,
    )
