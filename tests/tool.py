"""Loads a script of tools/ or tools/bench/ as a module, as the tests of the tools call their
functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools"
FOLDERS = (TOOLS, TOOLS / "bench")  # the user's tools, then the benchmarks and their helpers


def load_tool(name: str) -> ModuleType:
    """tools/<name>.py or tools/bench/<name>.py, executed afresh as the module ``<name>``."""
    paths = [folder / f"{name}.py" for folder in FOLDERS if (folder / f"{name}.py").is_file()]
    if len(paths) != 1:
        raise FileNotFoundError(f"{name}.py: expected in exactly one of {FOLDERS}, found {paths}")
    spec = importlib.util.spec_from_file_location(name, paths[0])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses of a tool look their module up
    spec.loader.exec_module(module)
    return module
