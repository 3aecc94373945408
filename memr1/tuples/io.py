"""Storing tuples: one folder of array_record files, written all at once or not at all.

Layout of a tuples folder::

    manager.array_record   one ManagerTuple per record, as UTF-8 JSON (schema.to_json)
    answer.array_record    one AnswerTuple per record
    metadata.json          format, schema version, how the tuples were built, counts

array_record gives random access by index without TensorFlow, so a training loop can shuffle
and stream records (``TupleReader``), and ``memr1.tuples.tfds_builder`` can wrap the same
folders as a TFDS dataset. Records are written one per chunk (``group_size:1``), which is what
makes a single random read cheap.

The folder is assembled under a temporary name beside the destination and renamed into place at
the end, so a failed or interrupted write leaves nothing behind, and a reader never sees a folder
with some files missing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

from memr1.atomic import atomic_dir
from memr1.data.errors import WHOLE_FILE, DataError, read_json
from memr1.data.source import parse_source
from memr1.tuples.schema import (
    SCHEMA_VERSION,
    TUPLE_KINDS,
    AnswerTuple,
    ManagerTuple,
    SchemaError,
    from_json,
    to_json,
)

if TYPE_CHECKING:
    from memr1.tuples.tfds_builder import TfdsTupleReader

FORMAT = "memr1-tuples"
METADATA = "metadata.json"
FILES = {kind: f"{kind}.array_record" for kind in TUPLE_KINDS}
_WRITER_OPTIONS = "group_size:1"
_RANDOM_ACCESS = "readahead_buffer_size:0,max_parallelism:0"


def _write_records(path: Path, records: Iterable[ManagerTuple | AnswerTuple]) -> int:
    writer = ArrayRecordWriter(str(path), _WRITER_OPTIONS)
    count = 0
    try:
        for record in records:
            writer.write(to_json(record).encode("utf-8"))
            count += 1
    finally:
        writer.close()
    return count


def _is_tuples_folder(path: Path) -> bool:
    return (path / METADATA).is_file() and all((path / f).is_file() for f in FILES.values())


def write_tuples(
    out_dir: str | os.PathLike,
    manager: Iterable[ManagerTuple],
    answer: Iterable[AnswerTuple],
    metadata: Mapping[str, Any],
    *,
    overwrite: bool = False,
) -> Path:
    """Writes a tuples folder atomically.

    Args:
      out_dir: the folder to create. An existing empty folder is replaced; an existing tuples
        folder only with ``overwrite``; anything else never.
      manager, answer: the tuples, in the order they are to be read back.
      metadata: how they were built (stored under "build" in metadata.json).
      overwrite: replace an existing tuples folder.

    Returns:
      The folder's path.
    """
    out = Path(out_dir)
    check_destination(out, overwrite=overwrite)
    with atomic_dir(out) as tmp:
        counts = {
            "manager": _write_records(tmp / FILES["manager"], manager),
            "answer": _write_records(tmp / FILES["answer"], answer),
        }
        meta = {
            "format": FORMAT,
            "version": SCHEMA_VERSION,
            "files": {kind: {"path": FILES[kind], "records": n} for kind, n in counts.items()},
            "build": dict(metadata),
        }
        (tmp / METADATA).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
        # Checked again: the destination may have changed while the tuples were written.
        check_destination(out, overwrite=overwrite)
    return out


def check_destination(out: Path, *, overwrite: bool) -> None:
    """Raises FileExistsError if ``write_tuples`` would refuse to write ``out``."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not _is_tuples_folder(out):
        raise FileExistsError(f"{out} exists and is not a tuples folder; refusing to replace it")
    if not overwrite:
        raise FileExistsError(f"{out} already holds tuples; pass --overwrite to replace them")


def read_metadata(folder: str | os.PathLike) -> dict[str, Any]:
    """Reads and checks a tuples folder's metadata.json."""
    path = Path(folder) / METADATA
    if not path.is_file():
        raise DataError(path, WHOLE_FILE, "<file>", "missing: not a tuples folder")
    meta = read_json(path)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DataError(path, WHOLE_FILE, "format", f"not a {FORMAT} metadata file")
    if meta.get("version") != SCHEMA_VERSION:
        raise DataError(
            path,
            WHOLE_FILE,
            "version",
            f"tuples of schema version {meta.get('version')!r}; this memr1 reads version "
            f"{SCHEMA_VERSION}, so rebuild them",
        )
    return meta


class TupleReader:
    """Random access to the tuples of one kind in a folder: ``len``, ``reader[i]``, iteration."""

    def __init__(self, folder: str | os.PathLike, kind: str):
        if kind not in TUPLE_KINDS:
            raise ValueError(f"unknown tuple kind {kind!r}; expected one of {sorted(TUPLE_KINDS)}")
        read_metadata(folder)
        self.kind = kind
        self.path = Path(folder) / FILES[kind]
        if not self.path.is_file():
            raise DataError(self.path, WHOLE_FILE, "<file>", "missing from the tuples folder")
        self._reader = ArrayRecordReader(str(self.path), _RANDOM_ACCESS)
        self._size = int(self._reader.num_records())

    def __len__(self) -> int:
        return self._size

    def _decode(self, index: int, data: bytes) -> ManagerTuple | AnswerTuple:
        try:
            return from_json(self.kind, data)
        except SchemaError as err:
            raise DataError(self.path, f"record {index}", err.field, err.problem) from err

    def __getitem__(self, index: int) -> ManagerTuple | AnswerTuple:
        if not -self._size <= index < self._size:
            raise IndexError(f"{self.path}: record {index} of {self._size}")
        index %= self._size
        return self._decode(index, self._reader.read([index])[0])

    def __iter__(self) -> Iterator[ManagerTuple | AnswerTuple]:
        # Batched sequential reads: far fewer calls into the reader than one per record.
        for start in range(0, self._size, 256):
            stop = min(start + 256, self._size)
            for offset, data in enumerate(self._reader.read(start, stop)):
                yield self._decode(start + offset, data)

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> TupleReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_tuples(source: str | os.PathLike, kind: str) -> TupleReader | TfdsTupleReader:
    """A random-access reader (``len``, ``[i]``, iteration, ``close``) of the tuples of ``kind``.

    ``source`` is a tuples folder (``TupleReader``) or a built TFDS dataset written
    ``tfds:DATA_DIR[:SPLIT]`` (``tfds_builder.TfdsTupleReader``; the split defaults to ``train``,
    or the only one). Both give the tuples in stored order.
    """
    tfds_source = parse_source(source)
    if tfds_source is None:
        return TupleReader(source, kind)
    from memr1.tuples.tfds_builder import TfdsTupleReader  # TFDS is imported only when used

    return TfdsTupleReader(tfds_source.data_dir, kind, tfds_source.split)


def read_tuples(source: str | os.PathLike, kind: str) -> list[ManagerTuple | AnswerTuple]:
    """Every tuple of ``kind`` ("manager" or "answer") of a source (``open_tuples``), in order."""
    with open_tuples(source, kind) as reader:
        return list(reader)
