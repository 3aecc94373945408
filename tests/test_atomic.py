"""memr1.atomic: a failed or killed write leaves the old file or folder whole, and an error leaves
no temporary behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memr1 import atomic

ROOT = Path(__file__).resolve().parents[1]


class Crash(Exception):
    pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_writes_replace_the_file_with_plain_permissions(tmp_path):
    path = atomic.write_text_atomic(tmp_path / "sub" / "a.txt", "old")
    atomic.write_json_atomic(path, {"x": "é", "n": 1.5}, indent=None)
    assert path.read_text(encoding="utf-8") == '{"x": "é", "n": 1.5}\n'
    atomic.write_bytes_atomic(path, b"\x00\xff")
    assert path.read_bytes() == b"\x00\xff"
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert [p.name for p in path.parent.iterdir()] == ["a.txt"]


def test_json_default_converts_what_json_cannot_hold(tmp_path):
    import numpy as np

    path = atomic.write_json_atomic(tmp_path / "r.json", {"v": np.float32(0.5)}, default=float)
    assert json.loads(path.read_text()) == {"v": 0.5}


def test_an_error_mid_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = atomic.write_text_atomic(tmp_path / "out.json", "old")
    with pytest.raises(Crash), atomic.atomic_file(path) as f:
        f.write("half of the new")
        raise Crash
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_failed_rename_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = atomic.write_text_atomic(tmp_path / "out.json", "old")

    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        atomic.write_json_atomic(path, {"new": True})
    monkeypatch.undo()
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from memr1.atomic import atomic_file
    with atomic_file(sys.argv[1]) as f:
        f.write("x" * 100_000)
        f.flush()
        print("WRITING", flush=True)
        time.sleep(60)
    """
)


def test_a_write_killed_midway_leaves_the_old_file_whole(tmp_path):
    path = atomic.write_text_atomic(tmp_path / "out.txt", "old")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(path)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "WRITING"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    assert path.read_text() == "old"
    # A killed process cannot clean up: its half-written temporary stays, hidden beside the file.
    (left,) = [p for p in tmp_path.iterdir() if p.name != "out.txt"]
    assert left.name.startswith(".out.txt.") and left.stat().st_size == 100_000


def test_a_folder_replaces_the_old_one_whole(tmp_path):
    out = tmp_path / "run"
    with atomic.atomic_dir(out) as tmp:
        (tmp / "a.json").write_text("1")
    with atomic.atomic_dir(out) as tmp:
        (tmp / "b.json").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["b.json"]
    assert out.stat().st_mode & 0o777 == 0o777 & ~_umask()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_an_error_while_filling_a_folder_keeps_the_old_one(tmp_path):
    out = tmp_path / "run"
    with atomic.atomic_dir(out) as tmp:
        (tmp / "a.json").write_text("1")
    with pytest.raises(Crash), atomic.atomic_dir(out) as tmp:
        (tmp / "b.json").write_text("2")
        raise Crash
    assert sorted(p.name for p in out.iterdir()) == ["a.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_a_failed_swap_puts_the_old_folder_back(tmp_path, monkeypatch):
    out = tmp_path / "run"
    with atomic.atomic_dir(out) as tmp:
        (tmp / "a.json").write_text("1")
    real_replace, calls = os.replace, []

    def second_fails(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # the new folder onto the destination
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", second_fails)
    with pytest.raises(OSError, match="disk full"), atomic.atomic_dir(out) as tmp:
        (tmp / "b.json").write_text("2")
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == ["a.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
