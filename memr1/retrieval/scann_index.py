"""Approximate search with ScaNN: one index per owner, tree + asymmetric hashing + exact reorder.

ScaNN has no owner filter, so each owner's bank (each speaker) gets its own searcher and a query
over several owners merges their results. A bank below ``brute_force_below`` uses ScaNN's
brute-force scorer, which is exact and cheaper than training a tree for a few thousand points.

Updates. ScaNN 1.4.2 can upsert into a trained tree, but a new point only joins the partition of
its nearest existing centroid; memories on a topic the tree never saw then scatter over leaves
that queries on that topic do not visit (docs/benchmarks.md: recall about 0.4 for such queries,
whatever the share of new points). So by default a tree index keeps the points written since its
last build in a small exact side buffer (a brute-force ScaNN searcher) that every query also
searches, and the tree is retrained once the buffer or the deletions grow past a limit.
``fresh_limit=0`` selects ScaNN's in-tree upserts instead.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import scann

from memr1.retrieval.base import (
    HostBank,
    Owner,
    check_ids,
    check_query,
    owners_array,
    rank_candidates,
)


@dataclasses.dataclass(frozen=True)
class ScannConfig:
    """Index and search settings; the search-time ones may be changed between calls.

    Attributes:
      brute_force_below: owner banks smaller than this use the exact brute-force scorer.
      num_leaves: partitions of a tree index; None means about sqrt(N).
      leaves_fraction: share of the leaves searched per query (at least one leaf).
      reorder: candidates rescored exactly (float32) after asymmetric-hashing scoring.
      dims_per_block: dimensions per AH sub-space (2 is ScaNN's recommendation with reorder).
      aq_threshold: anisotropic quantization threshold (0.2 suits unit-norm data).
      training_sample_size: points sampled for k-means and codebook training.
      rebuild_fraction: retrain a tree once this share of its build-time size has changed.
      fresh_limit: most points a tree keeps in its exact side buffer before retraining;
        0 writes into the tree with ScaNN's own upsert instead.
      tie_margin: extra neighbours fetched so that exact ties at rank k can be broken by id.
      spherical: spherical k-means for the partitions (centroids on the unit sphere).
      soar_lambda: if set, SOAR spilling: each point is also stored in a second, orthogonal-
        residual partition, which raises recall per leaf searched at some index size.
    """

    brute_force_below: int = 20_000
    num_leaves: int | None = None
    leaves_fraction: float = 0.05
    reorder: int = 250
    dims_per_block: int = 2
    aq_threshold: float = 0.2
    training_sample_size: int = 100_000
    rebuild_fraction: float = 0.25
    fresh_limit: int = 20_000
    tie_margin: int = 8
    spherical: bool = False
    soar_lambda: float | None = None


@dataclasses.dataclass
class _OwnerIndex:
    main: object  # a scann_ops_pybind.ScannSearcher
    is_tree: bool
    num_leaves: int
    size_at_build: int
    changes: int = 0
    fresh: object | None = None  # brute-force searcher of points written since the build

    def size(self) -> int:
        return self.main.size() + (self.fresh.size() if self.fresh is not None else 0)


def _brute_force(emb: np.ndarray, docids: list[int]):
    return scann.scann_ops_pybind.builder(emb, 10, "dot_product").score_brute_force().build(docids)


class ScannRetriever:
    """ScaNN-backed maximum inner product search (see ``base.Retriever``)."""

    name = "scann"

    def __init__(self, dim: int, config: ScannConfig | None = None):
        self.bank = HostBank(dim)
        self.config = config or ScannConfig()
        self.rebuilds = 0
        self._indexes: dict[int, _OwnerIndex] = {}

    # ---- index construction -------------------------------------------------------------------

    def _build_owner(self, owner: int) -> None:
        slots = np.flatnonzero(self.bank.valid_M & (self.bank.owner_M == owner))
        self._indexes.pop(owner, None)
        if len(slots) == 0:
            return
        cfg, n = self.config, len(slots)
        # A bank whose every row is in use is passed as is: copying 1.5 GB at N = 1e6 costs
        # a second and doubles peak memory for nothing.
        full = n == len(self.bank.valid_M)
        emb = self.bank.emb_ME if full else self.bank.emb_ME[slots]
        if n < cfg.brute_force_below:
            self._indexes[owner] = _OwnerIndex(_brute_force(emb, slots.tolist()), False, 0, n)
            self.rebuilds += 1
            return
        num_leaves = cfg.num_leaves or max(2, round(math.sqrt(n)))
        sample = min(n, cfg.training_sample_size)
        builder = scann.scann_ops_pybind.builder(emb, cfg.reorder, "dot_product")
        builder.set_n_training_threads(os.cpu_count() or 1)
        builder = builder.tree(
            num_leaves=num_leaves,
            num_leaves_to_search=self._leaves(num_leaves),
            training_sample_size=sample,
            spherical=cfg.spherical,
            soar_lambda=cfg.soar_lambda,
        )
        builder = builder.score_ah(
            cfg.dims_per_block,
            anisotropic_quantization_threshold=cfg.aq_threshold,
            training_sample_size=sample,
        ).reorder(cfg.reorder)
        self._indexes[owner] = _OwnerIndex(builder.build(slots.tolist()), True, num_leaves, n)
        self.rebuilds += 1

    def _leaves(self, num_leaves: int) -> int:
        return max(1, min(num_leaves, math.ceil(self.config.leaves_fraction * num_leaves)))

    def _maybe_rebuild(self, owner: int) -> None:
        idx = self._indexes[owner]
        n = idx.size()
        if n == 0:
            del self._indexes[owner]
            return
        cfg = self.config
        # Half the threshold on the way down, so a bank hovering at the boundary does not
        # rebuild on every edit.
        switch = (not idx.is_tree and n >= cfg.brute_force_below) or (
            idx.is_tree and n < cfg.brute_force_below // 2
        )
        stale = idx.is_tree and idx.changes > cfg.rebuild_fraction * idx.size_at_build
        fresh_full = idx.fresh is not None and idx.fresh.size() > cfg.fresh_limit
        if switch or stale or fresh_full:
            self._build_owner(owner)

    def build(self, emb_ME: np.ndarray, valid_M: np.ndarray, owner_M: np.ndarray) -> None:
        self.bank.assign(emb_ME, valid_M, owner_M)
        self._indexes.clear()
        for owner in np.unique(self.bank.owner_M[self.bank.valid_M]):
            self._build_owner(int(owner))

    def rebuild(self, owner: int | None = None) -> None:
        """Retrains the index of one owner (or all), folding the side buffer into the tree."""
        owners = list(self._indexes) if owner is None else [owner]
        for o in owners:
            self._build_owner(int(o))

    # ---- updates ------------------------------------------------------------------------------

    def upsert(self, ids_U: np.ndarray, emb_UE: np.ndarray, owner_U: np.ndarray) -> None:
        before_U = self.bank.write(ids_U, emb_UE, owner_U)
        ids_U = check_ids(ids_U)
        owner_U = self.bank.owner_M[ids_U]
        moved_U = (before_U >= 0) & (before_U != owner_U)
        for old in np.unique(before_U[moved_U]):
            self._remove(int(old), ids_U[moved_U & (before_U == old)])
        for new in np.unique(owner_U):
            sel = ids_U[owner_U == new]
            idx = self._indexes.get(int(new))
            if idx is None:
                self._build_owner(int(new))
                continue
            if idx.is_tree and self.config.fresh_limit > 0:
                # A rewritten point leaves the tree: its old AH code and leaf are stale.
                in_tree = [i for i in sel.tolist() if i in idx.main.docid_to_id]
                if in_tree:
                    idx.main.delete(in_tree)
                if idx.fresh is None:
                    idx.fresh = _brute_force(self.bank.emb_ME[sel], sel.tolist())
                else:
                    idx.fresh.upsert(sel.tolist(), self.bank.emb_ME[sel], batch_size=len(sel))
            else:
                idx.main.upsert(sel.tolist(), self.bank.emb_ME[sel], batch_size=len(sel))
            idx.changes += len(sel)
            self._maybe_rebuild(int(new))

    def _remove(self, owner: int, ids: np.ndarray) -> None:
        idx = self._indexes.get(owner)
        if idx is None or len(ids) == 0:
            return
        fresh_ids = idx.fresh.docid_to_id if idx.fresh is not None else {}
        in_fresh = [i for i in ids.tolist() if i in fresh_ids]
        in_main = [i for i in ids.tolist() if i not in fresh_ids]
        if in_fresh:
            idx.fresh.delete(in_fresh)
        if in_main:
            idx.main.delete(in_main)
        idx.changes += len(ids)
        self._maybe_rebuild(owner)

    def delete(self, ids_U: np.ndarray) -> None:
        gone = self.bank.erase(ids_U)
        before = self.bank.owner_M[gone]
        for owner in np.unique(before):
            self._remove(int(owner), gone[before == owner])

    def __len__(self) -> int:
        return sum(idx.size() for idx in self._indexes.values())

    # ---- search -------------------------------------------------------------------------------

    def _search_one(self, searcher, is_tree: bool, num_leaves: int, q_QE: np.ndarray, k: int):
        n = searcher.size()
        if n == 0:
            return np.full((len(q_QE), 0), -1), np.zeros((len(q_QE), 0), np.float32)
        # Asking ScaNN for more neighbours than it holds pads rows with NaN scores.
        final = min(n, k + self.config.tie_margin)
        leaves = self._leaves(num_leaves) if is_tree else None
        reorder = max(self.config.reorder, final) if is_tree else None
        threads = os.cpu_count() or 1
        batch = max(1, min(256, -(-len(q_QE) // threads)))
        ids, scores = searcher.search_batched_parallel(
            q_QE, final, reorder, leaves, batch_size=batch
        )
        ids = np.asarray(ids, np.int64).reshape(len(q_QE), -1)
        scores = np.asarray(scores, np.float32).reshape(len(q_QE), -1)
        return np.where(np.isnan(scores), -1, ids), scores

    def search(
        self, query_QE: np.ndarray, k: int, owner: Owner = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Approximate top-k; returns (ids_QK int64, scores_QK float32), see ``base``."""
        q_QE = check_query(query_QE, self.bank.dim, k)
        owners = owners_array(owner)
        keys = sorted(self._indexes) if owners is None else [int(o) for o in owners]
        parts = []
        for o in keys:
            idx = self._indexes.get(o)
            if idx is None:
                continue
            parts.append(self._search_one(idx.main, idx.is_tree, idx.num_leaves, q_QE, k))
            if idx.fresh is not None:
                parts.append(self._search_one(idx.fresh, False, 0, q_QE, k))
        if not parts or len(q_QE) == 0:
            return rank_candidates(np.full((len(q_QE), 0), -1), np.zeros((len(q_QE), 0)), k)
        ids = np.concatenate([p[0] for p in parts], axis=1)
        scores = np.concatenate([p[1] for p in parts], axis=1)
        return rank_candidates(ids, scores, k)

    def index_kinds(self) -> dict[int, str]:
        """Owner -> 'tree_ah' or 'brute_force' (for tests and logs)."""
        return {o: "tree_ah" if i.is_tree else "brute_force" for o, i in self._indexes.items()}

    def fresh_sizes(self) -> dict[int, int]:
        """Owner -> points in the tree's exact side buffer (0 for brute-force indexes)."""
        return {o: i.fresh.size() if i.fresh is not None else 0 for o, i in self._indexes.items()}
