"""All retrieval backends agree with a hand-written reference on small banks.

Banks here are below ScaNN's brute-force threshold, so every backend is exact and must return the
same ids in the same order: score descending, lower slot id first on exact ties.
"""

import numpy as np
import pytest

from memr1.retrieval import (
    BACKENDS,
    ExactJaxRetriever,
    Retriever,
    make_retriever,
    search_per_owner,
)

E = 13  # odd, so a transposed bank would not even have the right shape


def _unit(rng, n, e=E):
    x = rng.standard_normal((n, e)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def reference_topk(emb_ME, allowed_M, q_QE, k):
    """The definition, one query at a time: sort allowed slots by (-score, id)."""
    ids = np.full((len(q_QE), k), -1)
    for i, q in enumerate(q_QE):
        slots = np.flatnonzero(allowed_M)
        scores = emb_ME[slots] @ q
        order = sorted(range(len(slots)), key=lambda j: (-scores[j], slots[j]))[:k]
        ids[i, : len(order)] = slots[order]
    return ids


@pytest.fixture
def bank():
    rng = np.random.default_rng(7)
    m = 301
    emb = _unit(rng, m)
    # Exact duplicates of slot 5 at slots 40 and 200 create score ties for every query.
    emb[40] = emb[200] = emb[5]
    valid = rng.random(m) < 0.8
    valid[[5, 40, 200]] = True
    owner = rng.integers(0, 3, m)
    return emb, valid, owner, _unit(rng, 9)


@pytest.fixture(params=sorted(BACKENDS))
def backend(request):
    return request.param


def _built(kind, bank):
    emb, valid, owner, _ = bank
    r = make_retriever(kind, E)
    r.build(emb, valid, owner)
    return r


def test_conforms_to_protocol(backend):
    assert isinstance(make_retriever(backend, E), Retriever)


@pytest.mark.parametrize("owner", [None, 1, [0, 2]])
def test_matches_reference_including_ties(backend, bank, owner):
    emb, valid, owner_M, q = bank
    # Queries equal to the duplicated row put the three-way tie at the very top.
    q = np.concatenate([q, emb[[5]]])
    allowed = valid if owner is None else valid & np.isin(owner_M, owner)
    want = reference_topk(emb, allowed, q, 17)
    ids, scores = _built(backend, bank).search(q, 17, owner=owner)
    np.testing.assert_array_equal(ids, want)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    np.testing.assert_allclose(scores, np.take_along_axis(q @ emb.T, want, 1), atol=1e-5)
    if owner is None:
        assert list(ids[-1, :3]) == [5, 40, 200], "exact ties: lower slot id first"


def test_tie_at_the_cut_keeps_lowest_ids(backend):
    # Ten identical rows and k = 4: only the four lowest valid slots may be returned. Deleting
    # slot 1 after the build lets ScaNN move its last point into the hole, so an index that
    # broke ties by internal position would return slot 9.
    emb = np.tile(_unit(np.random.default_rng(0), 1), (10, 1))
    r = make_retriever(backend, E)
    r.build(emb, np.ones(10, bool), np.zeros(10, int))
    r.delete(np.array([1]))
    ids, _ = r.search(emb[:2], 4)
    np.testing.assert_array_equal(ids, [[0, 2, 3, 4]] * 2)


def test_deleted_memory_is_never_returned(backend, bank):
    emb, valid, owner, q = bank
    r = _built(backend, bank)
    top, _ = r.search(q, 5)
    gone = np.unique(top[:, :2])
    r.delete(gone)
    ids, _ = r.search(q, 50)
    assert not np.isin(ids, gone).any()
    after = valid.copy()
    after[gone] = False
    np.testing.assert_array_equal(ids, reference_topk(emb, after, q, 50))
    assert len(r) == after.sum()


def test_updated_embedding_is_found(backend, bank):
    emb, valid, owner, q = bank
    r = _built(backend, bank)
    # Rewrite slot 17 to the first query and move it to owner 2; also add a brand-new slot.
    r.upsert(np.array([17, 400]), np.stack([q[0], q[1]]), np.array([2, 1]))
    ids, scores = r.search(q[:2], 3)
    assert ids[0, 0] == 17 and ids[1, 0] == 400
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-5)
    assert 17 not in r.search(q[:1], 300, owner=[0, 1])[0]
    assert r.search(q[:1], 1, owner=2)[0][0, 0] == 17


def test_k_beyond_valid_count_pads(backend):
    rng = np.random.default_rng(3)
    emb = _unit(rng, 10)
    valid = np.zeros(10, bool)
    valid[[2, 3, 7, 8, 9]] = True
    r = make_retriever(backend, E)
    r.build(emb, valid, np.zeros(10, int))
    ids, scores = r.search(_unit(rng, 2), 8)
    assert ids.shape == (2, 8)
    assert (ids[:, 5:] == -1).all() and np.isneginf(scores[:, 5:]).all()
    assert (np.sort(ids[:, :5], axis=1) == [2, 3, 7, 8, 9]).all()
    ids, _ = r.search(_unit(rng, 2), 4, owner=5)
    assert (ids == -1).all(), "an owner without memories yields only padding"


def test_per_speaker_split(backend, bank):
    emb, valid, owner, q = bank
    r = _built(backend, bank)
    ids, scores = search_per_owner(r, q, owners=(2, 0), k_per_owner=6)
    assert ids.shape == scores.shape == (len(q), 12)
    assert (owner[ids[:, :6]] == 2).all() and (owner[ids[:, 6:]] == 0).all()
    np.testing.assert_array_equal(ids[:, :6], reference_topk(emb, valid & (owner == 2), q, 6))
    # Three owners, three per owner: the block size follows both arguments.
    ids, _ = search_per_owner(r, q, owners=(0, 1, 2), k_per_owner=3)
    assert ids.shape == (len(q), 9)


def test_empty_bank_then_inserts(backend):
    r = make_retriever(backend, E)
    q = _unit(np.random.default_rng(1), 3)
    assert (r.search(q, 4)[0] == -1).all()
    r.upsert(np.arange(3), q, np.array([0, 0, 1]))
    np.testing.assert_array_equal(r.search(q, 1)[0][:, 0], [0, 1, 2])


def test_bad_inputs_raise(backend):
    r = make_retriever(backend, E)
    with pytest.raises(ValueError, match=r"\[Q, 13\]"):
        r.search(np.zeros((2, 12), np.float32), 3)
    with pytest.raises(ValueError, match="owner"):
        r.upsert(np.array([0]), np.zeros((1, E)), np.array([-3]))
    with pytest.raises(ValueError, match=r"E=13"):
        r.build(np.zeros((3, 12), np.float32), np.ones(3, bool), np.zeros(3, int))
    with pytest.raises(ValueError, match="unique"):
        r.upsert(np.array([1, 1]), np.zeros((2, E)), np.array([0, 0]))


def test_exact_jax_reuses_compiled_search():
    from memr1.retrieval.exact_jax import _search

    rng = np.random.default_rng(2)
    r = ExactJaxRetriever(E, min_capacity=64)
    r.build(_unit(rng, 50), np.ones(50, bool), np.zeros(50, int))
    r.search(_unit(rng, 3), 5)
    before = _search._cache_size()
    r.search(_unit(rng, 4), 5, owner=0)
    r.upsert(np.array([3]), _unit(rng, 1), np.array([1]))
    r.search(_unit(rng, 2), 5, owner=[0, 1])
    # Q = 4 with one owner reuses the first program (Q = 3 pads to 4, "any owner" pads to one
    # slot); only the two-owner filter at Q = 2 is new. The update does not change capacity.
    assert _search._cache_size() - before == 1
