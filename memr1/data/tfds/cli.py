"""What the build commands share: the source file or folder staged as TFDS's manual_dir, each
config built in turn, a one-line report per config, and bad input turned into exit status 2.

Used by ``python -m memr1.data.tfds`` (the four datasets) and ``python -m memr1.tuples.to_tfds``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import tensorflow_datasets as tfds

from memr1.data.errors import DataError

# `(manual_dir, data_dir, config, *, overwrite) -> prepared builder`
BuildFn = Callable[..., tfds.core.DatasetBuilder]


def add_build_args(parser: argparse.ArgumentParser, source_help: str) -> None:
    """The arguments every build command has: --source, --data_dir, --overwrite."""
    parser.add_argument("--source", required=True, help=source_help)
    parser.add_argument("--data_dir", required=True, help="where TFDS writes the dataset")
    parser.add_argument("--overwrite", action="store_true", help="rebuild an existing dataset")


@contextlib.contextmanager
def manual_dir(source: str | Path) -> Iterator[Path]:
    """`source` itself when it is a folder, else a temporary folder holding only a link to it.

    Raises:
      FileNotFoundError: if `source` does not exist or is an empty folder.
    """
    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(f"--source {source}: no such file or folder")
    if source.is_dir():
        if not any(source.iterdir()):
            raise FileNotFoundError(f"--source {source}: the folder is empty")
        yield source
        return
    with tempfile.TemporaryDirectory(prefix="memr1-tfds-manual-") as tmp:
        (Path(tmp) / source.name).symlink_to(source.resolve())
        yield Path(tmp)


def build_configs(
    prog: str,
    build: BuildFn,
    configs: Sequence[str],
    *,
    source: str,
    data_dir: str,
    overwrite: bool,
) -> int:
    """Builds each config of a dataset and prints its splits; returns the exit status."""
    try:
        with manual_dir(source) as manual:
            for config in configs:
                builder = build(manual, data_dir, config, overwrite=overwrite)
                sizes = {name: split.num_examples for name, split in builder.info.splits.items()}
                print(f"{builder.name}/{config} {builder.version}: {sizes}")
    except (DataError, ValueError, FileNotFoundError, FileExistsError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    print(f"built under {data_dir}; read it as tfds:{data_dir}[:SPLIT]")
    return 0
