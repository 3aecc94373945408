"""The public bank operations: apply_op (and its scan), ADD / UPDATE / DELETE / NOOP, retrieval
marking, and host builders for ops.

Every function on banks is pure, returning a new bank, and works under ``jax.jit`` and
``jax.vmap``. :func:`apply_op` is the single entry point the RL manager stage uses: it picks the
kind's plan (:mod:`memr1.memory.kinds`) with ``lax.switch`` and executes it with one shared
scatter that touches O(C + E) elements.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from memr1.memory.bank import (
    ADD,
    DELETE,
    EVICT,
    KIND_NAMES,
    NOOP,
    UPDATE,
    Counters,
    MemoryBank,
    OpLog,
)
from memr1.memory.kinds import BAD_KIND_BRANCH, PLANS, LogEntry, Op, Plan, i32
from memr1.memory.text import encode_text


def _append_log(log: OpLog, entry: LogEntry, turn: jax.Array, timestamp: jax.Array) -> OpLog:
    n_log = log.kind_L.shape[-1]
    cursor = log.cursor + i32(entry.write)
    if n_log == 0:
        return log.replace(cursor=cursor)
    # Index L is out of bounds, and mode="drop" turns the write into a no-op.
    at = jnp.where(entry.write, log.cursor % n_log, n_log)

    def put(arr, value):
        return arr.at[at].set(value, mode="drop")

    return OpLog(
        kind_L=put(log.kind_L, entry.kind),
        memory_id_L=put(log.memory_id_L, entry.memory_id),
        turn_L=put(log.turn_L, turn),
        timestamp_L=put(log.timestamp_L, timestamp),
        old_text_LC=put(log.old_text_LC, entry.old_text_C),
        old_length_L=put(log.old_length_L, entry.old_length),
        new_text_LC=put(log.new_text_LC, entry.new_text_C),
        new_length_L=put(log.new_length_L, entry.new_length),
        cursor=cursor,
    )


def _execute(bank: MemoryBank, op: Op, plan: Plan) -> MemoryBank:
    at = jnp.where(plan.write, plan.slot, bank.capacity)  # Out of bounds: dropped.

    def put(arr, value):
        return arr.at[at].set(value, mode="drop")

    row = plan.row
    counters = Counters(
        **{name: value + plan.deltas[name] for name, value in bank.counters.as_dict().items()}
    )
    log = bank.log
    for entry in plan.log:
        log = _append_log(log, entry, i32(op.turn), i32(op.timestamp))
    return bank.replace(
        ids_M=put(bank.ids_M, row.id),
        text_MC=put(bank.text_MC, row.text_C),
        length_M=put(bank.length_M, row.length),
        emb_ME=put(bank.emb_ME, row.emb_E),
        valid_M=put(bank.valid_M, row.valid),
        owner_M=put(bank.owner_M, row.owner),
        created_M=put(bank.created_M, row.created),
        updated_M=put(bank.updated_M, row.updated),
        version_M=put(bank.version_M, row.version),
        last_retrieved_M=put(bank.last_retrieved_M, row.last_retrieved),
        last_used_M=put(bank.last_used_M, row.last_used),
        next_id=bank.next_id + i32(plan.take_id),
        clock=bank.clock + 1,
        counters=counters,
        log=log,
    )


def apply_op(bank: MemoryBank, op: Op) -> MemoryBank:
    """Applies one op to one bank; vmap it for batches of banks and ops.

    Args:
      bank: an unbatched MemoryBank.
      op: an unbatched Op whose text_C / emb_E match the bank's C and E.

    Returns:
      The new bank. ``clock`` advances by one for every op, applied or not.
    """
    kind = i32(op.kind)
    branch = jnp.where((kind >= NOOP) & (kind <= DELETE), kind, BAD_KIND_BRANCH)
    plan = jax.lax.switch(branch, PLANS, bank, op)
    return _execute(bank, op, plan)


def apply_ops(bank: MemoryBank, ops_N: Op) -> MemoryBank:
    """Applies N ops in order (``lax.scan``); every field of ``ops_N`` has a leading axis N."""
    bank, _ = jax.lax.scan(lambda b, op: (apply_op(b, op), None), bank, ops_N)
    return bank


def _op(kind, target, text_C, length, emb_E, owner, timestamp, turn, truncated) -> Op:
    return Op(
        kind=i32(kind),
        target=i32(target),
        text_C=jnp.asarray(text_C, jnp.uint8),
        length=i32(length),
        emb_E=jnp.asarray(emb_E, jnp.float32),
        owner=i32(owner),
        timestamp=i32(timestamp),
        turn=i32(turn),
        truncated=jnp.asarray(truncated, jnp.bool_),
    )


def add(bank, text_C, length, emb_E, owner, timestamp, turn, truncated=False) -> MemoryBank:
    """ADD a memory with a fresh id (``bank.next_id``). text_C uint8 [C], emb_E float32 [E]."""
    return apply_op(bank, _op(ADD, -1, text_C, length, emb_E, owner, timestamp, turn, truncated))


def update(bank, memory_id, text_C, length, emb_E, timestamp, turn, truncated=False) -> MemoryBank:
    """UPDATE a memory in place: same id, new text and embedding, version + 1."""
    return apply_op(
        bank, _op(UPDATE, memory_id, text_C, length, emb_E, -1, timestamp, turn, truncated)
    )


def delete(bank: MemoryBank, memory_id, timestamp, turn) -> MemoryBank:
    """DELETE a memory; its id is never reused."""
    blank_C = jnp.zeros((bank.text_bytes,), jnp.uint8)
    blank_E = jnp.zeros((bank.emb_dim,), jnp.float32)
    return apply_op(bank, _op(DELETE, memory_id, blank_C, 0, blank_E, -1, timestamp, turn, False))


def noop(bank: MemoryBank) -> MemoryBank:
    """NOOP: no memory changes; counted in ``counters.noops``."""
    blank_C = jnp.zeros((bank.text_bytes,), jnp.uint8)
    blank_E = jnp.zeros((bank.emb_dim,), jnp.float32)
    return apply_op(bank, _op(NOOP, -1, blank_C, 0, blank_E, -1, 0, -1, False))


def mark_retrieved(bank: MemoryBank, ids_K: jax.Array, step) -> MemoryBank:
    """Records that the memories ``ids_K`` (int32 [K], -1 = padding) were retrieved at ``step``.

    Sets ``last_retrieved_M`` to ``step`` and ``last_used_M`` to the advanced bank clock, which is
    what "evict_lru" orders by. Ids that are absent are ignored: a retriever may hold results from
    before a DELETE, and that is not an error.
    """
    ids_K = i32(ids_K)
    hit_MK = (bank.ids_M[:, None] == ids_K[None, :]) & (ids_K[None, :] >= 0)
    hit_M = bank.valid_M & jnp.any(hit_MK, axis=1)
    clock = bank.clock + 1
    return bank.replace(
        last_used_M=jnp.where(hit_M, clock, bank.last_used_M),
        last_retrieved_M=jnp.where(hit_M, i32(step), bank.last_retrieved_M),
        clock=clock,
    )


_KIND_BY_NAME = {name: kind for kind, name in KIND_NAMES.items() if kind != EVICT}
_KIND_BY_NAME["NONE"] = NOOP  # The manager's JSON spells NOOP as "NONE".


def make_op(
    bank: MemoryBank,
    kind: int | str,
    *,
    text: str = "",
    emb=None,
    target: int = -1,
    owner: int = 0,
    timestamp: int = 0,
    turn: int = 0,
) -> Op:
    """Builds an Op on the host (numpy leaves), encoding ``text`` to the bank's C bytes.

    ``kind`` is an int or a name (ADD, UPDATE, DELETE, NOOP or NONE); ``emb`` a float [E] array
    (zeros if None); ``timestamp`` seconds since the epoch, which must fit in int32.
    """
    if isinstance(kind, str):
        if kind.upper() not in _KIND_BY_NAME:
            raise ValueError(f"unknown op kind {kind!r}; expected one of {sorted(_KIND_BY_NAME)}")
        kind = _KIND_BY_NAME[kind.upper()]
    info = np.iinfo(np.int32)
    for name, value in [("timestamp", timestamp), ("turn", turn), ("target", target)]:
        if not info.min <= int(value) <= info.max:
            raise ValueError(f"op {name} {value} does not fit in int32")
    text_C, length, truncated = encode_text(text, bank.text_bytes)
    emb_E = np.zeros((bank.emb_dim,), np.float32) if emb is None else np.asarray(emb, np.float32)
    if emb_E.shape != (bank.emb_dim,):
        raise ValueError(f"op embedding has shape {emb_E.shape}, the bank needs ({bank.emb_dim},)")
    return Op(
        kind=np.int32(kind),
        target=np.int32(target),
        text_C=text_C,
        length=np.int32(length),
        emb_E=emb_E,
        owner=np.int32(owner),
        timestamp=np.int32(timestamp),
        turn=np.int32(turn),
        truncated=np.bool_(truncated),
    )


def stack_ops(ops: list[Op]) -> Op:
    """Stacks ops along a new leading axis (N for :func:`apply_ops`, G or B for vmap)."""
    if not ops:
        raise ValueError("stack_ops needs at least one op")
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *ops)
