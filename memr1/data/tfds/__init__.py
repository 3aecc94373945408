"""TFDS builders of memr1's datasets (array_record, no TensorFlow needed); see ``builders``.

Importing this package registers ``locomo``, ``synthloco``, ``longmemeval`` and ``msc`` with TFDS,
so ``tfds.data_source("locomo/qa", data_dir=...)`` finds them once they are built.
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
