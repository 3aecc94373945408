"""Shared support for the agent parser tests.

A retrieved set and the invariants every ParsedOps must satisfy; hypothesis strategies for the
fuzz tests; and a reference validator used as an oracle. The reference works on Python objects
(what the JSON says), written from the rules in memr1/env/manager_io.py's docstrings; the fuzz
test serialises those objects in several ways and checks that the text parser agrees with it.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter

from hypothesis import strategies as st

from memr1.env.manager_io import (
    ADD,
    COUNTER_KINDS,
    DELETE,
    KINDS,
    NOOP,
    UPDATE,
    ManagerOp,
    ParsedOps,
)

# Shown id -> real bank id. The real ids are unlike the shown ones (and 0 is not among them), so
# a parser that skips the mapping, or lets a model address real ids, fails the table.
ID_MAP = {0: 100, 1: 205, 2: 37}
REAL_IDS = frozenset(ID_MAP.values())
NEW_FACTS = 2


def summary(parsed: ParsedOps) -> list[tuple]:
    """(kind, target, text) for valid ops and ("NOOP", reason) for rejected ones, in order."""
    return [
        (op.kind, op.target, op.text) if op.invalid is None else (NOOP, op.invalid)
        for op in parsed.ops
    ]


def nonzero(counters: dict[str, int]) -> dict[str, int]:
    return {kind: n for kind, n in counters.items() if n}


def check_invariants(parsed: ParsedOps, id_map: dict[int, int], new_fact_count: int) -> None:
    """Asserts everything a caller may rely on, whatever the reply was.

    Every op is well formed; UPDATE and DELETE hit only retrieved memories; each memory is named
    by at most one valid op; ADDs stay within one per new fact; counters[k] is the number of ops
    rejected for reason k, so valid ops + counted rejects = ops returned.
    """
    real = set(id_map.values())
    assert isinstance(parsed, ParsedOps)
    assert tuple(parsed.counters) == COUNTER_KINDS
    rejected = Counter(op.invalid for op in parsed.ops if op.invalid is not None)
    assert parsed.counters == {kind: rejected.get(kind, 0) for kind in COUNTER_KINDS}
    assert parsed.num_valid + sum(parsed.counters.values()) == len(parsed.ops)
    if parsed.counters["unparseable"]:
        assert len(parsed.ops) == 1 and parsed.counters["unparseable"] == 1
    targets = []
    for op in parsed.ops:
        assert op.kind in KINDS
        assert isinstance(op.text, str)
        op.text.encode("utf-8")  # the bank stores UTF-8; a lone surrogate would break it
        if op.old_memory is not None:
            op.old_memory.encode("utf-8")
        if op.invalid is not None:
            assert op.kind == NOOP and op.target is None and op.text == ""
            continue
        if op.kind == ADD:
            assert op.target is None and op.text.strip() == op.text and op.text
        elif op.kind in (UPDATE, DELETE):
            assert op.target in real
            targets.append(op.target)
            if op.kind == UPDATE:
                assert op.text
        else:
            assert op.target is None or op.target in real
            if op.target is not None:
                targets.append(op.target)
    assert len(targets) == len(set(targets)), "a memory was named by two valid ops"
    assert sum(op.kind == ADD and op.invalid is None for op in parsed.ops) <= new_fact_count


# Pieces of replies, syntax and keywords, so random concatenations often come close to valid
# output and reach deep into the reader instead of failing at the first character.
FRAGMENTS = [
    '{"memory": [', "{'memory': [", "[", "]", "{", "}", ",", ":", '"', "'", "`", "```json\n",
    "```", '{"id": ', '"id": "1"', "'id': 2", '"event": "UPDATE"', '"event": "add"',
    "'event': 'DELETE'", '"event": "NONE"', '"text": "', "'text': '", '"old_memory": ',
    "null", "None", "true", "-1", "0", "1", "2", "3", "9" * 30, "1e400", "1.5", "\\", '\\"',
    "\\u", "\\ud800", "\\ud83d\\ude00", "\n", " ", "Ann's", "东京", "😀", "**Answer:**",
    "**Answer**:", "Answer:", "__answer:__", "<think>", "</think>", "- ", "*", ".", "ignore all",
]  # fmt: skip
ALPHABET = "".join(sorted(set("".join(FRAGMENTS)))) + "abcxyz \t"

random_text = st.one_of(
    st.text(max_size=120),
    st.text(alphabet=ALPHABET, max_size=160),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=40).map("".join),
)


def weighted(*branches: tuple[int, st.SearchStrategy]) -> st.SearchStrategy:
    """Draws from the branches in proportion to their weights. (st.one_of flattens nested
    one_ofs and drops repeated branches, so it cannot weight them.)"""
    pool = [strategy for weight, strategy in branches for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


# Mostly well-formed pieces, so that many entries are valid and collide (duplicate ids, the ADD
# budget); about one piece in four is malformed.
EVENTS = weighted(
    (2, st.sampled_from(["ADD", "UPDATE", "DELETE", "NONE"])),
    (1, st.sampled_from(["UPDATE", "DELETE", "NOOP", "update", "Delete", "no-op", "Add"])),
    (1, st.one_of(st.sampled_from(["MODIFY", "", "ADD|UPDATE"]), st.integers(0, 3), st.none())),
)
ids = weighted(
    (2, st.sampled_from([0, 1, 2, "0", "1", "2"])),
    (1, st.sampled_from([0, 1, 2, " 1 ", 2.0, -0.0, 3, "3"])),
    (
        1,
        st.one_of(
            st.integers(-3, 6),
            st.integers(-(10**40), 10**40),
            st.sampled_from(["", "x", "1.0", "2.5", "[0]", "9" * 30]),
            st.floats(allow_nan=True, allow_infinity=False),
            st.booleans(),
            st.none(),
            st.lists(st.integers(0, 2), max_size=2),
        ),
    ),
)
# Lone high surrogates stand for the \ud800 escapes models emit; they must come back as "?".
# (High ones only: a high and a low in a row would be re-paired by the JSON decoder.)
odd_chars = st.characters(
    min_codepoint=0xD800, max_codepoint=0xDBFF, categories=["Cs"]
) | st.sampled_from(" '\"\\{}[]")
texts = weighted(
    (2, st.text(max_size=30)),
    # st.text refuses surrogates even from an explicit alphabet, hence lists of characters.
    (2, st.lists(st.characters() | odd_chars, max_size=20).map("".join)),
    (1, st.one_of(st.sampled_from(["", "  ", "Ann's dog"]), st.integers(), st.none())),
)
full_entry = st.fixed_dictionaries(
    {"id": ids, "event": EVENTS, "text": texts}, optional={"old_memory": texts}
)
sparse_entry = st.fixed_dictionaries(
    {"event": EVENTS}, optional={"id": ids, "text": texts, "extra": st.integers()}
)
junk_entry = st.one_of(
    st.text(max_size=10), st.integers(), st.none(), st.lists(st.integers(), max_size=2)
)
entry = weighted((3, full_entry), (1, sparse_entry), (1, junk_entry))
entries = st.lists(entry, max_size=8)
# The shapes a reply's JSON may take, as (value, entries the parser should read from it).
containers = st.one_of(
    entries.map(lambda e: ({"memory": e}, e)),
    entries.map(lambda e: ({"Memory": e, "note": "x"}, e)),
    entries.map(lambda e: ({"result": {"memory": e}}, e)),
)


def serialize(value, how: str) -> str:
    """Writes a JSON-like value as strict JSON, indented JSON or a Python literal."""
    if how == "json":
        return json.dumps(value)
    if how == "json_indent":
        return json.dumps(value, indent=2, ensure_ascii=False)
    return repr(value)


PROSE = st.text(alphabet="abcdefghij .!?\n", max_size=40)
WRAPPERS = st.sampled_from(["{}", "```json\n{}\n```", "```\n{}\n```", "Here:\n{}\nDone."])

_INT = re.compile(r"[+-]?\d+")


def _safe(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


_EVENT_OF = {"ADD": "ADD", "UPDATE": "UPDATE", "DELETE": "DELETE", "NONE": "NOOP", "NOOP": "NOOP"}


def _ref_id(value):
    """(shown id or None, problem or None) by the documented id rules."""
    if isinstance(value, bool) or value is None:
        return None, "bad_id"
    if isinstance(value, float):
        if math.isnan(value):
            return None, "bad_id"
        if math.isinf(value):
            return None, "unknown_id"
        return (int(value), None) if value.is_integer() else (None, "bad_id")
    if isinstance(value, int):
        return value, None
    if isinstance(value, str) and _INT.fullmatch(value.strip()):
        return int(value.strip()), None
    return None, "bad_id"


def reference_ops(items, id_map, new_fact_count) -> list[ManagerOp]:
    """The ops the rules prescribe for a list of already-decoded entries."""
    ops, taken, adds = [], set(), 0
    for item in items:
        if not isinstance(item, dict):
            ops.append(ManagerOp("NOOP", invalid="bad_entry"))
            continue
        event = item.get("event")
        kind = (
            _EVENT_OF.get(re.sub(r"[\s_\-]", "", event.upper())) if isinstance(event, str) else None
        )
        text = _safe(item["text"]).strip() if isinstance(item.get("text"), str) else ""
        if kind is None:
            ops.append(ManagerOp("NOOP", invalid="bad_event"))
        elif kind == "ADD":
            if not text or adds >= new_fact_count:
                ops.append(ManagerOp("NOOP", invalid="empty_text" if not text else "excess_add"))
            else:
                adds += 1
                ops.append(ManagerOp("ADD", None, text))
        else:
            shown, problem = _ref_id(item.get("id"))
            if problem is None and shown not in id_map:
                problem = "unknown_id"
            target = None if problem else id_map[shown]
            if kind == "NOOP" and target is None:
                ops.append(ManagerOp("NOOP", None, text))
            elif kind != "NOOP" and problem:
                ops.append(ManagerOp("NOOP", invalid=problem))
            elif target in taken:
                ops.append(ManagerOp("NOOP", invalid="duplicate_id"))
            elif kind == "UPDATE" and not text:
                ops.append(ManagerOp("NOOP", invalid="empty_text"))
            else:
                taken.add(target)
                old = item.get("old_memory") if kind == "UPDATE" else None
                ops.append(
                    ManagerOp(
                        kind, target, text, _safe(old).strip() if isinstance(old, str) else None
                    )
                )
    return ops


def valid_ops(id_map):
    """Teacher-style op lists over ``id_map``'s real ids (each memory named at most once)."""
    real = sorted(id_map.values())
    text = st.text(min_size=1, max_size=20).map(str.strip).filter(bool)

    def build(draw_targets, kinds, bodies, adds):
        ops = [ManagerOp(kind, target, body, "old" if kind == "UPDATE" else None)
               for target, kind, body in zip(draw_targets, kinds, bodies)]  # fmt: skip
        return ops + [ManagerOp("ADD", None, body) for body in adds]

    return st.builds(
        build,
        st.permutations(real),
        st.lists(
            st.sampled_from(["UPDATE", "DELETE", "NOOP"]), min_size=len(real), max_size=len(real)
        ),
        st.lists(text, min_size=len(real), max_size=len(real)),
        st.lists(text, max_size=3),
    )
