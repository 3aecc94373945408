"""Where records are read from: a path, or a built TFDS dataset written ``tfds:DATA_DIR[:SPLIT]``.

``DATA_DIR`` is the folder given to ``python -m memr1.data.tfds`` or
``python -m memr1.tuples.to_tfds`` (local, or e.g. ``gs://bucket/dir``); ``SPLIT`` names a stored
split and may be left out (each reader then picks its default: ``memr1.data.tfds.read.pick_split``).
Parsing needs no TFDS import, so a plain path costs nothing.
"""

from __future__ import annotations

import dataclasses
import os
import re

PREFIX = "tfds:"
_SPLIT = re.compile(r"[A-Za-z0-9_]+")


@dataclasses.dataclass(frozen=True)
class TfdsSource:
    """A built TFDS data_dir and, optionally, one of its splits."""

    data_dir: str
    split: str | None = None

    def __str__(self) -> str:
        return f"{PREFIX}{self.data_dir}" + (f":{self.split}" if self.split else "")


def parse_source(source: str | os.PathLike) -> TfdsSource | None:
    """The TFDS source written ``tfds:DATA_DIR[:SPLIT]``, or None for a plain path.

    Raises:
      ValueError: for ``tfds:`` without a data_dir.
    """
    text = os.fspath(source)
    if not text.startswith(PREFIX):
        return None
    rest = text[len(PREFIX) :]
    head, sep, tail = rest.rpartition(":")
    # The last ":" starts a split only when what follows is a bare name (not "//bucket/dir").
    data_dir, split = (head, tail) if sep and _SPLIT.fullmatch(tail) else (rest, None)
    if not data_dir:
        raise ValueError(f"{text!r}: expected tfds:DATA_DIR or tfds:DATA_DIR:SPLIT")
    return TfdsSource(data_dir, split)
