"""Every command runs transformers without PyTorch (memr1/torchless.py), and still tokenizes."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memr1.models.tokenizer import load_tokenizer
from memr1.models.tokenizer_train import train_bpe_tokenizer

ROOT = Path(__file__).resolve().parents[1]
# Tools exempt from the call: the benches whose baseline is PyTorch, and the GPU check, which
# makes torch and transformers unimportable instead (it runs without either).
EXEMPT_TOOLS = {
    "bench_generate.py",
    "bench_retrieval.py",
    "bench_train.py",
    "bench_train_engines.py",
    "gpu_check.py",
}
# Commands that never import transformers (the quickstart only starts the others).
NO_TRANSFORMERS = ("memr1.data.synthloco.generate", "memr1.data.stats", "memr1.quickstart")
TEXTS = ["Caroline moved to Austin last spring.", "Melanie has two dogs: Buddy and Scout."] * 20


def _main_block_calls(path: Path) -> set[str] | None:
    """Names called in the file's `if __name__ == "__main__":` block (None: it has none)."""
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return {ast.unparse(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    return None


def _imports(path: Path) -> set[str]:
    """The top-level packages a file imports, anywhere in it."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _commands() -> list[Path]:
    """memr1's and the experiments' commands, and the tools that use memr1 (but not the ones
    that measure against PyTorch)."""
    files = [*ROOT.glob("memr1/**/*.py"), *ROOT.glob("experiments/**/*.py")]
    tools = [p for p in ROOT.glob("tools/**/*.py") if p.name not in EXEMPT_TOOLS]
    files += [p for p in tools if "memr1" in _imports(p)]
    skip = {ROOT / (m.replace(".", "/") + ".py") for m in NO_TRANSFORMERS}
    return sorted(p for p in files if p not in skip and _main_block_calls(p) is not None)


def test_every_command_calls_without_torch_first():
    commands = _commands()
    assert len(commands) >= 20, commands  # the walk found the commands
    missing = [
        str(p.relative_to(ROOT)) for p in commands if "without_torch" not in _main_block_calls(p)
    ]
    assert not missing, f"{missing}: call memr1.torchless.without_torch() first in __main__"


def test_the_commands_without_the_call_never_import_transformers():
    done = _run(f"import sys, {', '.join(NO_TRANSFORMERS)}; print('transformers' in sys.modules)")
    assert done.stdout.strip() == "False"


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )


def test_a_command_tokenizes_as_with_torch_and_never_imports_it(tmp_path):
    train_bpe_tokenizer(TEXTS, tmp_path / "tok", vocab_size=300)
    text = "Melanie moved to Austin with Buddy."
    done = _run(
        "import sys; from memr1.torchless import without_torch; without_torch()\n"
        "from memr1.models.tokenizer import load_tokenizer\n"
        f"tok = load_tokenizer({str(tmp_path / 'tok')!r})\n"
        f"print('torch' in sys.modules, tok.encode({text!r}))\n"
        # SciPy's array-API checks look torch up in sys.modules (a None entry there breaks them)
        "import numpy as np, scipy.stats; scipy.stats.bootstrap((np.arange(9.0),), np.mean)"
    )
    imported, ids = done.stdout.strip().split(" ", 1)
    assert imported == "False"
    assert ids == str(list(load_tokenizer(tmp_path / "tok").encode(text)))
    assert "PyTorch was not found" not in done.stderr


@pytest.mark.parametrize("first", ["torch", "transformers"])
def test_a_process_that_imported_torch_or_transformers_is_left_as_it_is(first):
    done = _run(
        f"import sys, {first}; from memr1.torchless import without_torch; without_torch()\n"
        "from transformers.utils import is_torch_available; print(is_torch_available())"
    )
    assert done.stdout.strip() == "True"
