"""The memory bank: a pytree of fixed-capacity arrays, and helpers to build and batch banks.

One bank holds up to M memories. A memory lives in a slot; its id is stable and never reused
within a bank (``next_id`` only grows), so an operation that names a deleted id is recognised as
stale instead of silently hitting whatever now occupies the slot. Every field is an array, so a
bank can be jitted, vmapped over a batch of banks (leading axes B or G), and saved with Orbax.

Shapes of one bank (a batched bank prepends its batch axes to every field):
  ids_M int32 [M] (-1 in an empty slot), text_MC uint8 [M, C], length_M int32 [M],
  emb_ME float32 [M, E], valid_M bool [M], owner_M int32 [M],
  created_M / updated_M int32 [M] (seconds since the Unix epoch, the session date),
  version_M int32 [M] (1 after ADD, +1 per UPDATE, 0 in an empty slot),
  last_retrieved_M int32 [M] (caller's step of the last retrieval, -1 if never),
  last_used_M int32 [M] (bank clock at the last write or retrieval; the LRU key),
  next_id int32 [], clock int32 [], counters (int32 [] each), log (see :class:`OpLog`).
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

# Overflow policies: what an ADD does when every slot is taken.
RAISE = "raise"  # Refuse the ADD and count it in ``refused_full``; the host raises on it.
EVICT_OLDEST = "evict_oldest"  # Replace the memory with the oldest ``updated`` time, then id.
EVICT_LRU = "evict_lru"  # Replace the least recently used (written or retrieved) memory.
OVERFLOW_POLICIES = (RAISE, EVICT_OLDEST, EVICT_LRU)

# Op kinds, as stored in ``Op.kind`` and ``OpLog.kind_L``. EVICT only appears in the log.
NOOP, ADD, UPDATE, DELETE, EVICT = 0, 1, 2, 3, 4
KIND_NAMES = {NOOP: "NOOP", ADD: "ADD", UPDATE: "UPDATE", DELETE: "DELETE", EVICT: "EVICT"}


@flax.struct.dataclass
class Counters:
    """Per-bank operation counters, int32 [] each (or [B...] in a batched bank)."""

    adds: jax.Array
    updates: jax.Array
    deletes: jax.Array
    noops: jax.Array
    unknown_id: jax.Array  # UPDATE/DELETE naming an id that is absent or deleted.
    evictions: jax.Array  # Memories replaced by an ADD under an evict policy.
    refused_full: jax.Array  # ADDs refused because the bank was full (policy "raise").
    truncations: jax.Array  # Applied ADD/UPDATE whose text was cut to fit C bytes.
    empty_text: jax.Array  # ADD/UPDATE with empty text, skipped as Mem0 does.
    bad_kind: jax.Array  # Ops whose kind is not 0..3.

    @classmethod
    def zeros(cls) -> Counters:
        zero = jnp.zeros((), jnp.int32)
        return cls(**{name: zero for name in cls.__dataclass_fields__})

    def as_dict(self) -> dict[str, jax.Array]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@flax.struct.dataclass
class OpLog:
    """A ring buffer of the L most recent bank mutations (ADD, UPDATE, DELETE, EVICT).

    ``cursor`` counts every mutation ever logged; entry ``n`` lives at row ``n % L``, so entries
    ``0 .. cursor - L - 1`` were overwritten (see :func:`log_dropped`). NOOPs and refused ops are
    not logged; they only move the counters.
    """

    kind_L: jax.Array  # int32 [L]
    memory_id_L: jax.Array  # int32 [L]
    turn_L: jax.Array  # int32 [L]
    timestamp_L: jax.Array  # int32 [L]
    old_text_LC: jax.Array  # uint8 [L, C], the text before an UPDATE/DELETE/EVICT
    old_length_L: jax.Array  # int32 [L]
    new_text_LC: jax.Array  # uint8 [L, C], the text after an ADD/UPDATE
    new_length_L: jax.Array  # int32 [L]
    cursor: jax.Array  # int32 []


@flax.struct.dataclass
class MemoryBank:
    """A fixed-capacity memory bank; see the module docstring for shapes and meanings."""

    ids_M: jax.Array
    text_MC: jax.Array
    length_M: jax.Array
    emb_ME: jax.Array
    valid_M: jax.Array
    owner_M: jax.Array
    created_M: jax.Array
    updated_M: jax.Array
    version_M: jax.Array
    last_retrieved_M: jax.Array
    last_used_M: jax.Array
    next_id: jax.Array
    clock: jax.Array
    counters: Counters
    log: OpLog
    # Static, so jit specialises on it and a batch of banks must share one policy.
    overflow: str = flax.struct.field(pytree_node=False, default=RAISE)

    @property
    def capacity(self) -> int:
        return self.ids_M.shape[-1]

    @property
    def text_bytes(self) -> int:
        return self.text_MC.shape[-1]

    @property
    def emb_dim(self) -> int:
        return self.emb_ME.shape[-1]

    @property
    def log_capacity(self) -> int:
        return self.log.kind_L.shape[-1]

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(self.ids_M.shape[:-1])


def empty_bank(
    capacity: int,
    text_bytes: int,
    emb_dim: int,
    log_capacity: int,
    overflow: str = RAISE,
) -> MemoryBank:
    """Builds an empty bank.

    Args:
      capacity: M, the number of memory slots.
      text_bytes: C, the maximum UTF-8 bytes kept per memory.
      emb_dim: E, the sentence-embedding width.
      log_capacity: L, entries kept in the op log ring; 0 keeps none (the RL stage does not
        need a log), and every mutation is then counted as dropped.
      overflow: one of ``OVERFLOW_POLICIES``.

    Returns:
      A MemoryBank with every slot empty.
    """
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"overflow policy {overflow!r} is not one of {OVERFLOW_POLICIES}")
    for name, value, low in [
        ("capacity", capacity, 1),
        ("text_bytes", text_bytes, 1),
        ("emb_dim", emb_dim, 1),
        ("log_capacity", log_capacity, 0),
    ]:
        if int(value) != value or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    m, c, e, n_log = capacity, text_bytes, emb_dim, log_capacity

    def full(shape, value, dtype):
        return jnp.full(shape, value, dtype)

    log = OpLog(
        kind_L=full((n_log,), NOOP, jnp.int32),
        memory_id_L=full((n_log,), -1, jnp.int32),
        turn_L=full((n_log,), -1, jnp.int32),
        timestamp_L=full((n_log,), 0, jnp.int32),
        old_text_LC=full((n_log, c), 0, jnp.uint8),
        old_length_L=full((n_log,), 0, jnp.int32),
        new_text_LC=full((n_log, c), 0, jnp.uint8),
        new_length_L=full((n_log,), 0, jnp.int32),
        cursor=jnp.zeros((), jnp.int32),
    )
    return MemoryBank(
        ids_M=full((m,), -1, jnp.int32),
        text_MC=full((m, c), 0, jnp.uint8),
        length_M=full((m,), 0, jnp.int32),
        emb_ME=full((m, e), 0.0, jnp.float32),
        valid_M=full((m,), False, jnp.bool_),
        owner_M=full((m,), -1, jnp.int32),
        created_M=full((m,), 0, jnp.int32),
        updated_M=full((m,), 0, jnp.int32),
        version_M=full((m,), 0, jnp.int32),
        last_retrieved_M=full((m,), -1, jnp.int32),
        last_used_M=full((m,), 0, jnp.int32),
        next_id=jnp.zeros((), jnp.int32),
        clock=jnp.zeros((), jnp.int32),
        counters=Counters.zeros(),
        log=log,
        overflow=overflow,
    )


def bank_config(bank: MemoryBank) -> dict:
    """The static description of a (possibly batched) bank, as saved in the JSON sidecar."""
    return {
        "capacity": bank.capacity,
        "text_bytes": bank.text_bytes,
        "emb_dim": bank.emb_dim,
        "log_capacity": bank.log_capacity,
        "overflow": bank.overflow,
        "batch_shape": list(bank.batch_shape),
    }


def stack_banks(banks: list[MemoryBank]) -> MemoryBank:
    """Stacks unbatched (or equally batched) banks along a new leading axis B."""
    if not banks:
        raise ValueError("stack_banks needs at least one bank")
    first = bank_config(banks[0])
    for i, bank in enumerate(banks[1:], start=1):
        if bank_config(bank) != first:
            raise ValueError(
                f"bank {i} has config {bank_config(bank)}, which differs from bank 0: {first}"
            )
    return jax.tree.map(lambda *xs: jnp.stack(xs), *banks)


def unstack(bank: MemoryBank) -> list[MemoryBank]:
    """Splits a bank batched along its leading axis into a list of banks."""
    if not bank.batch_shape:
        raise ValueError("unstack needs a batched bank; this one has no batch axis")
    return [jax.tree.map(lambda x, i=i: x[i], bank) for i in range(bank.batch_shape[0])]


def tile(bank: MemoryBank, copies: int) -> MemoryBank:
    """Repeats a bank ``copies`` times along a new leading axis (G copies for G candidate ops)."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (copies, *x.shape)), bank)


def log_dropped(bank: MemoryBank) -> jax.Array:
    """Number of op-log entries overwritten (or never kept, when L = 0); int32 [batch]."""
    return jnp.maximum(bank.log.cursor - bank.log_capacity, 0)
