"""Exact search on the host: one BLAS matmul per query block, then argpartition.

This is the reference every other backend is compared with, and the right choice for the small
per-speaker banks of LoCoMo (hundreds of memories), where any index costs more than it saves.
"""

from __future__ import annotations

import numpy as np

from memr1.retrieval.base import HostBank, Owner, check_query, owners_array, rank_candidates

# Scores of one query block are materialised as a dense [Q_block, M] matrix; this bound keeps
# that matrix near 256 MB whatever the bank size.
_BLOCK_ELEMS = 1 << 26


def topk_exact(scores_QM: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k largest scores per row, with exact ties resolved to lower positions.

    Args:
      scores_QM: float32 [Q, M]; masked entries are -inf.
      k: 1 <= k <= M.

    Returns:
      int64 [Q, k] positions (unordered within a row; the caller sorts).
    """
    q, m = scores_QM.shape
    if k >= m:
        return np.broadcast_to(np.arange(m), (q, m)).copy()
    part_QK = np.argpartition(scores_QM, m - k, axis=1)[:, m - k :]
    kth_Q = np.take_along_axis(scores_QM, part_QK, axis=1).min(axis=1)
    # argpartition picks arbitrarily among scores equal to the k-th one. Rows where more slots
    # than fit share that score are redone so the lowest positions win, as in every backend.
    n_ge_Q = (scores_QM >= kth_Q[:, None]).sum(axis=1)
    for r in np.flatnonzero((n_ge_Q > k) & np.isfinite(kth_Q)):
        above = np.flatnonzero(scores_QM[r] > kth_Q[r])
        tied = np.flatnonzero(scores_QM[r] == kth_Q[r])[: k - len(above)]
        part_QK[r] = np.concatenate([above, tied])
    return part_QK


class ExactNumpyRetriever:
    """Brute-force maximum inner product search with NumPy (see ``base.Retriever``)."""

    name = "exact_numpy"

    def __init__(self, dim: int, block_elems: int = _BLOCK_ELEMS):
        """dim: embedding size E; block_elems: bound on the scores materialised at once."""
        self.bank = HostBank(dim)
        self.block_elems = block_elems

    def build(self, emb_ME: np.ndarray, valid_M: np.ndarray, owner_M: np.ndarray) -> None:
        self.bank.assign(emb_ME, valid_M, owner_M)

    def upsert(self, ids_U: np.ndarray, emb_UE: np.ndarray, owner_U: np.ndarray) -> None:
        self.bank.write(ids_U, emb_UE, owner_U)

    def delete(self, ids_U: np.ndarray) -> None:
        self.bank.erase(ids_U)

    def __len__(self) -> int:
        return int(self.bank.valid_M.sum())

    def search(
        self, query_QE: np.ndarray, k: int, owner: Owner = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k; returns (ids_QK int64, scores_QK float32), see ``base``."""
        q_QE = check_query(query_QE, self.bank.dim, k)
        allowed_M = self.bank.allowed(owners_array(owner))
        n_allowed = int(allowed_M.sum())
        if n_allowed == 0 or len(q_QE) == 0:
            return rank_candidates(np.full((len(q_QE), 0), -1), np.zeros((len(q_QE), 0)), k)
        # A filter that keeps few slots (one speaker of many) is cheaper to gather than to mask.
        if n_allowed < len(allowed_M) // 2:
            slots_C = np.flatnonzero(allowed_M)
            emb_CE, mask_C = self.bank.emb_ME[slots_C], None
        else:
            slots_C = np.arange(len(allowed_M))
            emb_CE = self.bank.emb_ME
            mask_C = None if n_allowed == len(allowed_M) else ~allowed_M
        kk = min(k, len(slots_C))
        step = max(1, self.block_elems // len(slots_C))
        ids, scores = [], []
        for start in range(0, len(q_QE), step):
            s_QC = q_QE[start : start + step] @ emb_CE.T
            if mask_C is not None:
                s_QC[:, mask_C] = -np.inf
            pos_QK = topk_exact(s_QC, kk)
            ids.append(slots_C[pos_QK])
            scores.append(np.take_along_axis(s_QC, pos_QK, axis=1))
        return rank_candidates(np.concatenate(ids), np.concatenate(scores), k)
