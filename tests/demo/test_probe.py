"""The reading probe's token selection (memr1/demo/probe.py); the quick-demo test runs it whole."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from memr1.demo.probe import copy_positions, is_copy_token


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


def test_copy_probe_tool_names_what_is_missing(tmp_path, capsys):
    path = Path(__file__).resolve().parents[2] / "tools" / "copy_probe.py"
    spec = importlib.util.spec_from_file_location("copy_probe", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    seed = tmp_path / "seed-0"
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(seed)])
    assert exit_info.value.code == 2 and "no base/config.json" in capsys.readouterr().err
    for name in ("base/config.json", "data/metadata.json", "data/validation.json"):
        (seed / name).parent.mkdir(parents=True, exist_ok=True)
        (seed / name).write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        tool.main([str(seed)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "sft/checkpoints: not a directory" in err
    assert not list(seed.glob("copy_probe_*.json"))  # nothing written
