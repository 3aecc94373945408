"""A command's transformers without PyTorch: memr1's commands call `without_torch()` first.

memr1 takes only tokenizers and configs from transformers and Python floats for TensorBoard.
Where torch is installed (the test extra installs it, as the parity reference) transformers'
configuration module and tensorboardX's writer import it: ~1.6 s of CPU in every command start
that loads a tokenizer, more than the command's JAX import. Both go through `torch_hidden`.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator


class _DropTorchNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "PyTorch was not found" not in record.getMessage()


@contextlib.contextmanager
def torch_hidden() -> Iterator[None]:
    """While inside, an absent torch reads as not installed: a `None` entry in `sys.modules`
    makes `import torch` fail and `importlib.util.find_spec` report it missing. The entry is
    taken out again on exit, since other libraries look torch up in `sys.modules` (SciPy's
    array-API checks break on a `None` there). A torch already imported is left as it is."""
    hide = "torch" not in sys.modules
    if hide:
        sys.modules["torch"] = None
    try:
        yield
    finally:
        if hide:
            del sys.modules["torch"]


def without_torch() -> None:
    """Makes this process's transformers take its torch-free path (tokenizers, configs, files).

    transformers decides once per process: its `is_torch_available()` is cached
    (`functools.lru_cache`) and asked when the package is imported, so importing it under
    `torch_hidden` settles it for the process's life. Only a command may call this, before
    anything imports transformers; a process that has already imported torch or transformers
    is left as it is. The one notice transformers logs for a missing torch is dropped; every
    other message of its logger is kept.
    """
    if "torch" in sys.modules or "transformers" in sys.modules:
        return
    logging.getLogger("transformers").addFilter(_DropTorchNotice())
    with torch_hidden():
        from transformers.utils import import_utils

        import_utils.is_torch_available()  # cached False for the process's life
