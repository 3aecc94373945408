"""Measurements behind tools/bench/bench_retrieval.py: recall, queries per second, build cost,
updates.

Kept in the package (not the tool) so they can be reused from notebooks and stay importable in
tests; nothing here runs at import time.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import time
from collections.abc import Callable

import numpy as np

from memr1.retrieval import ExactNumpyRetriever, ScannConfig, ScannRetriever, make_retriever


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def random_unit(rng: np.random.Generator, n: int, dim: int, block: int = 1 << 18) -> np.ndarray:
    """[n, dim] float32 rows uniform on the unit sphere, generated in blocks to bound memory."""
    out = np.empty((n, dim), np.float32)
    for s in range(0, n, block):
        x = rng.standard_normal((min(block, n - s), dim), dtype=np.float32)
        out[s : s + len(x)] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def recall_at_k(got_QK: np.ndarray, want_QK: np.ndarray) -> float:
    """Mean share of the exact top-k ids found, ignoring -1 padding in the reference."""
    hits = [
        len(set(g[g >= 0]) & set(w[w >= 0])) / max(1, (w >= 0).sum())
        for g, w in zip(got_QK, want_QK)
    ]
    return float(np.mean(hits))


def timed(fn: Callable[[], object], repeats: int = 1) -> tuple[float, object]:
    """Best wall time of ``repeats`` calls, and the last result (best-of damps a shared machine)."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def build_measured(kind: str, emb_ME: np.ndarray, **kwargs) -> tuple[object, dict]:
    """Builds one backend over a single-owner bank; returns it and {build_s, rss_delta_mb}.

    RSS growth is only indicative: freed memory is not always handed back to the OS, and on a
    CPU the "device" arrays of exact_jax live in the same process memory.
    """
    gc.collect()
    before = rss_bytes()
    r = make_retriever(kind, emb_ME.shape[1], **kwargs)
    t = time.perf_counter()
    r.build(emb_ME, np.ones(len(emb_ME), bool), np.zeros(len(emb_ME), np.int64))
    if kind == "exact_jax":
        r.emb_CE.block_until_ready()
    build_s = time.perf_counter() - t
    # Collected before reading, so the figure is what the index keeps, not build-time scratch.
    gc.collect()
    return r, {"build_s": build_s, "rss_delta_mb": (rss_bytes() - before) / 2**20}


def search_measured(r, q_QE: np.ndarray, k: int, truth_QK: np.ndarray | None, repeats: int):
    """{qps, recall} of one backend; a first call is discarded so compilation is not timed."""
    r.search(q_QE[: min(len(q_QE), 8)], k)
    secs, (ids, _) = timed(lambda: r.search(q_QE, k), repeats)
    out = {"qps": len(q_QE) / secs}
    if truth_QK is not None:
        out["recall"] = recall_at_k(ids, truth_QK)
    return out, ids


def scann_sweep(
    r: ScannRetriever,
    q_QE: np.ndarray,
    k: int,
    truth_QK: np.ndarray,
    fractions: tuple[float, ...],
    reorders: tuple[int, ...],
    repeats: int = 1,
) -> list[dict]:
    """Recall and QPS for each (leaves_fraction, reorder); search-time settings need no rebuild."""
    rows, saved = [], r.config
    try:
        for frac in fractions:
            for reorder in reorders:
                r.config = dataclasses.replace(saved, leaves_fraction=frac, reorder=reorder)
                m, _ = search_measured(r, q_QE, k, truth_QK, repeats)
                rows.append({"leaves_fraction": frac, "reorder": reorder, **m})
    finally:
        r.config = saved
    return rows


def best_point(rows: list[dict], min_recall: float) -> dict | None:
    """The fastest sweep row that reaches ``min_recall``, else None."""
    ok = [row for row in rows if row["recall"] >= min_recall]
    return max(ok, key=lambda row: row["qps"]) if ok else None


def update_policy(
    rng: np.random.Generator, n0: int, dim: int, n_new: int, k: int, config: ScannConfig
) -> dict:
    """ScaNN's in-tree upserts vs the exact side buffer, when new memories bring new topics.

    A tree index over ``n0`` random points receives ``n_new`` points around 8 new directions
    (a conversation drifting to new subjects; cos to their topic's centre is about 0.45). For
    both update policies, with automatic rebuilds switched off, reports the cost of single-point
    upserts and deletes, and recall@k and queries/s for queries on the new topics as the share
    of new points grows; then the rebuild time and the recall after a rebuild.
    """
    centres = random_unit(rng, 8, dim)
    pick = rng.integers(0, 8, n_new + 200)
    noisy = centres[pick] + 0.06 * rng.standard_normal((n_new + 200, dim), dtype=np.float32)
    new = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    new, q = new[:n_new], new[n_new:]
    base = random_unit(rng, n0, dim)
    all_emb = np.concatenate([base, new])
    ids = np.arange(n0, n0 + n_new)
    exact = ExactNumpyRetriever(dim)
    truths = {}

    def truth(m: int) -> np.ndarray:
        if m not in truths:
            exact.build(all_emb[:m], np.ones(m, bool), np.zeros(m, np.int64))
            truths[m] = exact.search(q, k)[0]
        return truths[m]

    out = {"n0": n0, "n_new": n_new}
    single = min(500, n_new)
    for policy, fresh_limit in (("side_buffer", 1 << 62), ("scann_upsert", 0)):
        cfg = dataclasses.replace(config, rebuild_fraction=float("inf"), fresh_limit=fresh_limit)
        r = ScannRetriever(dim, cfg)
        r.build(base, np.ones(n0, bool), np.zeros(n0, np.int64))
        t_one, _ = timed(lambda r=r: [r.upsert(ids[i : i + 1], new[i], 0) for i in range(single)])
        t_del, _ = timed(lambda r=r: [r.delete(ids[i : i + 1]) for i in range(10)])
        r.upsert(ids[:10], new[:10], np.zeros(10))
        row = {"upsert_one_ms": 1e3 * t_one / single, "delete_one_ms": 1e3 * t_del / 10}
        done = single
        for share in (0.02, 0.05, 0.1, 0.25, 0.5):
            upto = int(share * n0)
            if upto > n_new or upto < done:
                continue
            r.upsert(ids[done:upto], new[done:upto], np.zeros(upto - done))
            done = upto
            secs, (got, _) = timed(lambda r=r: r.search(q, k), 2)
            row[f"recall_at_share_{share:g}"] = recall_at_k(got, truth(n0 + done))
            row[f"qps_at_share_{share:g}"] = len(q) / secs
        out[policy] = row
    t_rebuild, _ = timed(lambda: r.rebuild(0))
    out["rebuild_s"] = t_rebuild
    out["recall_after_rebuild"] = recall_at_k(r.search(q, k)[0], truth(n0 + done))
    out["qps_after_rebuild"] = len(q) / timed(lambda: r.search(q, k), 2)[0]
    return out
