"""Reading a Memory Manager reply into validated ops: the security boundary between model text
and the memory bank. It never raises.

The manager sees the retrieved memories under ids 0..k-1 (`memr1.env.manager_io`), and
``id_map`` maps the shown ids back:

  * UPDATE, DELETE and NONE can only name a shown id; whatever else the text says (a huge,
    negative or made-up id, or instructions written inside a memory) cannot reach another memory;
  * ADD ignores the id the model wrote;
  * every entry that breaks a rule becomes a NOOP whose ``invalid`` field names the rule, and
    the counters add these up by kind (see :data:`COUNTER_KINDS`).

Two rules are memr1's own, not Mem0's (whose reader the paper's manager is trained against),
and each is a setting (:class:`ManagerRules`, the config's `agents` section):

  * ``repeated_id="first"``: each retrieved memory is changed at most once, the first valid op
    on an id wins and a later one is rejected as ``duplicate_id`` (so "NONE 0" then
    "UPDATE 0" keeps the memory as it was). Mem0 applies every entry in reply order
    (``"in_order"``): the update then lands, and an op on an id an earlier entry deleted finds
    nothing and does nothing (the bank counts it as an unknown id);
  * ``adds_per_fact=1``: at most one ADD per new fact, later ADDs rejected as ``excess_add``,
    so that a policy cannot learn to pad the bank; Mem0 keeps every ADD (``0``: no cap).

Whatever the rules, :class:`ParsedOps` counts the entries that name an id already named
(``repeated_ids``) and the ADDs beyond one per fact (``extra_adds``): the replies the first
rules change, logged as shares (`duplicate_id_frac`, `extra_add_frac`).

The op list is looked for anywhere in the reply (fences, prose, single quotes, trailing commas,
a bare list, a cut-off end: see :mod:`memr1.env.jsonish`); when several candidates are
found, :func:`_select_entries` says which one wins.

Invariant of :class:`ParsedOps`: ``counters[k]`` equals the number of ops with ``invalid == k``,
so ``num_valid + sum(counters.values()) == len(ops)``. An unparseable reply gives one NOOP with
``invalid == "unparseable"``; a reply with an empty op list gives no ops at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from memr1.env.jsonish import Found, PartialDict, PartialList, find_values

ADD, UPDATE, DELETE, NOOP = "ADD", "UPDATE", "DELETE", "NOOP"
KINDS = (ADD, UPDATE, DELETE, NOOP)
# Event names as the model may spell them, after upper-casing and dropping ' ', '_' and '-'.
_EVENTS = {"ADD": ADD, "UPDATE": UPDATE, "DELETE": DELETE, "NONE": NOOP, "NOOP": NOOP}
_LIST_KEYS = ("memory", "memories")
_INT_TEXT = re.compile(r"[+-]?\d+")

COUNTER_KINDS = (
    "unparseable",  # no op list could be read from the reply
    "truncated",  # an entry cut off by the end of the reply
    "bad_entry",  # a list item that is not an object
    "bad_event",  # event missing or not one of ADD/UPDATE/DELETE/NONE/NOOP
    "bad_id",  # UPDATE/DELETE id missing or not an integer
    "unknown_id",  # UPDATE/DELETE id that is an integer but not a shown id
    "duplicate_id",  # a second op on an id that already has a valid op
    "empty_text",  # ADD/UPDATE text missing, blank or not a string
    "excess_add",  # an ADD beyond one per new fact
)


REPEATED_ID_RULES = ("first", "in_order")


@dataclass(frozen=True)
class ManagerRules:
    """What the manager is shown beyond its memories and facts, and how its reply is read.

    Attributes:
      show_date: the conversation's date is shown (and the full prompt asks for relative time
        to become a date in the memory text); neither the paper's prompt nor Mem0's shows it.
      repeated_id: "first" (the first valid op on a shown id stands) or "in_order" (Mem0: every
        entry applies, in reply order).
      adds_per_fact: at most this many ADDs per new fact; 0 keeps every ADD (Mem0).
    """

    show_date: bool = True
    repeated_id: str = "first"
    adds_per_fact: int = 1

    def __post_init__(self):
        if self.repeated_id not in REPEATED_ID_RULES:
            raise ValueError(
                f"config agents.repeated_id={self.repeated_id!r} is not one of "
                f"{list(REPEATED_ID_RULES)}"
            )
        if isinstance(self.adds_per_fact, bool) or not isinstance(self.adds_per_fact, int):
            raise ValueError(f"config agents.adds_per_fact={self.adds_per_fact!r}: an integer")
        if self.adds_per_fact < 0:
            raise ValueError(f"config agents.adds_per_fact={self.adds_per_fact}: must be >= 0")

    @classmethod
    def from_config(cls, config) -> ManagerRules:
        a = config.agents
        return cls(
            show_date=bool(a.manager_date),
            repeated_id=a.repeated_id,
            adds_per_fact=a.adds_per_fact,
        )


# memr1's rules, the library default; Mem0's (the paper's) are ManagerRules(False, "in_order", 0).
MEMR1_RULES = ManagerRules()


@dataclass(frozen=True)
class ManagerOp:
    """One validated operation, in bank ids.

    Attributes:
      kind: ADD, UPDATE, DELETE or NOOP.
      target: the real memory id for UPDATE/DELETE (and for a NOOP naming a shown id), else None.
      text: the memory text (the full merged text for UPDATE); "" for a rejected entry.
      old_memory: the previous text the model quoted for UPDATE, when it gave one.
      invalid: the counter kind that turned this entry into a NOOP, or None for a valid op.
    """

    kind: str
    target: int | None = None
    text: str = ""
    old_memory: str | None = None
    invalid: str | None = None


@dataclass(frozen=True)
class ParsedOps:
    """The ops read from one manager reply, in reply order, and the rejects counted by kind.

    ``repeated_ids`` counts the entries (UPDATE, DELETE, NONE) naming a shown id that an earlier
    valid entry named, and ``extra_adds`` the ADDs with text beyond one per new fact, under
    either rule (see the module docstring).
    """

    ops: list[ManagerOp]
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTER_KINDS, 0))
    truncated_list: bool = False
    repeated_ids: int = 0
    extra_adds: int = 0

    @property
    def num_valid(self) -> int:
        return sum(op.invalid is None for op in self.ops)

    def effective(self) -> list[ManagerOp]:
        """The ops that change the bank (valid ADD, UPDATE and DELETE)."""
        return [op for op in self.ops if op.invalid is None and op.kind != NOOP]


def _keyed(entry: dict) -> dict:
    """The entry with keys stripped and lower-cased (the first spelling of a key wins)."""
    out: dict = {}
    for key, value in entry.items():
        out.setdefault(str(key).strip().lower(), value)
    return out


def _op_list(value) -> list | None:
    """The op list held by a ``{"memory": [...]}`` object, looking a few levels down."""
    if isinstance(value, dict):
        keyed = _keyed(value)
        for key in _LIST_KEYS:
            held = keyed.get(key)
            if isinstance(held, list):
                return held
            if isinstance(held, dict) and "event" in _keyed(held):
                return [held]
        for inner in value.values():
            if isinstance(inner, dict) and (found := _op_list(inner)) is not None:
                return found
    return None


def _is_op_dict(value) -> bool:
    return isinstance(value, dict) and "event" in _keyed(value)


def _select_entries(found: list[Found]) -> list | None:
    """Picks the op list out of the values found in a reply.

    Preference: the last object with a "memory" list; else the last non-empty bare list of
    objects with at least one "event"; else every top-level object with an "event", in order
    (one op per line); else an empty bare list (no ops); else None (unparseable). The last
    candidate wins because a model that drafts, or echoes the prompt's example, writes its final
    answer last.
    """
    held = [v for f in found if (v := _op_list(f.value)) is not None]
    if held:
        return held[-1]
    bare = [
        f.value
        for f in found
        if isinstance(f.value, list)
        and f.value
        and all(isinstance(item, dict) for item in f.value)
        and any(_is_op_dict(item) for item in f.value)
    ]
    if bare:
        return bare[-1]
    loose = [f.value for f in found if _is_op_dict(f.value)]
    if loose:
        return loose
    if any(f.value == [] and f.complete for f in found):
        return []
    return None


def _shown_id(value) -> tuple[int | None, str | None]:
    """(shown id, None) for an integer-like id, else (None, counter kind)."""
    if isinstance(value, bool) or value is None:
        return None, "bad_id"
    if isinstance(value, float):
        if value != value:  # NaN
            return None, "bad_id"
        if value in (float("inf"), float("-inf")):
            return None, "unknown_id"
        if not value.is_integer():
            return None, "bad_id"
        value = int(value)
    if isinstance(value, str):
        text = value.strip()
        if not _INT_TEXT.fullmatch(text):
            return None, "bad_id"
        if len(text) > 20:  # far beyond any shown id; skip converting a huge digit string
            return None, "unknown_id"
        value = int(text)
    if isinstance(value, int):
        return value, None
    return None, "bad_id"


def _text(value) -> str:
    return value.strip() if isinstance(value, str) else ""


class _Reading:
    """The state of reading one reply's entries in order: the ids already claimed, the ADDs
    and repeated ids seen. `read` gives an entry's op, or the name of its problem."""

    def __init__(self, id_map: Mapping[int, int], rules: ManagerRules, new_fact_count: int):
        self.id_map = id_map
        self.first_wins = rules.repeated_id == "first"
        self.max_adds = rules.adds_per_fact * new_fact_count if rules.adds_per_fact else None
        self.taken: set[int] = set()
        self.adds = self.repeated = 0

    def read(self, entry) -> ManagerOp | str:
        if isinstance(entry, PartialDict):
            return "truncated"
        if not isinstance(entry, dict):
            return "bad_entry"
        keyed = _keyed(entry)
        event = keyed.get("event")
        name = re.sub(r"[\s_\-]", "", event.upper()) if isinstance(event, str) else None
        kind = _EVENTS.get(name)
        if kind is None:
            return "bad_event"
        body = _text(keyed.get("text"))
        if kind == ADD:
            return self._add(body)
        shown, problem = _shown_id(keyed.get("id"))
        if problem is None and shown not in self.id_map:
            problem = "unknown_id"
        if kind == NOOP:
            # A NOOP changes nothing, so a bad id is harmless; it still claims a good id, as
            # the first word on a memory stands.
            target = self.id_map[shown] if problem is None else None
            if target is None:
                return ManagerOp(NOOP, None, body)
            if self._refused_repeat(target):
                return "duplicate_id"
            self.taken.add(target)
            return ManagerOp(NOOP, target, body)
        if problem is not None:
            return problem
        target = self.id_map[shown]
        if self._refused_repeat(target):
            return "duplicate_id"
        if kind == UPDATE and not body:
            return "empty_text"
        self.taken.add(target)
        old = keyed.get("old_memory")
        old = old.strip() if isinstance(old, str) and kind == UPDATE else None
        return ManagerOp(kind, target, body, old)

    def _add(self, body: str) -> ManagerOp | str:
        if not body:
            return "empty_text"
        self.adds += 1
        if self.max_adds is not None and self.adds > self.max_adds:
            return "excess_add"
        return ManagerOp(ADD, None, body)

    def _refused_repeat(self, target: int) -> bool:
        """Counts an op on an id already claimed; True when it is refused (first op wins)."""
        if target not in self.taken:
            return False
        self.repeated += 1
        return self.first_wins


def parse_manager_output(
    text: str,
    id_map: Mapping[int, int],
    *,
    new_fact_count: int,
    rules: ManagerRules = MEMR1_RULES,
) -> ParsedOps:
    """Reads a manager reply into validated ops in real ids. Never raises.

    Args:
      text: the model's reply.
      id_map: ``shown_id -> real_id`` from :func:`render_manager_input`.
      new_fact_count: the number of new facts shown; under ``rules.adds_per_fact`` k > 0 at
        most k times this many ADDs are accepted.
      rules: the repeated-id and ADD-cap rules (memr1's by default).

    Returns:
      The ops (invalid entries become NOOPs with ``invalid`` set) and the counters; see the
      module docstring for the invariant.
    """
    counters = dict.fromkeys(COUNTER_KINDS, 0)
    if not isinstance(text, str):
        text = ""
    entries = _select_entries(find_values(text))
    if entries is None:
        counters["unparseable"] = 1
        return ParsedOps([ManagerOp(NOOP, invalid="unparseable")], counters)

    reading = _Reading(id_map, rules, new_fact_count)
    ops: list[ManagerOp] = []
    for entry in entries:
        op = reading.read(entry)
        if isinstance(op, str):
            counters[op] += 1
            op = ManagerOp(NOOP, invalid=op)
        ops.append(op)
    return ParsedOps(
        ops,
        counters,
        truncated_list=isinstance(entries, PartialList),
        repeated_ids=reading.repeated,
        extra_adds=max(0, reading.adds - new_fact_count),
    )
