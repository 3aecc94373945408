"""What each op kind does to a bank, as a small plan; :mod:`memr1.memory.ops` executes plans.

A plan says which slot to write, the new row, the counter increments and up to two op-log
entries. Planning is separate from executing because under ``vmap`` the ``lax.switch`` over kinds
evaluates every branch: branches that only build a plan (O(C + E) values) keep a batch of
candidate ops cheap, while the one scatter that executes the chosen plan is shared.

Ops that cannot apply never crash and never vanish: an unknown or deleted id, empty text, a full
bank under the "raise" policy and an unknown kind each leave the memories as they were and bump
their own counter.
"""

from __future__ import annotations

from typing import NamedTuple

import flax.struct
import jax
import jax.numpy as jnp

from memr1.memory.bank import (
    ADD,
    DELETE,
    EVICT,
    EVICT_LRU,
    EVICT_OLDEST,
    NOOP,
    RAISE,
    UPDATE,
    Counters,
    MemoryBank,
)


@flax.struct.dataclass
class Op:
    """One bank operation; a batch of ops has leading axes on every field.

    kind int32 [] (NOOP 0, ADD 1, UPDATE 2, DELETE 3), target int32 [] (memory id for UPDATE and
    DELETE), text_C uint8 [C], length int32 [], emb_E float32 [E], owner int32 [],
    timestamp int32 [] (seconds since the epoch), turn int32 [] (dialogue turn index, for the log),
    truncated bool [] (the host cut the text to fit C bytes).
    """

    kind: jax.Array
    target: jax.Array
    text_C: jax.Array
    length: jax.Array
    emb_E: jax.Array
    owner: jax.Array
    timestamp: jax.Array
    turn: jax.Array
    truncated: jax.Array


class Row(NamedTuple):
    """The contents of one bank slot (the [M] fields of MemoryBank at one index)."""

    id: jax.Array
    text_C: jax.Array
    length: jax.Array
    emb_E: jax.Array
    valid: jax.Array
    owner: jax.Array
    created: jax.Array
    updated: jax.Array
    version: jax.Array
    last_retrieved: jax.Array
    last_used: jax.Array


class LogEntry(NamedTuple):
    """One op-log entry to append if ``write``; turn and timestamp come from the op."""

    write: jax.Array
    kind: jax.Array
    memory_id: jax.Array
    old_text_C: jax.Array
    old_length: jax.Array
    new_text_C: jax.Array
    new_length: jax.Array


class Plan(NamedTuple):
    """What one op does to one bank; every kind returns the same structure for lax.switch."""

    write: jax.Array  # bool []: write ``row`` into ``slot``.
    slot: jax.Array
    row: Row
    take_id: jax.Array  # bool []: the row consumed ``next_id``.
    deltas: dict[str, jax.Array]  # Counter increments, one int32 [] per Counters field.
    log: tuple[LogEntry, LogEntry]  # Two, because an evicting ADD logs the EVICT too.


def i32(x) -> jax.Array:
    """An int32 array; explicit, so every switch branch returns identical dtypes."""
    return jnp.asarray(x, jnp.int32)


def _deltas(**increments) -> dict[str, jax.Array]:
    out = {name: i32(0) for name in Counters.__dataclass_fields__}
    out.update({name: i32(value) for name, value in increments.items()})
    return out


def _row_at(bank: MemoryBank, slot: jax.Array) -> Row:
    return Row(
        id=bank.ids_M[slot],
        text_C=bank.text_MC[slot],
        length=bank.length_M[slot],
        emb_E=bank.emb_ME[slot],
        valid=bank.valid_M[slot],
        owner=bank.owner_M[slot],
        created=bank.created_M[slot],
        updated=bank.updated_M[slot],
        version=bank.version_M[slot],
        last_retrieved=bank.last_retrieved_M[slot],
        last_used=bank.last_used_M[slot],
    )


def _empty_row(bank: MemoryBank) -> Row:
    """The contents of an empty slot, matching :func:`memr1.memory.bank.empty_bank`."""
    return Row(
        id=i32(-1),
        text_C=jnp.zeros((bank.text_bytes,), jnp.uint8),
        length=i32(0),
        emb_E=jnp.zeros((bank.emb_dim,), jnp.float32),
        valid=jnp.asarray(False),
        owner=i32(-1),
        created=i32(0),
        updated=i32(0),
        version=i32(0),
        last_retrieved=i32(-1),
        last_used=i32(0),
    )


def _no_log(bank: MemoryBank) -> LogEntry:
    blank_C = jnp.zeros((bank.text_bytes,), jnp.uint8)
    return LogEntry(jnp.asarray(False), i32(NOOP), i32(-1), blank_C, i32(0), blank_C, i32(0))


def _find(bank: MemoryBank, memory_id: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(found, slot) of a valid memory with this id; ids are unique among valid memories."""
    match_M = bank.valid_M & (bank.ids_M == memory_id)
    return jnp.any(match_M), i32(jnp.argmax(match_M))


def _argmin_then_id(key_M: jax.Array, ids_M: jax.Array) -> jax.Array:
    """Slot with the smallest key, ties broken by the smallest id (only used on a full bank)."""
    tied_M = key_M == jnp.min(key_M)
    return i32(jnp.argmin(jnp.where(tied_M, ids_M, jnp.iinfo(jnp.int32).max)))


def _victim(bank: MemoryBank) -> jax.Array:
    if bank.overflow == EVICT_OLDEST:
        return _argmin_then_id(bank.updated_M, bank.ids_M)
    if bank.overflow == EVICT_LRU:
        return _argmin_then_id(bank.last_used_M, bank.ids_M)
    raise ValueError(f"overflow policy {bank.overflow!r} does not evict")


def _clean_text(bank: MemoryBank, op: Op) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(text_C, length, truncated) with the length clipped to [0, C] and the bytes past it zeroed.

    Zeroing makes the stored row a function of the text alone, so equal texts give equal banks. A
    length over C can only come from a caller that skipped :func:`encode_text`; it is counted as
    a truncation rather than trusted.
    """
    length = i32(jnp.clip(op.length, 0, bank.text_bytes))
    keep_C = jnp.arange(bank.text_bytes) < length
    text_C = jnp.where(keep_C, op.text_C, 0).astype(jnp.uint8)
    return text_C, length, op.truncated | (op.length > bank.text_bytes)


def _plan_noop(bank: MemoryBank, op: Op) -> Plan:
    del op
    blank = _no_log(bank)
    return Plan(jnp.asarray(False), i32(0), _empty_row(bank), jnp.asarray(False),
                 _deltas(noops=1), (blank, blank))  # fmt: skip


def _plan_bad_kind(bank: MemoryBank, op: Op) -> Plan:
    del op
    blank = _no_log(bank)
    return Plan(jnp.asarray(False), i32(0), _empty_row(bank), jnp.asarray(False),
                 _deltas(bad_kind=1), (blank, blank))  # fmt: skip


def _plan_add(bank: MemoryBank, op: Op) -> Plan:
    text_C, length, truncated = _clean_text(bank, op)
    nonempty = length > 0
    free_M = ~bank.valid_M
    has_free = jnp.any(free_M)
    free_slot = i32(jnp.argmax(free_M))
    if bank.overflow == RAISE:
        fits, slot, evicting = has_free, free_slot, jnp.asarray(False)
    else:
        fits = jnp.asarray(True)
        slot = jnp.where(has_free, free_slot, _victim(bank))
        evicting = ~has_free
    write = nonempty & fits
    evict = write & evicting
    old = _row_at(bank, slot)
    row = Row(
        id=bank.next_id,
        text_C=text_C,
        length=length,
        emb_E=op.emb_E,
        valid=jnp.asarray(True),
        owner=op.owner,
        created=op.timestamp,
        updated=op.timestamp,
        version=i32(1),
        last_retrieved=i32(-1),
        last_used=bank.clock + 1,
    )
    blank_C = jnp.zeros_like(text_C)
    log = (
        LogEntry(evict, i32(EVICT), old.id, old.text_C, old.length, blank_C, i32(0)),
        LogEntry(write, i32(ADD), bank.next_id, blank_C, i32(0), text_C, length),
    )
    deltas = _deltas(
        adds=write,
        evictions=evict,
        refused_full=nonempty & ~fits,
        empty_text=~nonempty,
        truncations=write & truncated,
    )
    return Plan(write, slot, row, write, deltas, log)


def _plan_update(bank: MemoryBank, op: Op) -> Plan:
    text_C, length, truncated = _clean_text(bank, op)
    found, slot = _find(bank, op.target)
    write = found & (length > 0)
    old = _row_at(bank, slot)
    row = old._replace(
        text_C=text_C,
        length=length,
        emb_E=op.emb_E,
        updated=op.timestamp,
        version=old.version + 1,
        last_used=bank.clock + 1,
    )
    entry = LogEntry(write, i32(UPDATE), op.target, old.text_C, old.length, text_C, length)
    deltas = _deltas(
        updates=write,
        unknown_id=~found,
        empty_text=found & (length == 0),
        truncations=write & truncated,
    )
    return Plan(write, slot, row, jnp.asarray(False), deltas, (entry, _no_log(bank)))


def _plan_delete(bank: MemoryBank, op: Op) -> Plan:
    found, slot = _find(bank, op.target)
    old = _row_at(bank, slot)
    blank_C = jnp.zeros_like(old.text_C)
    entry = LogEntry(found, i32(DELETE), op.target, old.text_C, old.length, blank_C, i32(0))
    deltas = _deltas(deletes=found, unknown_id=~found)
    return Plan(found, slot, _empty_row(bank), jnp.asarray(False), deltas, (entry, _no_log(bank)))


# Indexed by op kind (NOOP, ADD, UPDATE, DELETE), then one branch for every other kind.
PLANS = (_plan_noop, _plan_add, _plan_update, _plan_delete, _plan_bad_kind)
BAD_KIND_BRANCH = len(PLANS) - 1
