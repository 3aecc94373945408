"""Atomic writes: a file or a folder is built under a temporary name beside its destination and
renamed into place, so a reader (or a crash) sees the old version or the whole new one, never
half of it, and a failed write leaves no temporary behind.

    write_json_atomic(path, report)
    with atomic_file(path) as f:          # a stream of lines
        f.writelines(rows)
    with atomic_dir(out) as tmp:          # a folder of several files
        (tmp / "a.json").write_text(...)

Files are flushed and fsynced before the rename. They get the permissions a plain ``open`` or
``mkdir`` would give (``mkstemp`` / ``mkdtemp`` create them private).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Yields a handle on a temporary file that replaces ``path`` when the block succeeds.

    Args:
      path: the destination; its folder is created if needed.
      mode: ``"w"`` (UTF-8 text) or ``"wb"``.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file mode {mode!r}: expected 'w' or 'wb'")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Writes ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    with atomic_file(path) as handle:
        handle.write(text)
    return Path(path)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Writes ``data`` to ``path`` atomically; returns the path."""
    with atomic_file(path, "wb") as handle:
        handle.write(data)
    return Path(path)


def write_json_atomic(
    path: str | os.PathLike, value: Any, *, indent: int | None = 2, default: Any = None
) -> Path:
    """Writes ``value`` as UTF-8 JSON (and a final newline) to ``path`` atomically.

    ``default`` converts what JSON cannot hold, as in ``json.dumps`` (e.g. ``float`` for numpy
    scalars).
    """
    text = json.dumps(value, ensure_ascii=False, indent=indent, default=default)
    return write_text_atomic(path, text + "\n")


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as handle:
                os.fsync(handle.fileno())


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yields an empty temporary folder that replaces ``path`` when the block succeeds.

    Whatever ``path`` held (a folder, a file) is swapped out and deleted after the new folder is
    in place; callers decide beforehand whether replacing it is allowed. On an error the
    temporary folder is deleted and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield tmp
        _fsync_tree(tmp)
        os.chmod(tmp, 0o777 & ~_umask())
        if os.path.lexists(path):
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old"))
            os.replace(path, old / path.name)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old / path.name, path)  # put the old version back
                raise
            finally:
                shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
