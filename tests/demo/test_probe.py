"""The reading probe's token selection (experiments/cpu_demo/probe.py); the quick-demo test runs it
whole."""

from __future__ import annotations

from experiments.cpu_demo.probe import copy_positions, is_copy_token, opening_positions


class _Pieces:
    """A tokenizer stand-in: token id -> text piece."""

    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)


def test_copy_tokens_are_capitalised_words():
    assert is_copy_token(" Nadia") and is_copy_token("Scout")
    assert not is_copy_token(" moved") and not is_copy_token('"') and not is_copy_token(" 2023")
    assert not is_copy_token("Jon's")


def test_copy_positions_are_named_tokens_seen_in_the_prompt():
    tok = _Pieces({0: '"', 1: "Nadia", 2: " moved", 3: " to", 4: " Seattle", 5: " Boston"})
    prompt = [0, 1, 2, 3, 4]
    # "Nadia moved to Boston": Nadia is copied from the prompt, Boston is not in it.
    assert copy_positions(prompt, [0, 1, 2, 3, 5], tok) == [1]
    assert copy_positions(prompt, [1, 4], tok) == [0, 1]
    assert copy_positions([], [1, 4], tok) == []


def test_opening_positions_are_the_copy_tokens_that_open_a_memory_text():
    pieces = ['{"memory": [{"event": "UPDATE", "id": "0", "text": "', "Nadia", " has", " dogs:",
              " Scout", " and", " Toby", '.", "old_memory": "', "Nadia", " has", '."}]}',
              '"text":  "', "Jon"]  # fmt: skip
    tok = _Pieces(dict(enumerate(pieces)))
    target = list(range(len(pieces)))
    positions = copy_positions(target, target, tok)
    assert positions == [1, 4, 6, 8, 12]
    # The fact's person opens the text; the old memory's name and the list's names do not.
    assert opening_positions(target, positions, tok) == [1, 12]
    assert opening_positions(target, [], tok) == []
