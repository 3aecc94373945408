"""Token ids the model can embed, checked where host data enters a compiled program.

The embedding table has `vocab_size` rows. A tokenizer can hold more ids than that (transformers
adds a pad token past `vocab_size` for some checkpoints), and an id outside the table would read
NaN from `jnp.take` and turn every row it is attended from into NaN. Padding is harmless (the
model clamps ids into the table and padded positions are masked), but a real token the model
cannot embed is refused here, by name, before anything is compiled or run.
"""

from __future__ import annotations

import numpy as np


class OutOfVocabError(ValueError):
    """A real (non-padding) token id outside [0, vocab_size)."""


def check_token_ids(tokens, valid, vocab_size: int, what: str) -> None:
    """Raises OutOfVocabError naming the first real token outside [0, vocab_size).

    Args:
      tokens: [B, T] int token ids (or a 1-D sequence, then B = 1).
      valid: [B, T] bool, True on real tokens (None: every position is real).
      vocab_size: rows of the model's embedding table.
      what: names the data in the message, e.g. "prompt" or "batch field 'tokens'".
    """
    tokens = np.asarray(tokens)
    flat = tokens.ndim == 1
    tokens = tokens.reshape(1, -1) if flat else tokens
    bad = (tokens < 0) | (tokens >= vocab_size)
    if valid is not None:
        bad &= np.asarray(valid, bool).reshape(tokens.shape)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        where = f"position {col}" if flat else f"row {row} position {col}"
        raise OutOfVocabError(
            f"{what}: {where} holds token id {int(tokens[row, col])}, outside the model's "
            f"vocabulary of {vocab_size} ids ({int(bad.sum())} such tokens); is the tokenizer "
            "the model's own?"
        )
