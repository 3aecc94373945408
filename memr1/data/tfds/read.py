"""Reading a built dataset back through ``tfds.data_source``: random access, in stored order.

The builders disable shuffling, so index i of a split is always the same record, and reading
needs neither TensorFlow nor the source files. A dataset that was never built (or was built by
another version of its builder) is an error that says how to build it; nothing is downloaded
or prepared on read.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tensorflow_datasets as tfds

from memr1.data.errors import WHOLE_FILE, DataError
from memr1.data.record_json import conversation_from_json
from memr1.data.records import Conversation
from memr1.data.tfds import builders, features


def pick_split(available: Sequence[str], split: str | None, preferred: str, where: str) -> str:
    """`split` if given, else `preferred`, else the only split; raises DataError otherwise."""
    if split is not None:
        if split not in available:
            raise DataError(where, WHOLE_FILE, "split", f"no split {split!r}: it has {available}")
        return split
    if preferred in available:
        return preferred
    if len(available) == 1:
        return available[0]
    raise DataError(
        where, WHOLE_FILE, "split", f"no split {preferred!r}; name one of {available} (DIR:SPLIT)"
    )


def open_split(
    builder_cls: type[tfds.core.DatasetBuilder],
    config: str,
    data_dir: str,
    split: str | None,
    preferred: str,
    build_hint: str,
) -> tuple[str, Any]:
    """(split name, its random-access data source) of a built dataset under `data_dir`.

    Args:
      builder_cls: the registered builder (its VERSION is the one read).
      config: the builder config.
      split: the split to read, or None for `pick_split`'s default.
      preferred: that default.
      build_hint: the command that builds the dataset, for the error message.
    """
    builder = builder_cls(config=config, data_dir=data_dir, file_format="array_record")
    where = f"{data_dir}/{builder.name}/{config}/{builder.version}"
    if not builder.is_prepared():
        raise DataError(where, WHOLE_FILE, "<dataset>", f"not built; build it with {build_hint}")
    name = pick_split(list(builder.info.splits.keys()), split, preferred, where)
    return name, builder.as_data_source(split=name)


def read_conversations(
    name: str, data_dir: str | Path, split: str | None = None
) -> list[Conversation]:
    """Every conversation of one split of a built dataset, in stored order.

    Args:
      name: ``"locomo"``, ``"synthloco"``, ``"longmemeval"`` or ``"msc"``.
      data_dir: where ``python -m memr1.data.tfds`` built it.
      split: a stored split; by default ``full`` (every conversation, every question), or the
        only split there is.
    """
    if name not in builders.BUILDERS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {sorted(builders.BUILDERS)}")
    hint = f"python -m memr1.data.tfds --dataset {name} --source FILE --data_dir {data_dir}"
    chosen, source = open_split(
        builders.BUILDERS[name],
        features.CONVERSATIONS_CONFIG,
        str(data_dir),
        split,
        builders.FULL_SPLIT,
        hint,
    )
    out = []
    for index in range(len(source)):
        try:
            out.append(conversation_from_json(source[index]["record"]))
        except ValueError as err:
            raise DataError(f"{data_dir}:{chosen}", f"#{index}", "record", str(err)) from err
    return out
