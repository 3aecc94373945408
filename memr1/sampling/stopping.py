"""When a generated row stops: EOS token ids, token-sequence stop patterns, and stop strings.

Two mechanisms, with different guarantees:

* On device, inside the decode loop: a row stops right after it emits one of the EOS ids, or when
  its most recent generated tokens equal one of the stop sequences (token ids that the caller
  tokenised in advance). Only generated tokens are matched; a pattern that would start inside the
  prompt does not count. The stopping token(s) are kept in the output and counted in the row's
  length, because the policy chose them and the RL update must score them.

* On the host, after generation: `truncate_at_stop_strings` decodes each row and finds the
  earliest exact occurrence of any stop string, which also catches strings that do not fall on
  token boundaries (or tokenise differently in context). It shortens the row to the first token
  whose decoded prefix contains the string and cuts the text just before the string.

Stop ids and patterns are padded to power-of-two shapes so the jitted sampler compiles once for
many different stop sets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_NO_TOKEN = -1  # never a real token id: pads stop sets and marks "not generated yet"


# Smallest padded sizes: common stop sets (a few EOS ids, a few short sequences) share one shape.
_MIN_EOS, _MIN_SEQUENCES, _MIN_WINDOW = 8, 4, 4


def _pow2_at_least(n: int, minimum: int) -> int:
    return max(minimum, 1 << max(0, n - 1).bit_length())


class StopSet(NamedTuple):
    """Stop criteria as padded int32 arrays (a pytree, passed to the jitted sampler).

    eos_E: EOS token ids, padded with -1.
    patterns_QL: stop sequences right-aligned in L columns, padded with -1 on the left.
    lengths_Q: the true length of each pattern; 0 marks a padding row that never matches.
    """

    eos_E: np.ndarray
    patterns_QL: np.ndarray
    lengths_Q: np.ndarray

    @property
    def window(self) -> int:
        """How many trailing generated tokens the decode loop must remember."""
        return self.patterns_QL.shape[1]


def make_stop_set(
    eos_ids: Sequence[int] = (), stop_sequences: Sequence[Sequence[int]] = ()
) -> StopSet:
    """Packs EOS ids and token stop sequences into padded arrays.

    Args:
      eos_ids: token ids that end a row (any number, possibly none).
      stop_sequences: token-id sequences that end a row once generated in full.
    Returns:
      A StopSet whose shapes are powers of two with small minimums, so that nearby stop sets
      share one compiled sampler.
    """
    eos = sorted({int(t) for t in eos_ids})
    seqs = [[int(t) for t in s] for s in stop_sequences]
    for seq in [eos, *seqs]:
        if any(t < 0 for t in seq):
            raise ValueError(f"stop token ids must be non-negative, got {seq}")
    if any(len(s) == 0 for s in seqs):
        raise ValueError("an empty stop sequence would stop every row at once")
    eos_E = np.full(_pow2_at_least(len(eos), _MIN_EOS), _NO_TOKEN, np.int32)
    eos_E[: len(eos)] = eos
    width = _pow2_at_least(max((len(s) for s in seqs), default=1), _MIN_WINDOW)
    patterns_QL = np.full((_pow2_at_least(len(seqs), _MIN_SEQUENCES), width), _NO_TOKEN, np.int32)
    lengths_Q = np.zeros(patterns_QL.shape[0], np.int32)
    for q, seq in enumerate(seqs):
        patterns_QL[q, width - len(seq) :] = seq
        lengths_Q[q] = len(seq)
    return StopSet(eos_E, patterns_QL, lengths_Q)


def empty_tail(batch: int, window: int) -> jax.Array:
    """The decode loop's memory of the last `window` generated tokens [B, W], none yet."""
    return jnp.full((batch, window), _NO_TOKEN, jnp.int32)


def push_tail(tail_BW: jax.Array, token_B: jax.Array) -> jax.Array:
    """Shifts the newest token [B] into the right end of the tail [B, W]."""
    return jnp.concatenate([tail_BW[:, 1:], token_B[:, None]], axis=1)


def hits_stop(token_B: jax.Array, tail_BW: jax.Array, stops: StopSet) -> jax.Array:
    """Whether each row's newest token ends it [B] bool.

    Args:
      token_B: the token just generated (already pushed into `tail_BW`).
      tail_BW: the last W generated tokens, right-aligned, -1 where fewer were generated.
      stops: the StopSet (as device arrays).
    """
    is_eos_B = jnp.any(token_B[:, None] == stops.eos_E[None, :], axis=-1)
    width = stops.patterns_QL.shape[1]
    # Column j of a right-aligned pattern is part of it iff j >= W - length.
    active_QL = jnp.arange(width)[None, :] >= (width - stops.lengths_Q)[:, None]
    equal_BQL = tail_BW[:, None, :] == stops.patterns_QL[None, :, :]
    match_BQ = jnp.all(equal_BQL | ~active_QL[None], axis=-1) & (stops.lengths_Q > 0)[None, :]
    return is_eos_B | jnp.any(match_BQ, axis=-1)


class StringStops(NamedTuple):
    """Result of the host-side stop-string check, one entry per row."""

    lengths: np.ndarray  # [B] int32: tokens to keep (through the token completing the string)
    texts: list[str]  # decoded text of the kept tokens, cut just before the stop string
    stopped: np.ndarray  # [B] bool: a stop string was found


def truncate_at_stop_strings(
    tokens_BT: np.ndarray,
    lengths_B: np.ndarray,
    decode: Callable[[Sequence[int]], str],
    stop_strings: Sequence[str],
) -> StringStops:
    """Finds the earliest exact occurrence of any stop string in each decoded row.

    Args:
      tokens_BT: generated tokens [B, T] (host array; entries past a row's length are ignored).
      lengths_B: generated length of each row [B].
      decode: maps token ids to text (e.g. a tokenizer's decode).
      stop_strings: strings that end a completion; empty strings are rejected.
    Returns:
      StringStops. For a stopped row, `lengths` is the smallest k such that the first k tokens
      decode to text containing a stop string; the caller masks tokens k.. out of the RL update.
      Rows without a stop string keep their length and full text.
    """
    if any(not s for s in stop_strings):
        raise ValueError("stop strings must be non-empty")
    tokens_BT, lengths_B = np.asarray(tokens_BT), np.asarray(lengths_B)
    out_lengths = lengths_B.astype(np.int32).copy()
    stopped = np.zeros(len(lengths_B), bool)
    texts = []
    for b, n in enumerate(lengths_B):
        row = [int(t) for t in tokens_BT[b, : int(n)]]
        text = decode(row)
        cut = _earliest(text, stop_strings)
        if cut is None:
            texts.append(text)
            continue
        # Binary search for the first prefix whose text contains a stop string: a prefix of the
        # tokens decodes to a prefix of the text, so containing one is monotone in k.
        lo, hi = 1, len(row)
        while lo < hi:
            mid = (lo + hi) // 2
            if _earliest(decode(row[:mid]), stop_strings) is None:
                lo = mid + 1
            else:
                hi = mid
        out_lengths[b], stopped[b] = lo, True
        texts.append(text[:cut])
    return StringStops(out_lengths, texts, stopped)


def _earliest(text: str, stop_strings: Sequence[str]) -> int | None:
    found = [i for i in (text.find(s) for s in stop_strings) if i >= 0]
    return min(found) if found else None
