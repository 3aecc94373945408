"""Files stay small and functions short, so that the folder layout stays a map of the code.

No file of memr1/, experiments/ or tools/ is over 400 lines and no function over 80, unless it is
listed in LONG_FUNCTIONS with the reason it is one piece.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREES = ("memr1", "experiments", "tools")
MAX_FILE, MAX_FUNCTION = 400, 80
# "path::function": why splitting it would make it harder to read.
LONG_FUNCTIONS: dict[str, str] = {}


def _sources():
    return sorted(p for tree in TREES for p in (ROOT / tree).rglob("*.py"))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_files_and_functions_are_small(path):
    source = path.read_text()
    rel = path.relative_to(ROOT)
    lines = source.count("\n")
    assert lines <= MAX_FILE, f"{rel}: {lines} lines; split it by concern (at most {MAX_FILE})"
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.lineno + 1
            key = f"{rel}::{node.name}"
            assert length <= MAX_FUNCTION or key in LONG_FUNCTIONS, (
                f"{key}: {length} lines; split it (at most {MAX_FUNCTION}) or list it in "
                "LONG_FUNCTIONS (tests/test_sizes.py) with the reason it is one piece"
            )


def test_every_listed_long_function_still_exists_and_is_long():
    found = {}
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found[f"{path.relative_to(ROOT)}::{node.name}"] = node.end_lineno - node.lineno + 1
    stale = sorted(k for k in LONG_FUNCTIONS if found.get(k, 0) <= MAX_FUNCTION)
    assert not stale, f"{stale}: no longer over {MAX_FUNCTION} lines; drop them from LONG_FUNCTIONS"
