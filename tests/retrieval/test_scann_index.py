"""ScaNN beyond brute force: tree + AH recall, incremental updates and the rebuild policy."""

import dataclasses

import numpy as np
import pytest

from memr1.retrieval import ExactNumpyRetriever, ScannConfig, ScannRetriever


def _unit(rng, n, e):
    x = rng.standard_normal((n, e)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _recall(got_QK, want_QK):
    return np.mean([len(set(g) & set(w)) / len(w) for g, w in zip(got_QK, want_QK)])


@pytest.fixture(scope="module")
def random_set():
    rng = np.random.default_rng(0)
    return _unit(rng, 20_000, 64), _unit(rng, 100, 64)


@pytest.fixture(scope="module")
def tree_index(random_set):
    emb, _ = random_set
    # Isotropic random data has no cluster structure, the hardest case for a partition tree,
    # so a large share of the leaves must be searched (real embeddings need far fewer).
    r = ScannRetriever(64, ScannConfig(brute_force_below=1_000, leaves_fraction=0.75))
    r.build(emb, np.ones(len(emb), bool), np.zeros(len(emb), int))
    return r


def test_tree_ah_recall_at_60(tree_index, random_set):
    emb, q = random_set
    exact = ExactNumpyRetriever(64)
    exact.build(emb, np.ones(len(emb), bool), np.zeros(len(emb), int))
    want, _ = exact.search(q, 60)
    assert tree_index.index_kinds() == {0: "tree_ah"}
    got, _ = tree_index.search(q, 60)
    assert _recall(got, want) >= 0.9
    # Searching few leaves must cost recall: proof that the approximate path is the one in use.
    few = dataclasses.replace(tree_index.config, leaves_fraction=0.05)
    tree_index.config, saved = few, tree_index.config
    try:
        assert _recall(tree_index.search(q, 60)[0], want) < 0.6
    finally:
        tree_index.config = saved


def test_incremental_upsert_and_delete_on_tree(random_set):
    emb, q = random_set
    r = ScannRetriever(64, ScannConfig(brute_force_below=1_000, leaves_fraction=0.75))
    n = 5_000
    r.build(emb[:n], np.ones(n, bool), np.zeros(n, int))
    builds = r.rebuilds
    r.upsert(np.array([12, n + 3]), q[:2], np.array([0, 0]))
    ids, scores = r.search(q[:2], 5)
    assert list(ids[:, 0]) == [12, n + 3]
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-5)
    r.delete(ids[:, :3].ravel())
    after, _ = r.search(q[:2], 60)
    assert not np.isin(after, ids[:, :3]).any()
    assert r.rebuilds == builds, "small edits are applied incrementally, not by a rebuild"
    assert len(r) == n + 1 - 6


def test_rebuild_after_many_changes(random_set):
    emb, _ = random_set
    cfg = ScannConfig(brute_force_below=1_000, rebuild_fraction=0.25)
    r = ScannRetriever(64, cfg)
    r.build(emb[:4_000], np.ones(4_000, bool), np.zeros(4_000, int))
    builds = r.rebuilds
    r.upsert(np.arange(4_000, 4_900), emb[4_000:4_900], np.zeros(900, int))
    assert r.rebuilds == builds
    r.delete(np.arange(200))
    assert r.rebuilds == builds + 1, "1,100 changes exceed 25% of 4,000: retrain the tree"
    assert r.search(emb[:1], 1)[0][0, 0] != 0


def test_bank_growth_switches_brute_force_to_tree(random_set):
    emb, q = random_set
    r = ScannRetriever(64, ScannConfig(brute_force_below=2_000))
    r.build(emb[:1_500], np.ones(1_500, bool), np.full(1_500, 4))
    assert r.index_kinds() == {4: "brute_force"}
    r.upsert(np.arange(1_500, 2_500), emb[1_500:2_500], np.full(1_000, 4))
    assert r.index_kinds() == {4: "tree_ah"}
    r.delete(np.arange(1_800))
    assert r.index_kinds() == {4: "brute_force"}, "below half the threshold: back to exact"
    exact = ExactNumpyRetriever(64)
    valid = np.zeros(2_500, bool)
    valid[1_800:] = True
    exact.build(emb[:2_500], valid, np.full(2_500, 4))
    np.testing.assert_array_equal(r.search(q, 30)[0], exact.search(q, 30)[0])


def test_owner_move_and_empty_owner(random_set):
    emb, q = random_set
    r = ScannRetriever(64)
    r.build(emb[:100], np.ones(100, bool), np.repeat([0, 1], 50))
    r.upsert(np.arange(50), emb[:50], np.ones(50, int))
    assert r.index_kinds() == {1: "brute_force"}, "owner 0 lost every slot, so its index is gone"
    ids, _ = r.search(q, 100, owner=1)
    np.testing.assert_array_equal(np.sort(ids, axis=1), np.tile(np.arange(100), (len(q), 1)))
    assert (r.search(q, 5, owner=0)[0] == -1).all()


def test_new_topic_points_are_found_through_the_side_buffer(random_set):
    # The tree is trained on isotropic data; the new points share one new direction, so ScaNN's
    # in-tree upsert would scatter them over leaves that queries near that direction skip.
    emb, _ = random_set
    rng = np.random.default_rng(5)
    topic = _unit(rng, 1, 64)
    new = topic + 0.15 * rng.standard_normal((300, 64)).astype(np.float32)
    new /= np.linalg.norm(new, axis=1, keepdims=True)
    r = ScannRetriever(64, ScannConfig(brute_force_below=1_000))
    r.build(emb[:5_000], np.ones(5_000, bool), np.zeros(5_000, int))
    r.upsert(np.arange(5_000, 5_300), new, np.zeros(300, int))
    assert r.fresh_sizes() == {0: 300} and r.rebuilds == 1
    exact = ExactNumpyRetriever(64)
    exact.build(np.concatenate([emb[:5_000], new]), np.ones(5_300, bool), np.zeros(5_300, int))
    q = new[:20] + 0.05 * topic
    np.testing.assert_array_equal(r.search(q, 30)[0], exact.search(q, 30)[0])
    r.delete(np.arange(5_000, 5_010))
    assert r.fresh_sizes() == {0: 290}
    r.rebuild()
    assert r.fresh_sizes() == {0: 0} and len(r) == 5_290
