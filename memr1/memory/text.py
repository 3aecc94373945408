"""Host-side conversion between Python strings and the fixed-width UTF-8 rows of a bank.

A bank stores each memory as ``C`` bytes plus a length. Text longer than ``C`` bytes is cut at the
last UTF-8 character boundary that fits, so a stored memory always decodes cleanly; the caller gets
a ``truncated`` flag, which the bank operations add to the bank's ``truncations`` counter.
"""

from __future__ import annotations

import numpy as np


def _is_continuation(byte: int) -> bool:
    """True for the bytes 0b10xxxxxx that continue a multi-byte UTF-8 character."""
    return (byte & 0xC0) == 0x80


def truncate_utf8(data: bytes, max_bytes: int) -> bytes:
    """Returns the longest prefix of ``data`` of at most ``max_bytes`` that ends on a character.

    ``data`` must be valid UTF-8. The cut point moves back over continuation bytes: if the first
    dropped byte continues a character, that character started inside the kept part and has to go.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    if len(data) <= max_bytes:
        return data
    cut = max_bytes
    while cut > 0 and _is_continuation(data[cut]):
        cut -= 1
    return data[:cut]


def encode_text(text: str, text_bytes: int) -> tuple[np.ndarray, int, bool]:
    """Encodes ``text`` into one bank row.

    Args:
      text: the memory text.
      text_bytes: C, the row width in bytes.

    Returns:
      ``(row_C, length, truncated)``: ``row_C`` uint8 [C] zero-padded, ``length`` the number of
      bytes used, ``truncated`` whether characters were dropped to fit.
    """
    if not isinstance(text, str):
        raise TypeError(f"memory text must be str, got {type(text).__name__}")
    data = text.encode("utf-8")
    kept = truncate_utf8(data, text_bytes)
    row_C = np.zeros((text_bytes,), np.uint8)
    row_C[: len(kept)] = np.frombuffer(kept, np.uint8)
    return row_C, len(kept), len(kept) < len(data)


def encode_texts(texts: list[str], text_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Encodes several texts: returns uint8 [N, C], int32 lengths [N] and bool truncated [N]."""
    rows, lengths, truncated = [], [], []
    for text in texts:
        row_C, length, cut = encode_text(text, text_bytes)
        rows.append(row_C)
        lengths.append(length)
        truncated.append(cut)
    rows_NC = np.stack(rows) if rows else np.zeros((0, text_bytes), np.uint8)
    return rows_NC, np.asarray(lengths, np.int32), np.asarray(truncated, bool)


def decode_text(row_C: np.ndarray, length: int) -> str:
    """Decodes the first ``length`` bytes of a uint8 [C] row.

    Raises a ValueError naming the length when the bytes are not valid UTF-8, which only happens
    if a row was written without going through :func:`encode_text`.
    """
    length = int(length)
    row_C = np.asarray(row_C)
    if not 0 <= length <= row_C.shape[-1]:
        raise ValueError(f"text length {length} is outside the row width {row_C.shape[-1]}")
    data = row_C[:length].astype(np.uint8).tobytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"memory row of length {length} is not valid UTF-8: {err}") from err
