"""The copy warm-up's rows: random sequences of whole-token words, repeated back exactly."""

from __future__ import annotations

import pytest

from experiments.cpu_demo.traces import copy_rows, single_token_words
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


def test_manager_copy_rows_store_the_fact_verbatim_through_the_real_parser():
    from experiments.cpu_demo.traces import manager_copy_rows, target_words
    from memr1.env.manager_io import ADD, parse_manager_output

    words = target_words([{"target": 'Andrew adopted a dog named "Toby".'}])
    assert words == ["Andrew", "Toby", "a", "adopted", "dog", "named"]
    rows = manager_copy_rows(words, 50, (4, 9), seed=3, style="compact")
    assert rows == manager_copy_rows(words, 50, (4, 9), seed=3, style="compact")
    for row in rows:
        user = row["messages"][-1]["content"]
        fact = user.split("Facts:\n- ")[1]
        shown = user.count('\n0: "') + user.count('\n1: "') + user.count('\n2: "')
        parsed = parse_manager_output(row["target"], {i: i for i in range(shown)}, new_fact_count=1)
        (op,) = parsed.ops
        assert op.kind == ADD and op.invalid is None and f'"{op.text}"' == fact
        assert 4 <= len(op.text.rstrip(".").split()) <= 9
    with pytest.raises(ValueError, match="no words"):
        manager_copy_rows([], 1, (4, 9), seed=0, style="compact")


def test_manager_copy_rows_repeat_a_shown_memory_and_reply_none():
    from experiments.cpu_demo.traces import manager_copy_rows
    from memr1.env.manager_io import parse_manager_output

    words = ["alpha", "beta", "gamma", "delta", "omega"]
    plain = manager_copy_rows(words, 200, (4, 9), seed=5, style="compact")
    rows = manager_copy_rows(words, 200, (4, 9), seed=5, style="compact", repeat_fraction=0.25)
    assert rows == manager_copy_rows(
        words, 200, (4, 9), seed=5, style="compact", repeat_fraction=0.25
    )
    repeats = 0
    for row, old in zip(rows, plain):
        user = row["messages"][-1]["content"]
        fact = user.split("Facts:\n- ")[1]
        shown = [
            line.split(": ", 1)[1]
            for line in user.split("Memories:\n")[1].split("\nFacts:")[0].splitlines()
            if line[:1].isdigit()
        ]
        parsed = parse_manager_output(
            row["target"], {i: i for i in range(len(shown))}, new_fact_count=1
        )
        if fact in shown:
            # The fact is stored verbatim already: the reply is the empty op list (NONE).
            assert parsed.ops == [] and row["target"] != old["target"]
            repeats += 1
        else:
            # Not a repeat (random words never repeat a 4-9 word sentence by chance here): the
            # row is the ADD-only version's row, unchanged.
            assert row == old and [op.kind for op in parsed.ops] == ["ADD"]
    assert repeats == 50
    with pytest.raises(ValueError, match="repeat_fraction 1.5"):
        manager_copy_rows(words, 4, (4, 9), seed=0, style="compact", repeat_fraction=1.5)


def test_answer_copy_rows_distil_the_one_memory_holding_the_asked_word():
    from experiments.cpu_demo.traces import answer_copy_rows
    from memr1.env.answer_io import extract_distilled, extract_final_answer

    words = ["Ann", "Bob", "Cy", "big", "cat", "dog", "red", "sun", "tea", "owl"]
    rows = answer_copy_rows(words, 60, (3, 7), seed=5, style="compact")
    assert len(rows) == 60 and rows == answer_copy_rows(words, 60, (3, 7), seed=5, style="compact")
    for row in rows:
        user = row["messages"][-1]["content"]
        question = user.rsplit("Q: ", 1)[1]
        name, key = question.removeprefix("What did ").removesuffix("?").split(" say after ")
        memories = [line.split(": ", 1)[1] for line in user.splitlines() if " on " in line]
        assert len(memories) == 4
        words_shown = [w for m in memories for w in m.rstrip(".").split()]
        assert words_shown.count(key) == 1
        (holder,) = [m for m in memories if key in m.rstrip(".").split()]
        assert holder.startswith(name + " ")
        (distilled,) = extract_distilled(row["target"])
        assert distilled == holder.rstrip(".")
        body = holder.rstrip(".").split()
        assert extract_final_answer(row["target"]) == (body[body.index(key) + 1], False)
    with pytest.raises(ValueError, match="two capitalised"):
        answer_copy_rows(["Ann", "big", "cat"], 1, (3, 7), seed=0, style="compact")
