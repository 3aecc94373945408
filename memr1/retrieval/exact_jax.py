"""Exact search on the accelerator: a jnp matmul masked by validity and owner, then lax.top_k.

The bank lives on the device with a power-of-two capacity, and updates are jitted scatters that
donate the old buffers, so the memory manager's many small edits neither copy the bank nor
recompile. Query, update and owner-filter batches are padded to power-of-two sizes for the same
reason.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from memr1.retrieval.base import (
    Owner,
    check_ids,
    check_query,
    check_update,
    owners_array,
    rank_candidates,
)

_BLOCK_ELEMS = 1 << 26


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@functools.partial(jax.jit, donate_argnums=(0, 1, 2))
def _scatter(emb_CE, valid_C, owner_C, ids_U, emb_UE, valid_U, owner_U):
    # Padding entries carry the out-of-range id C and are dropped by mode="drop".
    emb_CE = emb_CE.at[ids_U].set(emb_UE, mode="drop")
    valid_C = valid_C.at[ids_U].set(valid_U, mode="drop")
    owner_C = owner_C.at[ids_U].set(owner_U, mode="drop")
    return emb_CE, valid_C, owner_C


@functools.partial(jax.jit, static_argnames="k")
def _search(emb_CE, valid_C, owner_C, owners_P, any_owner, q_QE, *, k):
    """Masked scores [Q, C] -> (scores [Q, k], slot ids [Q, k]); lax.top_k keeps lower ids first."""
    # HIGHEST keeps float32 products on GPUs and TPUs too (their default is a reduced-precision
    # pass), so rankings agree with the host backends up to rounding.
    s_QC = jnp.einsum("qe,ce->qc", q_QE, emb_CE, precision=jax.lax.Precision.HIGHEST)
    owned_C = any_owner | (owner_C[None, :] == owners_P[:, None]).any(axis=0)
    s_QC = jnp.where((valid_C & owned_C)[None, :], s_QC, -jnp.inf)
    return jax.lax.top_k(s_QC, k)


class ExactJaxRetriever:
    """Brute-force maximum inner product search with JAX (see ``base.Retriever``)."""

    name = "exact_jax"

    def __init__(self, dim: int, min_capacity: int = 1024, block_elems: int = _BLOCK_ELEMS):
        """dim: embedding size E; min_capacity: smallest device bank; block_elems: score bound."""
        self.dim = dim
        self.block_elems = block_elems
        self.min_capacity = _pow2(min_capacity)
        self._alloc(self.min_capacity)

    def _alloc(self, cap: int) -> None:
        self.emb_CE = jnp.zeros((cap, self.dim), jnp.float32)
        self.valid_C = jnp.zeros((cap,), bool)
        self.owner_C = jnp.full((cap,), -1, jnp.int32)

    @property
    def capacity(self) -> int:
        return self.valid_C.shape[0]

    def build(self, emb_ME: np.ndarray, valid_M: np.ndarray, owner_M: np.ndarray) -> None:
        m = len(valid_M)
        if np.shape(emb_ME) != (m, self.dim) or np.shape(owner_M) != (m,):
            raise ValueError(
                f"bank arrays disagree: emb_ME {np.shape(emb_ME)} (E={self.dim}), "
                f"valid_M {np.shape(valid_M)}, owner_M {np.shape(owner_M)}"
            )
        if np.any(np.asarray(owner_M)[np.asarray(valid_M, bool)] < 0):
            raise ValueError("owner_M must be >= 0 on valid slots")
        cap = max(self.min_capacity, _pow2(m))
        emb = np.zeros((cap, self.dim), np.float32)
        emb[:m] = emb_ME
        valid = np.zeros(cap, bool)
        valid[:m] = valid_M
        owner = np.full(cap, -1, np.int32)
        owner[:m] = owner_M
        self.emb_CE, self.valid_C, self.owner_C = map(jnp.asarray, (emb, valid, owner))

    def _grow(self, m: int) -> None:
        cap = _pow2(m)
        pad = cap - self.capacity
        self.emb_CE = jnp.pad(self.emb_CE, ((0, pad), (0, 0)))
        self.valid_C = jnp.pad(self.valid_C, (0, pad))
        self.owner_C = jnp.pad(self.owner_C, (0, pad), constant_values=-1)

    def _write(self, ids: np.ndarray, emb: np.ndarray, valid: np.ndarray, owner: np.ndarray):
        if ids.size == 0:
            return
        if ids.max() >= self.capacity:
            self._grow(int(ids.max()) + 1)
        pad = _pow2(len(ids)) - len(ids)
        ids = np.pad(ids, (0, pad), constant_values=self.capacity).astype(np.int32)
        emb = np.pad(emb, ((0, pad), (0, 0)))
        valid = np.pad(valid, (0, pad))
        owner = np.pad(owner, (0, pad)).astype(np.int32)
        self.emb_CE, self.valid_C, self.owner_C = _scatter(
            self.emb_CE, self.valid_C, self.owner_C, ids, emb, valid, owner
        )

    def upsert(self, ids_U: np.ndarray, emb_UE: np.ndarray, owner_U: np.ndarray) -> None:
        ids, emb, owner = check_update(ids_U, emb_UE, owner_U, self.dim)
        self._write(ids, emb, np.ones(len(ids), bool), owner)

    def delete(self, ids_U: np.ndarray) -> None:
        ids = check_ids(ids_U)
        ids = ids[ids < self.capacity]
        # Deleting keeps the old embedding and owner; only the valid bit changes.
        self.valid_C = self.valid_C.at[ids].set(False)

    def __len__(self) -> int:
        return int(self.valid_C.sum())

    def search(
        self, query_QE: np.ndarray, k: int, owner: Owner = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k on the device; returns host (ids_QK int64, scores_QK float32)."""
        q_QE = check_query(query_QE, self.dim, k)
        owners = owners_array(owner)
        any_owner = owners is None
        owners = np.zeros(0, np.int32) if owners is None else owners.astype(np.int32)
        owners_P = np.pad(owners, (0, _pow2(max(1, len(owners))) - len(owners)), constant_values=-1)
        kk = min(k, self.capacity)
        step = min(_pow2(len(q_QE)), max(1, _pow2(self.block_elems // self.capacity + 1) // 2))
        pending = []
        for start in range(0, len(q_QE), step):
            block = q_QE[start : start + step]
            block = np.pad(block, ((0, step - len(block)), (0, 0)))
            pending.append(
                _search(self.emb_CE, self.valid_C, self.owner_C, owners_P, any_owner, block, k=kk)
            )
        if not pending:
            return rank_candidates(np.zeros((0, 0)), np.zeros((0, 0)), k)
        scores = np.concatenate([np.asarray(s) for s, _ in pending])[: len(q_QE)]
        ids = np.concatenate([np.asarray(i) for _, i in pending])[: len(q_QE)]
        return rank_candidates(ids, scores, k)
