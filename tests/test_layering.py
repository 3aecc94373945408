"""The folder layout is the architecture: no package of memr1 imports one above it.

Packages, lowest first. A package may import itself and anything below it; the job modules at
the top (evaluate, generate, quickstart) may import any package, and no package imports them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "memr1"
LAYERS = (
    "torchless",
    "atomic",
    "sharding",
    "models",
    "sampling",
    "embed",
    "memory",
    "retrieval",
    "data",
    "eval",
    "env",
    "tuples",
    "rl",
    "train",
    "drill",
)
JOBS = ("evaluate", "generate", "quickstart")


def memr1_imports(path: Path) -> set[str]:
    """The memr1 room (first name under memr1) of every import in a file."""
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "memr1":
                names = [f"memr1.{a.name}" for a in node.names]
        else:
            continue
        rooms.update(n.split(".")[1] for n in names if n.startswith("memr1.") and "." in n)
    return rooms


def room_of(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py")


def test_every_room_has_a_layer():
    rooms = {room_of(p) for p in ROOT.rglob("*.py")} - {"__init__"}
    assert rooms <= set(LAYERS) | set(JOBS), (
        f"{sorted(rooms - set(LAYERS) - set(JOBS))}: place new rooms of memr1/ in LAYERS "
        "(tests/test_layering.py) where they belong in the architecture"
    )


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_package_imports_one_above_it(path):
    room = room_of(path)
    if room in JOBS or room == "__init__":
        return
    rank = LAYERS.index(room)
    above = sorted(r for r in memr1_imports(path) if r in JOBS or LAYERS.index(r) > rank)
    assert not above, (
        f"memr1/{path.relative_to(ROOT)} ({room}) imports {above}, which sit above it: move the "
        "shared code down, or the importer up (layers: " + " < ".join(LAYERS) + ")"
    )
