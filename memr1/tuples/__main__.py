"""Entry point of ``python -m memr1.tuples``: the flags; see ``memr1.tuples.cli``.

The flags are defined here, not in ``cli``, so that importing ``cli`` (the tests, the drill)
never clashes with the train and evaluate CLIs' absl flags of the same names.
"""

import sys

from absl import app, flags, logging
from ml_collections import config_flags

from memr1.torchless import without_torch
from memr1.tuples import cli

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/memr1.py", "Experiment config (its tuples, data, memory, agents sections)."
)
_OUT = flags.DEFINE_string("out", None, "The tuples folder to create.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace an existing tuples folder.")
_HF_DIR = flags.DEFINE_string(
    "hf_dir", None, "Local HF checkpoint of the teacher / extractor model (default: config.hf_dir)."
)
_EMBED_DIR = flags.DEFINE_string("embed_dir", None, "Sentence-encoder dir (default: MiniLM).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    sys.exit(
        cli.main(
            _CONFIG.value,
            out=_OUT.value,
            overwrite=_OVERWRITE.value,
            hf_dir=_HF_DIR.value,
            embed_dir=_EMBED_DIR.value,
        )
    )


if __name__ == "__main__":
    without_torch()
    app.run(main)
