"""Build tuples folders as the TFDS dataset ``memr1_tuples`` that training reads by index.

    python -m memr1.tuples.to_tfds --source tuples/ --data_dir tfds_data
    python -m memr1.train --config configs/memr1.py:stage=answer,algo=grpo \\
        --tuples=tfds:tfds_data ...

``--source`` is one tuples folder (``python -m memr1.tuples``) or a folder of them, each becoming
the split named in its metadata (train, validation, test, all); ``--tuples=tfds:DATA_DIR`` reads
``train`` (or the only split), ``tfds:DATA_DIR:SPLIT`` another. Both configs (``manager``,
``answer``) are built unless ``--kind`` names one. Exit status 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from memr1.data.tfds.cli import add_build_args, build_configs
from memr1.torchless import without_torch
from memr1.tuples.schema import TUPLE_KINDS
from memr1.tuples.tfds_builder import build


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memr1.tuples.to_tfds", description=__doc__)
    parser.add_argument("--kind", choices=[*TUPLE_KINDS, "all"], default="all")
    add_build_args(parser, "a tuples folder, or a folder of them")
    args = parser.parse_args(argv)
    return build_configs(
        parser.prog,
        build,
        tuple(TUPLE_KINDS) if args.kind == "all" else (args.kind,),
        source=args.source,
        data_dir=args.data_dir,
        overwrite=args.overwrite,
    )


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
