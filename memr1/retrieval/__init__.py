"""Top-k retrieval over memory banks held as plain arrays (emb_ME, valid_M, owner_M).

Backends share one interface (``Retriever``): ``exact_numpy`` (host BLAS, the reference),
``exact_jax`` (on the accelerator) and ``scann`` (approximate, for large banks). The Answer Agent's
retrieval is ``search_per_owner(r, q, owners=(a, b), k_per_owner=30)``: 30 per speaker, 60 in all;
``r.search(q, k, owner=[a, b])`` searches the union of a user's banks instead.
"""

from memr1.retrieval.base import Retriever, rank_candidates, search_per_owner
from memr1.retrieval.exact_jax import ExactJaxRetriever
from memr1.retrieval.exact_numpy import ExactNumpyRetriever
from memr1.retrieval.scann_index import ScannConfig, ScannRetriever

BACKENDS = {
    "exact_numpy": ExactNumpyRetriever,
    "exact_jax": ExactJaxRetriever,
    "scann": ScannRetriever,
}

# The Answer Agent's budget in the paper: top 30 memories from each of the two speakers' banks.
K_PER_SPEAKER = 30


def make_retriever(kind: str, dim: int, **kwargs) -> Retriever:
    """Creates a backend by name ('exact_numpy', 'exact_jax' or 'scann') for E = ``dim``."""
    if kind not in BACKENDS:
        raise ValueError(f"unknown retriever {kind!r}; choose one of {sorted(BACKENDS)}")
    return BACKENDS[kind](dim, **kwargs)


__all__ = [
    "BACKENDS",
    "K_PER_SPEAKER",
    "ExactJaxRetriever",
    "ExactNumpyRetriever",
    "Retriever",
    "ScannConfig",
    "ScannRetriever",
    "make_retriever",
    "rank_candidates",
    "search_per_owner",
]
