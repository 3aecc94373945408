"""Answer metrics exactly as the Mem0 / A-Mem evaluation harness computes them.

These are the numbers the Memory-R1 and Mem0 papers report as EM, F1 and BLEU-1, so every quirk
of that harness is kept on purpose: F1 is over token *sets* (repeats do not count), only the four
characters ``. , ! ?`` separate tokens for F1, and BLEU-1 includes NLTK's brevity penalty.

One deliberate deviation: the harness tokenises for BLEU with ``nltk.word_tokenize``, which first
splits sentences with the punkt model. That model is downloadable data we cannot fetch, so we call
``NLTKWordTokenizer`` directly. For a one-sentence answer the tokens are identical; for an answer
with several sentences a period inside the text stays glued to its word ("paris." instead of
"paris" ".") where punkt would have split it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_F1_SEPARATORS = str.maketrans({".": " ", ",": " ", "!": " ", "?": " "})


@dataclass(frozen=True)
class AnswerScores:
    """The three harness metrics of one answer, each in [0, 1]."""

    em: float
    f1: float
    bleu1: float


def _clean(text: Any) -> str:
    # The harness calls str() on both sides (LoCoMo has integer answers such as 2022); None is
    # treated as a missing answer rather than the string "None".
    return "" if text is None else str(text).strip()


def f1_tokens(text: str) -> list[str]:
    """Tokens used for F1: lowercase, ``. , ! ?`` turned into spaces, split on whitespace."""
    return text.lower().translate(_F1_SEPARATORS).split()


@functools.cache
def _nltk_bleu() -> tuple[Any, Any, Any]:
    """NLTK's word tokenizer, sentence_bleu and smoothing method 1, imported on first use:
    `import nltk` loads scipy.stats (~1.4 s of CPU), which the trainer's processes, scoring EM
    and F1 only, never need."""
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    return NLTKWordTokenizer(), sentence_bleu, SmoothingFunction().method1


def bleu_tokens(text: str) -> list[str]:
    """Tokens used for BLEU-1: NLTK's Treebank-style word tokens of the lowercased text."""
    return _nltk_bleu()[0].tokenize(text.lower())


def exact_match(prediction: Any, gold: Any) -> float:
    """1.0 iff the stripped strings are equal ignoring case; 0.0 if either is empty."""
    pred, ref = _clean(prediction), _clean(gold)
    if not pred or not ref:
        return 0.0
    return float(pred.lower() == ref.lower())


def token_f1(prediction: Any, gold: Any) -> float:
    """Harmonic mean of precision and recall over the two token sets (see ``f1_tokens``)."""
    pred, ref = _clean(prediction), _clean(gold)
    if not pred or not ref:
        return 0.0
    pred_set, ref_set = set(f1_tokens(pred)), set(f1_tokens(ref))
    if not pred_set or not ref_set:
        return 0.0
    common = len(pred_set & ref_set)
    if common == 0:
        return 0.0
    precision = common / len(pred_set)
    recall = common / len(ref_set)
    return 2 * precision * recall / (precision + recall)


def bleu1(prediction: Any, gold: Any) -> float:
    """Sentence BLEU with unigram weights only and smoothing method 1, brevity penalty included."""
    pred, ref = _clean(prediction), _clean(gold)
    if not pred or not ref:
        return 0.0
    pred_tokens, ref_tokens = bleu_tokens(pred), bleu_tokens(ref)
    if not pred_tokens or not ref_tokens:
        return 0.0
    _, sentence_bleu, smoothing = _nltk_bleu()
    score = sentence_bleu(
        [ref_tokens], pred_tokens, weights=(1, 0, 0, 0), smoothing_function=smoothing
    )
    return float(score)


def score_answer(prediction: Any, gold: Any) -> AnswerScores:
    """All three harness metrics of one prediction against one gold answer."""
    return AnswerScores(
        em=exact_match(prediction, gold),
        f1=token_f1(prediction, gold),
        bleu1=bleu1(prediction, gold),
    )


def score_answers(predictions: Sequence[Any], golds: Sequence[Any]) -> dict[str, np.ndarray]:
    """Scores aligned lists of answers.

    Args:
      predictions: Q predicted answers.
      golds: Q gold answers, in the same order.

    Returns:
      {"em": f64[Q], "f1": f64[Q], "bleu1": f64[Q]}.
    """
    if len(predictions) != len(golds):
        raise ValueError(
            f"score_answers got {len(predictions)} predictions but {len(golds)} gold answers"
        )
    scores = [score_answer(p, g) for p, g in zip(predictions, golds)]
    return {
        name: np.asarray([getattr(s, name) for s in scores], dtype=np.float64)
        for name in ("em", "f1", "bleu1")
    }
