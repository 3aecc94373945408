"""TFDS builders of memr1's datasets (array_record, no TensorFlow needed); see ``builders``.

Importing this package registers ``locomo``, ``synthloco``, ``longmemeval`` and ``msc`` with TFDS,
so ``tfds.data_source("locomo/qa", data_dir=...)`` finds them once they are built. Build them with
``python -m memr1.data.tfds --dataset NAME --source FILE --data_dir DIR``; ``read`` reads the
conversations back, as ``memr1.evaluate`` does for ``--config.data.path=tfds:DIR``.
"""

from memr1.data.tfds.builders import (
    BUILDERS,
    FULL_SPLIT,
    Locomo,
    Longmemeval,
    Msc,
    Synthloco,
    build,
)
from memr1.data.tfds.features import CONVERSATIONS_CONFIG, QA_CONFIG

__all__ = [
    "BUILDERS",
    "CONVERSATIONS_CONFIG",
    "FULL_SPLIT",
    "QA_CONFIG",
    "Locomo",
    "Longmemeval",
    "Msc",
    "Synthloco",
    "build",
]
