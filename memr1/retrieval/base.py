"""The retrieval interface shared by all backends, and the bookkeeping they have in common.

A retriever indexes the rows of a memory bank held as plain arrays: ``emb_ME`` (unit embeddings),
``valid_M`` (slot in use) and ``owner_M`` (which speaker's bank a slot belongs to, ids >= 0).
Results name bank slots (or any dense non-negative ids, such as a bank's stable memory ids), so
they index the bank's text directly; ids double as row numbers of the backends' copies, so memory
grows with the largest id, not with the number of memories. Scores are dot products,
i.e. cosines for unit vectors. Every backend orders a row by score descending, breaks exact ties
by the lower slot id, and pads with id -1 / score -inf when fewer than k slots qualify.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

Owner = int | Sequence[int] | np.ndarray | None


@runtime_checkable
class Retriever(Protocol):
    """Top-k maximum-inner-product search over the valid slots of a bank."""

    def build(self, emb_ME: np.ndarray, valid_M: np.ndarray, owner_M: np.ndarray) -> None:
        """(Re)indexes a whole bank: emb_ME [M, E] float32, valid_M [M] bool, owner_M [M] int."""

    def upsert(self, ids_U: np.ndarray, emb_UE: np.ndarray, owner_U: np.ndarray) -> None:
        """Writes slots ids_U [U] (any slot id >= 0; the bank grows) and marks them valid."""

    def delete(self, ids_U: np.ndarray) -> None:
        """Marks slots ids_U [U] invalid; they are never returned afterwards."""

    def search(
        self, query_QE: np.ndarray, k: int, owner: Owner = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Returns (ids_QK int64 [Q, k], scores_QK float32 [Q, k]) over slots of ``owner``."""

    def __len__(self) -> int:
        """Number of valid slots."""


def owners_array(owner: Owner) -> np.ndarray | None:
    """Normalises an owner filter: None (all owners) or a sorted unique int64 array."""
    if owner is None:
        return None
    arr = np.unique(np.asarray(owner, dtype=np.int64).reshape(-1))
    if arr.size and arr[0] < 0:
        raise ValueError(f"owner ids must be >= 0, got {arr[0]}")
    return arr


def check_query(query_QE: np.ndarray, dim: int, k: int) -> np.ndarray:
    """Validates a query batch and returns it as contiguous float32 [Q, E]."""
    q = np.ascontiguousarray(query_QE, dtype=np.float32)
    if q.ndim != 2 or q.shape[1] != dim:
        raise ValueError(f"query_QE must be [Q, {dim}], got shape {q.shape}")
    if k < 1:
        raise ValueError(f"k must be positive, got {k}")
    return q


def rank_candidates(ids_QC: np.ndarray, scores_QC: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """Keeps the k best candidates per row in the canonical order.

    Args:
      ids_QC: int [Q, C] candidate slot ids, -1 for "no candidate"; a slot appears at most once
        per row.
      scores_QC: float [Q, C] their scores.
      k: how many to keep.

    Returns:
      (ids_QK int64, scores_QK float32): score descending, lower id first on equal scores,
      padded with -1 / -inf.
    """
    ids = np.asarray(ids_QC, np.int64)
    scores = np.where(ids >= 0, np.asarray(scores_QC, np.float32), -np.inf).astype(np.float32)
    # lexsort's last key is the primary one: score descending, then id ascending.
    order = np.lexsort((ids, -scores), axis=1)[:, :k]
    ids = np.take_along_axis(ids, order, axis=1)
    scores = np.take_along_axis(scores, order, axis=1)
    ids = np.where(np.isneginf(scores), -1, ids)
    pad = k - ids.shape[1]
    if pad > 0:
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
    return ids, scores


class HostBank:
    """A growable host copy of (emb_ME, valid_M, owner_M), used by the host-side backends."""

    def __init__(self, dim: int):
        self.emb_ME = np.zeros((0, dim), np.float32)
        self.valid_M = np.zeros((0,), bool)
        self.owner_M = np.zeros((0,), np.int64)

    @property
    def dim(self) -> int:
        return self.emb_ME.shape[1]

    def assign(self, emb_ME: np.ndarray, valid_M: np.ndarray, owner_M: np.ndarray) -> None:
        emb_ME = np.asarray(emb_ME, np.float32)
        m = emb_ME.shape[0]
        shapes_ok = emb_ME.ndim == 2 and emb_ME.shape[1] == self.dim
        if not shapes_ok or np.shape(valid_M) != (m,) or np.shape(owner_M) != (m,):
            raise ValueError(
                f"bank arrays disagree: emb_ME {emb_ME.shape} (E={self.dim}), "
                f"valid_M {np.shape(valid_M)}, "
                f"owner_M {np.shape(owner_M)}"
            )
        valid = np.asarray(valid_M, bool)
        owner = np.asarray(owner_M, np.int64)
        if np.any(owner[valid] < 0):
            raise ValueError("owner_M must be >= 0 on valid slots")
        self.emb_ME = np.array(emb_ME, np.float32, order="C")
        self.valid_M = valid.copy()
        self.owner_M = owner.copy()

    def write(self, ids_U: np.ndarray, emb_UE: np.ndarray, owner_U: np.ndarray) -> np.ndarray:
        """Stores rows and returns the previous owners of those slots (-1 where unused)."""
        ids, emb, owner = check_update(ids_U, emb_UE, owner_U, self.dim)
        if ids.size and ids.max() >= len(self.valid_M):
            self._grow(int(ids.max()) + 1)
        before = np.where(self.valid_M[ids], self.owner_M[ids], -1)
        self.emb_ME[ids] = emb
        self.valid_M[ids] = True
        self.owner_M[ids] = owner
        return before

    def erase(self, ids_U: np.ndarray) -> np.ndarray:
        """Invalidates slots and returns the ids among them that were valid before."""
        ids = check_ids(ids_U)
        ids = ids[ids < len(self.valid_M)]
        was = self.valid_M[ids].copy()
        self.valid_M[ids] = False
        return ids[was]

    def allowed(self, owners: np.ndarray | None) -> np.ndarray:
        """bool [M]: valid slots whose owner passes the filter."""
        if owners is None:
            return self.valid_M
        return self.valid_M & np.isin(self.owner_M, owners)

    def _grow(self, m: int) -> None:
        # Doubling keeps a stream of one-slot inserts amortised O(1) per insert.
        cap = max(m, 2 * len(self.valid_M))
        extra = cap - len(self.valid_M)
        self.emb_ME = np.concatenate([self.emb_ME, np.zeros((extra, self.dim), np.float32)])
        self.valid_M = np.concatenate([self.valid_M, np.zeros(extra, bool)])
        self.owner_M = np.concatenate([self.owner_M, np.full(extra, -1, np.int64)])


def check_ids(ids_U: np.ndarray) -> np.ndarray:
    """Slot ids as int64 [U]; negative ids are refused."""
    ids = np.asarray(ids_U, np.int64).reshape(-1)
    if ids.size and ids.min() < 0:
        raise ValueError(f"slot ids must be >= 0, got {ids.min()}")
    return ids


def check_update(ids_U, emb_UE, owner_U, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validates an upsert batch: unique ids [U], emb [U, E] float32, owners [U] >= 0."""
    ids = check_ids(ids_U)
    emb = np.asarray(emb_UE, np.float32)
    if emb.ndim == 1 and len(ids) == 1:
        emb = emb[None]
    owner = np.broadcast_to(np.asarray(owner_U, np.int64), ids.shape)
    if emb.shape != (len(ids), dim):
        raise ValueError(f"emb_UE must be [{len(ids)}, {dim}], got {np.shape(emb_UE)}")
    if len(np.unique(ids)) != len(ids):
        raise ValueError("upsert ids must be unique within one call")
    if owner.size and owner.min() < 0:
        raise ValueError(f"owner ids must be >= 0, got {owner.min()}")
    return ids, emb, owner


def search_per_owner(
    retriever: Retriever, query_QE: np.ndarray, owners: Sequence[int], k_per_owner: int = 30
) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k_per_owner`` of each owner's bank, side by side (the Answer Agent's 2 x 30 = 60).

    Args:
      retriever: any backend.
      query_QE: [Q, E] float32 queries.
      owners: P owner ids (the speakers of one conversation, in the order wanted).
      k_per_owner: results kept per owner.

    Returns:
      (ids [Q, P * k_per_owner], scores [Q, P * k_per_owner]); block p holds owner p's results,
      each block padded with -1 / -inf on its own.
    """
    blocks = [retriever.search(query_QE, k_per_owner, owner=int(o)) for o in owners]
    if not blocks:
        raise ValueError("owners must name at least one bank")
    return np.concatenate([b[0] for b in blocks], 1), np.concatenate([b[1] for b in blocks], 1)
