"""A forgiving reader for the JSON that language models write.

Model outputs hold JSON wrapped in code fences and prose, with single quotes, trailing commas,
unquoted keys, Python literals, stray quotes inside strings, or cut off by the response length
limit. :func:`find_values` scans a text for every JSON-like value it can read and never raises, so
the agent parsers built on it can turn any reply into a result plus counters.

The reader is plain Python (no ``eval``), iterative at the top level and depth-limited below, and
bounds the work it does per text, so a hostile or degenerate reply costs O(attempts x length).

Rules, beyond strict JSON:
  * strings may use ``'`` as well as ``"``; a quote closes a string only when the next non-space
    character is one of ``, : } ]`` (or the text ends), so ``'Ann's dog'`` reads as one string;
  * Python's ``\\xHH`` and ``\\UHHHHHHHH`` escapes are read too, and unknown escapes keep the
    escaped character; lone surrogates become ``?`` so every string encodes to UTF-8;
  * keys and values may be bare words (``{event: ADD}``); ``True/False/None`` mean true/false/null;
  * a comma may follow the last item of an object or array;
  * a value cut off by the end of the text is returned as :class:`PartialDict` or
    :class:`PartialList` holding its complete members; a cut-off scalar is dropped, and a cut-off
    container inside another one is kept as the last member, itself partial.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass
from typing import Any

# Nesting beyond this is not something an agent output needs; refusing it keeps the recursive
# descent far from Python's recursion limit.
MAX_DEPTH = 24
# Every failed or cut-off start costs up to one pass over the text; capping the starts bounds the
# work on adversarial input (thousands of '[' with unbalanced quotes) without affecting real output.
MAX_ATTEMPTS = 256
# Numbers with more digits than this are read as +-inf: int() of a huge digit string is slow and
# Python refuses beyond 4300 digits, and no id or count is that long.
MAX_DIGITS = 64

_WS = " \t\r\n"
_CLOSERS = ",:}]"
_OPENER = re.compile(r"[\[{]")
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
# JSON escapes plus Python's \xHH and \UHHHHHHHH, which single-quoted pseudo-JSON may carry.
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|U[0-9a-fA-F]{8}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_LITERALS = {
    "true": True,
    "false": False,
    "null": None,
    "True": True,
    "False": False,
    "None": None,
}
_STRICT_STRING = json.JSONDecoder(strict=False)


class PartialDict(dict):
    """A JSON object cut off by the end of the text; it holds only its complete members."""


class PartialList(list):
    """A JSON array cut off by the end of the text; it holds only its complete items."""


class _Fail(Exception):
    """The text at this position is not a value the reader accepts."""


class _Incomplete(Exception):
    """The text ended inside a value; ``partial`` is what was complete (None for a scalar)."""

    def __init__(self, partial: PartialDict | PartialList | None):
        super().__init__()
        self.partial = partial


@dataclass(frozen=True)
class Found:
    """One value found in a text: the value, where it started and whether it was complete."""

    value: Any
    start: int
    complete: bool


def _utf8_safe(text: str) -> str:
    """Replaces lone surrogates (from escapes such as \\ud800) so the text encodes to UTF-8."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def _unescape(body: str, quote: str) -> str:
    """Decodes the escapes of a string body, strictly as JSON when possible, else leniently."""
    if quote == '"':
        try:
            return _utf8_safe(_STRICT_STRING.decode('"' + body + '"'))
        except (ValueError, RecursionError):
            pass

    def one(match: re.Match) -> str:
        code = match.group(1)
        if len(code) > 1:
            point = int(code[1:], 16)
            return chr(point) if point <= 0x10FFFF else "?"
        return _SIMPLE_ESCAPES.get(code, code)

    return _utf8_safe(_ESCAPE.sub(one, body))


class _Reader:
    """Recursive-descent reader over one text; positions are indices into ``text``."""

    def __init__(self, text: str):
        self.text = text
        self.n = len(text)
        self._closers: dict[str, list[int]] = {}

    def ws(self, i: int) -> int:
        while i < self.n and self.text[i] in _WS:
            i += 1
        return i

    def _closing_quotes(self, quote: str) -> list[int]:
        """Sorted positions where a ``quote`` can close a string: not escaped, and followed by
        ``, : } ]`` or the end of the text. Computed once per text, so reading a string is a
        binary search rather than a scan, however many starts the top-level search tries."""
        if quote not in self._closers:
            found = []
            k = self.text.find(quote)
            while k >= 0:
                backslashes = 0
                while k - 1 - backslashes >= 0 and self.text[k - 1 - backslashes] == "\\":
                    backslashes += 1
                after = self.ws(k + 1)
                if backslashes % 2 == 0 and (after >= self.n or self.text[after] in _CLOSERS):
                    found.append(k)
                k = self.text.find(quote, k + 1)
            self._closers[quote] = found
        return self._closers[quote]

    def string(self, i: int) -> tuple[str, int]:
        # Quotes that do not qualify as closers are escaped ones or part of the text (an
        # apostrophe, quoted speech), and the string runs on past them.
        quote = self.text[i]
        closers = self._closing_quotes(quote)
        at = bisect.bisect_right(closers, i)
        if at == len(closers):
            raise _Incomplete(None)
        k = closers[at]
        return _unescape(self.text[i + 1 : k], quote), k + 1

    def number(self, i: int) -> tuple[int | float, int]:
        match = _NUMBER.match(self.text, i)
        if match is None:
            raise _Fail
        token = match.group()
        if match.end() >= self.n:
            # Digits running into the end of the text may be a cut-off number.
            raise _Incomplete(None)
        if len(token) > MAX_DIGITS:
            return (float("-inf") if token.startswith("-") else float("inf")), match.end()
        if match.group(1) or match.group(2):
            return float(token), match.end()
        return int(token), match.end()

    def word(self, i: int) -> tuple[Any, int]:
        match = _WORD.match(self.text, i)
        if match is None:
            raise _Fail
        if match.end() >= self.n:
            raise _Incomplete(None)
        token = match.group()
        return _LITERALS.get(token, token), match.end()

    def value(self, i: int, depth: int) -> tuple[Any, int]:
        i = self.ws(i)
        if i >= self.n:
            raise _Incomplete(None)
        c = self.text[i]
        if c == "{":
            return self.obj(i, depth)
        if c == "[":
            return self.array(i, depth)
        if c in "\"'":
            return self.string(i)
        if c == "-" or c.isdigit():
            return self.number(i)
        return self.word(i)

    def obj(self, i: int, depth: int) -> tuple[dict, int]:
        if depth > MAX_DEPTH:
            raise _Fail
        out: dict = {}
        i += 1
        while True:
            i = self.ws(i)
            if i >= self.n:
                raise _Incomplete(PartialDict(out))
            c = self.text[i]
            if c == "}":
                return out, i + 1
            try:
                key, i = self.string(i) if c in "\"'" else self.word(i)
            except _Incomplete:
                raise _Incomplete(PartialDict(out)) from None
            if not isinstance(key, str):
                key = json.dumps(key)  # a bare true/null used as a key
            i = self.ws(i)
            if i >= self.n:
                raise _Incomplete(PartialDict(out))
            if self.text[i] != ":":
                raise _Fail
            try:
                out[key], i = self.value(i + 1, depth + 1)
            except _Incomplete as cut:
                if cut.partial is not None:
                    out[key] = cut.partial
                raise _Incomplete(PartialDict(out)) from None
            i = self.ws(i)
            if i >= self.n:
                raise _Incomplete(PartialDict(out))
            if self.text[i] == ",":
                i += 1
            elif self.text[i] != "}":
                raise _Fail

    def array(self, i: int, depth: int) -> tuple[list, int]:
        if depth > MAX_DEPTH:
            raise _Fail
        out: list = []
        i += 1
        while True:
            i = self.ws(i)
            if i >= self.n:
                raise _Incomplete(PartialList(out))
            if self.text[i] == "]":
                return out, i + 1
            try:
                item, i = self.value(i, depth + 1)
            except _Incomplete as cut:
                if cut.partial is not None:
                    out.append(cut.partial)
                raise _Incomplete(PartialList(out)) from None
            out.append(item)
            i = self.ws(i)
            if i >= self.n:
                raise _Incomplete(PartialList(out))
            if self.text[i] == ",":
                i += 1
            elif self.text[i] != "]":
                raise _Fail


def find_values(text: str) -> list[Found]:
    """Every top-level object or array readable in ``text``, in order of position.

    The scan tries each ``{`` or ``[`` in turn; after a value is read it continues past that
    value's end, so values nested inside a found value (and brackets inside its strings) are not
    reported again. A start that fails is skipped; one cut off by the end of the text is reported
    as partial and the scan goes on from the next bracket, since the cut may come from an
    unbalanced quote in prose rather than from the real end of the JSON.

    Returns:
      The found values with their start offsets; never raises for any ``str`` input.
    """
    reader = _Reader(text)
    found: list[Found] = []
    i, attempts = 0, 0
    while attempts < MAX_ATTEMPTS:
        match = _OPENER.search(text, i)
        if match is None:
            break
        start = match.start()
        try:
            value, end = reader.value(start, 0)
        except _Fail:
            attempts += 1
            i = start + 1
            continue
        except _Incomplete as cut:
            attempts += 1
            if cut.partial is not None:
                found.append(Found(cut.partial, start, complete=False))
            i = start + 1
            continue
        except RecursionError:  # pragma: no cover - MAX_DEPTH keeps the descent shallow
            attempts += 1
            i = start + 1
            continue
        found.append(Found(value, start, complete=True))
        i = end
    return found
