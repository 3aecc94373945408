"""A TFDS builder over tuples folders, so training can read tuples with ``tfds.data_source``.

``manual_dir`` holds tuples folders written by ``python -m memr1.tuples`` (or
``memr1.tuples.write_tuples``): either one folder, or several as its direct children. Each
folder becomes the split named in its metadata (``train``, ``validation``, ``test``, ``all``),
so the three Memory-R1 splits built separately become one dataset. Two configs:

* ``manager``: one example per ManagerTuple, keyed ``"<sample_id>/<dia_id>"``;
* ``answer``: one example per AnswerTuple, keyed ``"<sample_id>/<qa index>"``.

An example stores a few fields to filter on (``sample_id``, ``index``, ``has_qa``) and the
whole tuple as its JSON record; ``decode_example`` turns an example back into the dataclass and
``TfdsTupleReader`` reads a split as ``io.TupleReader`` reads a folder. Built by
``python -m memr1.tuples.to_tfds``; read by training as ``--tuples=tfds:DATA_DIR[:SPLIT]``
(``io.open_tuples``). Importing this module registers the builder as ``memr1_tuples``.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow_datasets as tfds
from etils import epath
from tensorflow_datasets.core import utils as tfds_utils

from memr1.data.errors import DataError
from memr1.data.tfds.builders import prepare
from memr1.data.tfds.read import open_split
from memr1.tuples.io import METADATA, TupleReader, read_metadata
from memr1.tuples.schema import (
    TUPLE_KINDS,
    AnswerTuple,
    ManagerTuple,
    SchemaError,
    from_json,
    to_json,
)

NAME = "memr1_tuples"


class Memr1Tuples(tfds.core.GeneratorBasedBuilder):
    """Memory-R1 manager and answer tuples, from tuples folders in ``manual_dir``."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "First release (tuple schema version 1)."}
    BUILDER_CONFIGS = [
        tfds.core.BuilderConfig(name="manager", description="one example per manager tuple"),
        tfds.core.BuilderConfig(name="answer", description="one example per answer tuple"),
    ]
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Put one tuples folder written by `python -m memr1.tuples`, or several as "
        "subfolders (one per split), in manual_dir."
    )

    # The same TFDS 4.9.10 work-around as memr1.data.tfds.builders (tensorflow/datasets#11212):
    # name the builder's source file directly.
    @tfds_utils.classproperty
    @classmethod
    def code_path(cls) -> epath.Path:
        return epath.Path(inspect.getfile(cls))

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description="Memory-R1 training tuples (see memr1.tuples).",
            features=tfds.features.FeaturesDict(
                {
                    "sample_id": tfds.features.Text(),
                    "index": tfds.features.Scalar(
                        np.int32, doc="turn index (manager) or question index (answer)"
                    ),
                    "has_qa": tfds.features.Scalar(
                        np.bool_, doc="a question cites the turn (always true for answer)"
                    ),
                    "record": tfds.features.Text(doc="the tuple as JSON (schema.to_json)"),
                }
            ),
            # Examples keep the order they were written in, so index i is always the same tuple.
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Any]:
        manual_dir = Path(dl_manager.manual_dir)
        folders = find_tuple_folders(manual_dir)
        generators = {}
        for folder in folders:
            split = read_metadata(folder)["build"].get("split", "all")
            if split in generators:
                raise DataError(folder, "<none>", "build.split", f"a second {split!r} folder")
            with TupleReader(folder, self.builder_config.name) as reader:
                if len(reader):
                    generators[split] = self._generate_examples(folder)
        if not generators:
            raise DataError(manual_dir, "<none>", "<splits>", "no tuples folder has any tuple")
        return generators

    def _generate_examples(self, folder: Path) -> Iterator[tuple[str, dict[str, Any]]]:
        with TupleReader(folder, self.builder_config.name) as reader:
            for record in reader:
                if isinstance(record, ManagerTuple):
                    key, index, has_qa = record.dia_id, record.turn_index, record.has_qa
                else:
                    key, index, has_qa = str(record.qa_index), record.qa_index, True
                yield (
                    f"{record.sample_id}/{key}",
                    {
                        "sample_id": record.sample_id,
                        "index": index,
                        "has_qa": has_qa,
                        "record": to_json(record),
                    },
                )


def find_tuple_folders(manual_dir: Path) -> list[Path]:
    """``manual_dir`` itself when it is a tuples folder, else its tuples subfolders, sorted."""
    if (manual_dir / METADATA).is_file():
        return [manual_dir]
    folders = sorted(p for p in manual_dir.iterdir() if (p / METADATA).is_file())
    if not folders:
        raise DataError(manual_dir, "<none>", "<files>", "no tuples folder (metadata.json)")
    return folders


def decode_example(example: dict[str, Any], kind: str) -> ManagerTuple | AnswerTuple:
    """Turns an example read from ``tfds.data_source`` back into its tuple dataclass."""
    if kind not in TUPLE_KINDS:
        raise ValueError(f"unknown tuple kind {kind!r}; expected one of {sorted(TUPLE_KINDS)}")
    return from_json(kind, example["record"])


class TfdsTupleReader:
    """Random access to one split of a built ``memr1_tuples`` config, like ``io.TupleReader``.

    ``len``, ``reader[i]`` and iteration give the tuples in the order they were stored (the
    builder keeps it), so a training loop that indexes rows by position reads the same rows from
    either source, and resumes by position alike.
    """

    def __init__(self, data_dir: str | Path, kind: str, split: str | None = None):
        if kind not in TUPLE_KINDS:
            raise ValueError(f"unknown tuple kind {kind!r}; expected one of {sorted(TUPLE_KINDS)}")
        hint = f"python -m memr1.tuples.to_tfds --source TUPLES_DIR --data_dir {data_dir}"
        self.kind = kind
        self.split, self._source = open_split(
            Memr1Tuples, kind, str(data_dir), split, "train", hint
        )
        self._where = f"{data_dir}:{self.split} ({NAME}/{kind})"

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, index: int) -> ManagerTuple | AnswerTuple:
        size = len(self._source)
        if not -size <= index < size:
            raise IndexError(f"{self._where}: record {index} of {size}")
        index %= size
        try:
            return decode_example(self._source[index], self.kind)
        except SchemaError as err:
            raise DataError(self._where, f"record {index}", err.field, err.problem) from err

    def __iter__(self) -> Iterator[ManagerTuple | AnswerTuple]:
        for index in range(len(self)):
            yield self[index]

    def close(self) -> None:
        """Closes the files the data source opened (it opens each on its first read)."""
        readers = getattr(self._source, "data_source", None)  # array_record's, a context manager
        if readers is not None:
            readers.__exit__(None, None, None)

    def __enter__(self) -> TfdsTupleReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def build(
    manual_dir: str | Path, data_dir: str | Path, kind: str, *, overwrite: bool = False
) -> tfds.core.DatasetBuilder:
    """Builds config ``kind`` ("manager" or "answer") as array_record files under ``data_dir``.

    ``overwrite`` rebuilds a dataset that is already there (else FileExistsError).

    Returns:
      The prepared builder; read it with ``TfdsTupleReader``, ``builder.as_data_source()`` or
      ``tfds.data_source(f"memr1_tuples/{kind}", data_dir=data_dir)``.
    """
    if kind not in TUPLE_KINDS:
        raise ValueError(f"unknown tuple kind {kind!r}; expected one of {sorted(TUPLE_KINDS)}")
    builder = Memr1Tuples(config=kind, data_dir=str(data_dir), file_format="array_record")
    return prepare(builder, manual_dir, overwrite=overwrite)
