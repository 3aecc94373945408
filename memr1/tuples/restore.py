"""Turning a stored bank snapshot back into a live bank, for the manager's RL stage.

The stage samples ops for a tuple's facts, applies them to the bank before the turn and lets the
frozen Answer Agent answer over the result. The snapshot holds texts, owners and dates but no
embeddings (they are recomputed with the same encoder), and the new bank numbers its memories
afresh, so ``restore_memory`` also returns how the tuple's ids map onto the new ones.
"""

from __future__ import annotations

import itertools

from memr1.env.manager_io import ManagerOp
from memr1.env.memory_store import TURN_BASE, BankSpec, ConversationMemory, EmbedFn
from memr1.tuples.schema import ManagerTuple


def _turn_number(dia_id: str) -> int:
    # "D<session>:<turn>" -> banks.turn_code's number; an unknown turn is logged as -1.
    try:
        session, turn = dia_id[1:].split(":")
        return int(session) * TURN_BASE + int(turn)
    except ValueError:
        return -1


def restore_memory(
    record: ManagerTuple, *, embed: EmbedFn, dim: int, spec: BankSpec
) -> tuple[ConversationMemory, dict[int, int]]:
    """Rebuilds the bank a manager tuple was cut from.

    Args:
      record: the tuple.
      embed: the encoder the tuples were built with (texts -> emb_QE [Q, E]).
      dim: E.
      spec: the bank's capacity and retriever (e.g. the tuple builder's, `TupleConfig.bank`).

    Returns:
      ``(memory, ids)``: the live bank, with every snapshot memory re-added in id order under
      its owner and date, and ``ids[tuple id] = bank id`` (use it on ``record.retrieved``).
    """
    memory = ConversationMemory(record.sample_id, record.speakers, spec, dim)
    runs = itertools.groupby(record.bank, key=lambda m: (m.owner, m.updated, m.dia_id))
    for (owner, updated, dia_id), rows in runs:
        ops = [ManagerOp("ADD", text=row.text) for row in rows]
        memory.apply(ops, owner=owner, timestamp=updated, turn=_turn_number(dia_id), embed=embed)
    restored = memory.memories()
    if [m.text for m in restored] != [m.text for m in record.bank]:
        raise ValueError(
            f"{record.sample_id} turn {record.dia_id}: the restored bank differs from the "
            f"snapshot (a text too long for text_bytes={spec.text_bytes}?)"
        )
    return memory, {m.id: r.memory_id for m, r in zip(record.bank, restored)}
