"""A command's transformers without PyTorch: memr1's commands call `without_torch()` first.

memr1 takes only tokenizers and configs from transformers. Where torch is installed (the test
extra installs it, as the parity reference) transformers' configuration module imports it: ~1.6 s
of CPU in every command start that loads a tokenizer, more than the command's JAX import.
"""

from __future__ import annotations

import logging
import sys


class _DropTorchNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "PyTorch was not found" not in record.getMessage()


def without_torch() -> None:
    """Makes this process's transformers take its torch-free path (tokenizers, configs, files).

    transformers decides once per process: its `is_torch_available()` is cached
    (`functools.lru_cache`) and asked when the package is imported. So transformers is imported
    here with a `None` entry for torch in `sys.modules` (`import torch` fails and
    `importlib.util.find_spec` reports it missing), and the entry is removed again: other
    libraries that look for torch in `sys.modules` (SciPy's array-API checks) find it absent.
    Only a command may call this, before anything imports transformers; a process that has
    already imported torch or transformers is left as it is. The one notice transformers logs
    for a missing torch is dropped; every other message of its logger is kept.
    """
    if "torch" in sys.modules or "transformers" in sys.modules:
        return
    logging.getLogger("transformers").addFilter(_DropTorchNotice())
    sys.modules["torch"] = None
    try:
        from transformers.utils import import_utils

        import_utils.is_torch_available()  # cached False for the process's life
    finally:
        del sys.modules["torch"]
