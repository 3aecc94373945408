"""str <-> fixed-width UTF-8 rows: truncation happens at character boundaries and is reported."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memr1.memory import decode_text, encode_text, encode_texts, truncate_utf8


def test_ascii_round_trip_pads_with_zeros():
    row_C, length, truncated = encode_text("cat", 5)
    assert row_C.dtype == np.uint8 and row_C.shape == (5,)
    assert row_C.tolist() == [99, 97, 116, 0, 0]
    assert (length, truncated) == (3, False)
    assert decode_text(row_C, length) == "cat"


def test_exact_fit_is_not_a_truncation():
    _, length, truncated = encode_text("abcd", 4)
    assert (length, truncated) == (4, False)


@pytest.mark.parametrize(
    "text,width,kept",
    [
        ("héllo", 2, "h"),  # é is two bytes; only its first byte would fit.
        ("héllo", 3, "hé"),
        ("a€b", 3, "a"),  # € is three bytes.
        ("a€b", 4, "a€"),
        ("🙂x", 3, ""),  # A four-byte emoji that does not fit leaves nothing.
        ("🙂x", 4, "🙂"),
    ],
)
def test_truncation_stops_at_a_character_boundary(text, width, kept):
    row_C, length, truncated = encode_text(text, width)
    assert truncated
    assert decode_text(row_C, length) == kept


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=12), width=st.integers(0, 20))
def test_encoding_keeps_the_longest_whole_character_prefix(text, width):
    row_C, length, truncated = encode_text(text, width)
    decoded = decode_text(row_C, length)
    assert text.startswith(decoded)
    assert length == len(decoded.encode("utf-8")) <= width
    assert truncated == (decoded != text)
    if truncated:
        # The next character would not have fitted: the prefix is the longest possible.
        next_char = text[len(decoded)]
        assert length + len(next_char.encode("utf-8")) > width
    assert not row_C[length:].any()


def test_encode_texts_batches_rows():
    rows_NC, lengths_N, truncated_N = encode_texts(["ab", "abcdef", ""], 4)
    assert rows_NC.shape == (3, 4)
    assert lengths_N.tolist() == [2, 4, 0]
    assert truncated_N.tolist() == [False, True, False]
    assert encode_texts([], 4)[0].shape == (0, 4)


def test_decode_rejects_broken_utf8_and_bad_lengths():
    row_C = np.array([0xC3, 0x28, 0, 0], np.uint8)  # 0xC3 needs a continuation byte.
    with pytest.raises(ValueError, match="not valid UTF-8"):
        decode_text(row_C, 2)
    with pytest.raises(ValueError, match="outside the row width 4"):
        decode_text(row_C, 5)


def test_bad_inputs_raise():
    with pytest.raises(TypeError, match="must be str"):
        encode_text(b"bytes", 4)
    with pytest.raises(ValueError, match="max_bytes"):
        truncate_utf8(b"abc", -1)
