"""Errors for bad dataset files, and the checked JSON reading that raises them.

Every loader reports a problem as a :class:`DataError` that names the file, the sample (record) and
the field, so that a user with a 3 MB JSON file can go straight to the broken spot. The helpers
here keep that bookkeeping out of the loaders: a :class:`Where` carries the file and sample, and its
``get`` checks one field's presence and type.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The sample name used when a problem is found before any record could be told apart, e.g. a file
# that is not valid JSON at all.
WHOLE_FILE = "<whole file>"


class DataError(ValueError):
    """A dataset file that cannot be read as its schema says.

    Attributes:
      file: path of the offending file, as given by the caller.
      sample: the record's id (``sample_id``, ``question_id``, ...) or its position ``#i`` when it
        has no usable id, or ``WHOLE_FILE``.
      field: a dotted path to the field inside the record, e.g. ``qa[3].category``.
      problem: what is wrong, in words.
    """

    def __init__(self, file: str | os.PathLike, sample: str, field: str, problem: str):
        self.file = str(file)
        self.sample = str(sample)
        self.field = str(field)
        self.problem = problem
        super().__init__(f"{self.file}: sample {self.sample!r}, field {self.field!r}: {problem}")


def _type_names(types: type | tuple[type, ...]) -> str:
    types = types if isinstance(types, tuple) else (types,)
    names = {str: "string", int: "integer", list: "list", dict: "object", bool: "boolean"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def _json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    return _type_names(type(value))


class Where:
    """The file and sample that field checks report against."""

    def __init__(self, file: str | os.PathLike, sample: str = WHOLE_FILE):
        self.file = str(file)
        self.sample = sample

    def at(self, sample: str) -> Where:
        """Returns the same file, pointing at another sample."""
        return Where(self.file, sample)

    def error(self, field: str, problem: str) -> DataError:
        """Builds (does not raise) the error for ``field`` of this sample."""
        return DataError(self.file, self.sample, field, problem)

    def check(self, value: Any, types: type | tuple[type, ...], field: str) -> Any:
        """Returns ``value`` if it has one of ``types``; raises a DataError otherwise.

        ``bool`` is refused where an integer is expected, since JSON ``true`` is never a count or a
        category.
        """
        wanted = types if isinstance(types, tuple) else (types,)
        ok = isinstance(value, wanted) and not (isinstance(value, bool) and bool not in wanted)
        if not ok:
            raise self.error(
                field, f"expected {_type_names(types)}, found {_json_type_name(value)}"
            )
        return value

    def get(
        self,
        mapping: Mapping[str, Any],
        key: str,
        types: type | tuple[type, ...],
        field: str | None = None,
        *,
        default: Any = ...,
    ) -> Any:
        """Reads ``mapping[key]`` and checks its type.

        Args:
          mapping: the JSON object holding the field.
          key: the key to read.
          types: the accepted Python types of the value.
          field: the dotted path reported in errors; ``key`` when omitted.
          default: returned when the key is absent; without it a missing key is an error.
        """
        field = key if field is None else field
        if key not in mapping:
            if default is not ...:
                return default
            raise self.error(field, "required field is missing")
        return self.check(mapping[key], types, field)


def _read_text(path: str | os.PathLike) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(path, WHOLE_FILE, "<bytes>", f"not UTF-8 text ({err.reason})") from err


def _parse_json(text: str, path: str | os.PathLike) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(
            path, WHOLE_FILE, f"line {err.lineno} column {err.colno}", f"invalid JSON: {err.msg}"
        ) from err
    except RecursionError as err:
        # Python's decoder recurses once per nesting level; no dataset nests anywhere near this.
        raise DataError(path, WHOLE_FILE, "<top level>", "JSON nested too deeply") from err


def read_json(path: str | os.PathLike) -> Any:
    """Parses a whole JSON file, turning syntax errors into a DataError that gives the position."""
    return _parse_json(_read_text(path), path)


def read_json_records(path: str | os.PathLike) -> list[Any]:
    """Reads a file that holds either one JSON list or JSON Lines (one value per line).

    A file whose first non-blank character is ``[`` is taken as a JSON list; anything else is read
    line by line, and a broken line is reported with its line number as the sample.
    """
    text = _read_text(path)
    if text.lstrip().startswith("["):
        return Where(path).check(_parse_json(text, path), list, "<top level>")
    records = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise DataError(
                path, f"line {lineno}", f"column {err.colno}", f"invalid JSON: {err.msg}"
            ) from err
        except RecursionError as err:
            raise DataError(path, f"line {lineno}", "<record>", "JSON nested too deeply") from err
    return records
