"""Build a dataset as TFDS array_record files that evaluation reads with ``tfds.data_source``.

    python -m memr1.data.tfds --dataset locomo --source data/locomo10.json --data_dir tfds_data
    python -m memr1.evaluate --config configs/memr1.py:dataset=locomo \\
        --config.data.path=tfds:tfds_data ...

``--source`` is the dataset's file, or a folder holding its files (LongMemEval: any of
longmemeval_{s,m,oracle}.json, each a split). Both configs are built unless ``--config`` names
one: ``qa`` (one example per question) and ``conversations`` (one per conversation, the whole
record: what ``memr1.evaluate`` and ``memr1.data.tfds.read`` read). Exit status 2 on bad input
(a missing source, a malformed file, an existing build without ``--overwrite``).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence

from memr1.data.tfds import builders, features
from memr1.data.tfds.cli import add_build_args, build_configs
from memr1.torchless import without_torch

CONFIGS = (features.QA_CONFIG, features.CONVERSATIONS_CONFIG)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memr1.data.tfds", description=__doc__)
    parser.add_argument("--dataset", required=True, choices=sorted(builders.BUILDERS))
    parser.add_argument("--config", choices=[*CONFIGS, "all"], default="all")
    add_build_args(parser, "the dataset's file, or a folder of them")
    args = parser.parse_args(argv)
    return build_configs(
        parser.prog,
        functools.partial(builders.build, args.dataset),
        CONFIGS if args.config == "all" else (args.config,),
        source=args.source,
        data_dir=args.data_dir,
        overwrite=args.overwrite,
    )


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
