"""The copy warm-up's rows: random sequences of whole-token words, repeated back exactly."""

from __future__ import annotations

import pytest

from memr1.demo.traces import copy_rows, single_token_words
from memr1.models.tokenizer_train import train_bpe_tokenizer

TEXTS = ["Andrew adopted a dog named Toby.", "Nadia moved to Seattle last year."] * 40


def test_copy_rows_repeat_the_prompt_with_lengths_in_range():
    words = ["alpha", "beta", "gamma", "delta"]
    rows = copy_rows(words, 200, (3, 7), seed=1)
    assert len(rows) == 200
    for row in rows:
        (message,) = row["messages"]
        assert message["role"] == "user" and message["content"] == row["target"]
        seq = row["target"].split()
        assert 3 <= len(seq) <= 7 and set(seq) <= set(words)
    assert rows == copy_rows(words, 200, (3, 7), seed=1)
    assert rows != copy_rows(words, 200, (3, 7), seed=2)
    with pytest.raises(ValueError, match="no words"):
        copy_rows([], 3, (1, 2), seed=0)


def test_single_token_words_are_one_token_alone_and_after_a_space(tmp_path):
    tok = train_bpe_tokenizer(TEXTS, tmp_path / "tok", vocab_size=400)
    words = single_token_words(TEXTS + ["Supercalifragilistic"], tok)
    assert words and "Supercalifragilistic" not in words
    for w in words:
        assert len(tok.encode(w, add_special_tokens=False)) == 1
        assert len(tok.encode(" " + w, add_special_tokens=False)) == 1
