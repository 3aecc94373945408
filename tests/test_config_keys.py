"""Every configs/memr1.py key is read by the library: a key nothing reads is a setting a user
can change to no effect (an ignored setting must be an error, not a silent no-op)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _leaves(section, prefix=""):
    for key, value in section.items():
        if hasattr(value, "items"):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", key


def _library_source() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "memr1").rglob("*.py")))


@pytest.mark.parametrize("arg", ["", "stage=answer,algo=ppo", "recipe=paper,runlocal"])
def test_every_config_key_is_read_by_the_library(monkeypatch, arg):
    monkeypatch.syspath_prepend(str(ROOT))
    from configs import memr1 as memr1_config

    source = _library_source()
    unread = [
        path
        for path, key in _leaves(memr1_config.get_config(arg))
        # Read as an attribute (config.train.lr, t.lr) or by name (memory["capacity"]).
        if not re.search(rf"\.{key}\b|\[[\"']{key}[\"']\]", source)
    ]
    assert not unread, f"config keys that nothing in memr1/ reads: {unread}"
