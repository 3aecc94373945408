"""Mem0 / A-Mem harness metrics: the reference vectors and hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from memr1.eval import metrics

# (prediction, gold, F1, BLEU-1) from the reference notes; BLEU to 4 decimal places.
REFERENCE_VECTORS = [
    ("7 May 2023", "7 May 2023", 1.0, 1.0),
    ("May 7, 2023", "7 May 2023", 1.0, 0.75),
    ("Bailey, Luna", "Oliver, Luna, Bailey", 0.8, 0.5134),
    ("No information available", "Brave by Sara Bareilles", 0.0, 0.0),
]


@pytest.mark.parametrize("pred,gold,f1,bleu", REFERENCE_VECTORS)
def test_reference_vectors(pred, gold, f1, bleu):
    assert metrics.token_f1(pred, gold) == pytest.approx(f1, abs=1e-12)
    assert round(metrics.bleu1(pred, gold), 4) == pytest.approx(bleu, abs=1e-12)


@pytest.mark.parametrize(
    "pred,gold,expected",
    [
        ("Paris", "paris", 1.0),  # case-insensitive
        ("  Paris \n", "paris", 1.0),  # surrounding whitespace is stripped
        ("Paris.", "Paris", 0.0),  # EM does not drop punctuation
        ("2022", 2022, 1.0),  # integer golds from the LoCoMo file
        ("Paris", "", 0.0),
        ("", "Paris", 0.0),
        ("   ", "Paris", 0.0),
        (None, "Paris", 0.0),
        ("Paris", None, 0.0),
    ],
)
def test_exact_match(pred, gold, expected):
    assert metrics.exact_match(pred, gold) == expected


@pytest.mark.parametrize(
    "pred,gold,expected",
    [
        # P = 2/3, R = 1 -> 0.8.
        ("The cat sat.", "the cat", 0.8),
        # Sets, not multisets: repeats do not lower precision.
        ("dog dog dog", "dog", 1.0),
        # Only . , ! ? are separators; the apostrophe and hyphen stay inside the token.
        ("Luna's", "Luna", 0.0),
        ("well-known", "well known", 0.0),
        ("Yes!", "yes", 1.0),
        ("Hello?World", "hello world", 1.0),
        # Semicolons are not separators: "a;b" is one token. P = 0, R = 0.
        ("a;b", "a b", 0.0),
        # P = 1/2, R = 1/3 -> 2 * (1/6) / (5/6) = 0.4.
        ("red bike", "my blue bike", 0.4),
        # Punctuation-only prediction: non-empty string but no tokens.
        ("...", "Paris", 0.0),
        ("", "", 0.0),
        ("Paris", "   ", 0.0),
    ],
)
def test_token_f1_hand_computed(pred, gold, expected):
    assert metrics.token_f1(pred, gold) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    "pred,gold,expected",
    [
        # Clipped precision 1, brevity penalty exp(1 - 3/2).
        ("red car", "the red car", math.exp(-0.5)),
        # Precision 1/2, hypothesis not shorter than reference.
        ("blue car", "red car", 0.5),
        # Clipping: "the" counts once out of three predicted tokens.
        ("the the the", "the cat", 1 / 3),
        ("PARIS", "paris", 1.0),
        # The tokenizer splits off the comma, so it is a token that can match.
        ("Luna, Bailey", "Bailey, Luna", 1.0),
        ("", "Paris", 0.0),
        ("...", "Paris", 0.0),
    ],
)
def test_bleu1_hand_computed(pred, gold, expected):
    assert metrics.bleu1(pred, gold) == pytest.approx(expected, abs=1e-12)


def test_score_answer_bundles_all_three():
    s = metrics.score_answer("May 7, 2023", "7 May 2023")
    assert s == metrics.AnswerScores(em=0.0, f1=1.0, bleu1=pytest.approx(0.75))


def test_score_answers_vectorised_matches_scalar():
    preds = [v[0] for v in REFERENCE_VECTORS] + ["paris", ""]
    golds = [v[1] for v in REFERENCE_VECTORS] + ["Paris", "x"]
    out = metrics.score_answers(preds, golds)
    assert set(out) == {"em", "f1", "bleu1"}
    for name in out:
        assert out[name].shape == (len(preds),)
        assert out[name].dtype == np.float64
    np.testing.assert_allclose(out["f1"], [1.0, 1.0, 0.8, 0.0, 1.0, 0.0])
    np.testing.assert_allclose(out["em"], [1.0, 0.0, 0.0, 0.0, 1.0, 0.0])
    np.testing.assert_allclose(out["bleu1"][:3], [1.0, 0.75, 0.513417119], atol=1e-9)


def test_score_answers_rejects_length_mismatch():
    with pytest.raises(ValueError, match="2 predictions but 1 gold"):
        metrics.score_answers(["a", "b"], ["a"])
