"""Host-side views of a bank: the text view, op history, growth stats and the overflow check.

Everything here is derived from the bank arrays on demand (one device-to-host copy); nothing is
stored beside the arrays, so a view can never disagree with the bank it came from.
"""

from __future__ import annotations

import jax
import numpy as np

from memr1.memory.bank import ADD, DELETE, EVICT, KIND_NAMES, RAISE, UPDATE, MemoryBank
from memr1.memory.ops import Op, apply_op
from memr1.memory.text import decode_text


class BankOverflowError(RuntimeError):
    """An ADD found the bank full under the "raise" overflow policy."""


def _host(bank: MemoryBank, what: str) -> MemoryBank:
    if bank.batch_shape:
        raise ValueError(
            f"{what} needs one bank, got a batch of shape {bank.batch_shape}; "
            "use memr1.memory.unstack first"
        )
    return jax.device_get(bank)


def counters(bank: MemoryBank) -> dict[str, int | list]:
    """The counters as Python ints (lists for a batched bank), plus ``log_dropped``."""
    out = {name: np.asarray(value).tolist() for name, value in bank.counters.as_dict().items()}
    dropped = np.maximum(np.asarray(bank.log.cursor) - bank.log_capacity, 0)
    out["log_dropped"] = dropped.tolist()
    return out


def text_view(bank: MemoryBank) -> list[dict]:
    """The valid memories of one bank, sorted by id.

    Returns:
      A list of ``{"id", "text", "owner", "created", "updated", "version"}`` dicts.
    """
    bank = _host(bank, "text_view")
    rows = []
    for slot in np.flatnonzero(bank.valid_M):
        rows.append(
            {
                "id": int(bank.ids_M[slot]),
                "text": decode_text(bank.text_MC[slot], bank.length_M[slot]),
                "owner": int(bank.owner_M[slot]),
                "created": int(bank.created_M[slot]),
                "updated": int(bank.updated_M[slot]),
                "version": int(bank.version_M[slot]),
            }
        )
    return sorted(rows, key=lambda row: row["id"])


def op_log(bank: MemoryBank) -> list[dict]:
    """The op-log entries still held by one bank, oldest first.

    Returns:
      ``{"seq", "kind", "id", "turn", "timestamp", "old_text", "new_text"}`` dicts; ``seq`` is the
      entry's position among all mutations ever logged, so a gap before the first one means the
      ring overwrote older entries.
    """
    bank = _host(bank, "op_log")
    log, n_log = bank.log, bank.log_capacity
    cursor = int(log.cursor)
    entries = []
    for seq in range(max(cursor - n_log, 0), cursor):
        at = seq % n_log
        kind = int(log.kind_L[at])
        entries.append(
            {
                "seq": seq,
                "kind": KIND_NAMES[kind],
                "id": int(log.memory_id_L[at]),
                "turn": int(log.turn_L[at]),
                "timestamp": int(log.timestamp_L[at]),
                "old_text": decode_text(log.old_text_LC[at], log.old_length_L[at])
                if kind in (UPDATE, DELETE, EVICT)
                else None,
                "new_text": decode_text(log.new_text_LC[at], log.new_length_L[at])
                if kind in (ADD, UPDATE)
                else None,
            }
        )
    return entries


def memory_history(bank: MemoryBank, memory_id: int) -> list[dict]:
    """What happened to one memory: the log entries naming ``memory_id``, oldest first.

    Each entry says which turn added, updated, deleted or evicted it, with the old and new text.
    An ADD missing from the front means the ring dropped it (see ``counters(bank)``).
    """
    return [entry for entry in op_log(bank) if entry["id"] == int(memory_id)]


def growth_stats(bank: MemoryBank) -> dict:
    """How the bank grew over a conversation, from its counters and op log.

    Returns:
      ``{"capacity", "size", "counters", "per_turn"}``; ``per_turn`` lists, for each turn in the
      logged window, ``{"turn", "adds", "updates", "deletes", "evictions", "size"}`` where ``size``
      is the number of memories after that turn. Sizes are reconstructed backwards from the
      current size, so they stay right even when the ring has dropped older entries.
    """
    host_bank = _host(bank, "growth_stats")
    per_turn: dict[int, dict] = {}
    for entry in op_log(host_bank):
        turn = per_turn.setdefault(
            entry["turn"],
            {"turn": entry["turn"], "adds": 0, "updates": 0, "deletes": 0, "evictions": 0},
        )
        key = {"ADD": "adds", "UPDATE": "updates", "DELETE": "deletes", "EVICT": "evictions"}
        turn[key[entry["kind"]]] += 1
    size = int(np.sum(host_bank.valid_M))
    rows = [per_turn[t] for t in sorted(per_turn)]
    for row in reversed(rows):
        row["size"] = size
        size -= row["adds"] - row["deletes"] - row["evictions"]
    return {
        "capacity": host_bank.capacity,
        "size": int(np.sum(host_bank.valid_M)),
        "counters": counters(host_bank),
        "per_turn": rows,
    }


def raise_if_overflowed(bank: MemoryBank, since: MemoryBank | None = None) -> None:
    """Raises BankOverflowError if an ADD was refused for lack of room.

    Under jit a bank cannot raise, so the "raise" policy refuses the ADD and counts it in
    ``counters.refused_full``; the host calls this after a jitted step (one scalar per bank to
    fetch). Pass the bank from before the step as ``since`` to only report new refusals.
    Works on batched banks and names the offending batch index.
    """
    refused = np.asarray(jax.device_get(bank.counters.refused_full))
    if since is not None:
        refused = refused - np.asarray(jax.device_get(since.counters.refused_full))
    if not np.any(refused > 0):
        return
    where = np.argwhere(np.atleast_1d(refused) > 0)
    first = tuple(int(i) for i in where[0]) if bank.batch_shape else ()
    total = int(np.sum(refused))
    place = f" in bank {first} of batch {bank.batch_shape}" if bank.batch_shape else ""
    raise BankOverflowError(
        f"memory bank capacity {bank.capacity} exceeded{place}: {total} ADD op(s) refused under "
        f"overflow policy {RAISE!r}; build the bank with a larger capacity or with "
        "overflow='evict_oldest' or 'evict_lru'"
    )


_apply_op_jit = jax.jit(apply_op)


def apply_op_checked(bank: MemoryBank, op: Op) -> MemoryBank:
    """Applies one op with the jitted :func:`apply_op` and raises at once on a refused ADD.

    The convenience for host loops (ingesting a conversation op by op); the RL stage instead
    applies ops in bulk and calls :func:`raise_if_overflowed` once per step.
    """
    new_bank = _apply_op_jit(bank, op)
    raise_if_overflowed(new_bank, since=bank)
    return new_bank
