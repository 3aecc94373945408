"""Temperature, top-k and top-p on hand-computed cases, against HF's warpers, and in law."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from memr1.sampling.logits_processing import choose_tokens, filter_logits, sample_from_weights

PROBS = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
ORDER = np.array([3, 0, 4, 1, 2])  # vocabulary position of each PROBS entry


def _logits(probs=PROBS, order=ORDER):
    logits = np.full(len(probs), -np.inf, np.float32)
    logits[order] = np.log(probs)
    return jnp.asarray(logits)[None, :]


@pytest.mark.parametrize(
    "top_p, kept",
    [(0.45, 1), (0.6, 2), (0.75, 3), (0.9, 4), (0.97, 5), (1.0, 5)],
)
def test_top_p_keeps_the_smallest_set_reaching_p(top_p, kept):
    # Masses of the leading sets: 0.5, 0.7, 0.85, 0.95, 1.0; the nucleus is the first >= p.
    out = np.asarray(filter_logits(_logits(), None, top_p))[0]
    np.testing.assert_array_equal(np.isfinite(out[ORDER]), np.arange(5) < kept)
    np.testing.assert_array_equal(out[ORDER[:kept]], np.log(PROBS[:kept]).astype(np.float32))


def test_top_p_is_measured_after_top_k():
    # Over the top 3 renormalised (0.588, 0.235, 0.176) the two leaders already hold 0.82 >= 0.8,
    # whereas over the full distribution three tokens (0.85) would be needed.
    out = np.asarray(filter_logits(_logits(), top_k=3, top_p=0.8))[0]
    np.testing.assert_array_equal(np.isfinite(out[ORDER]), [True, True, False, False, False])
    full = np.asarray(filter_logits(_logits(), top_k=None, top_p=0.8))[0]
    assert np.isfinite(full).sum() == 3


@pytest.mark.parametrize("top_k, top_p", [(5, None), (None, 0.3), (None, 0.92), (17, 0.6)])
def test_filters_match_hf_warpers(top_k, top_p):
    logits = np.random.default_rng(0).normal(size=(4, 101)).astype(np.float32) * 3
    scores = torch.from_numpy(logits.copy())
    if top_k is not None:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p is not None:
        scores = TopPLogitsWarper(top_p)(None, scores)
    ours = np.asarray(filter_logits(jnp.asarray(logits), top_k, top_p))
    np.testing.assert_array_equal(np.isfinite(ours), torch.isfinite(scores).numpy())


def test_greedy_picks_argmax_with_untempered_logprob():
    logits = jnp.asarray([[0.3, 2.0, -1.0], [1.5, 0.2, 1.4]])
    token, logp = choose_tokens(logits, jax.random.key(0), greedy=True, temperature=0.1)
    np.testing.assert_array_equal(np.asarray(token), [1, 0])
    want = np.asarray(jax.nn.log_softmax(logits))[[0, 1], [1, 0]]
    np.testing.assert_allclose(np.asarray(logp), want, rtol=1e-6)


def test_samples_follow_the_filtered_law_but_logprobs_the_full_one():
    temperature, n = 0.5, 20_000
    logits = jnp.tile(jnp.log(jnp.asarray(PROBS))[None, :], (n, 1))
    token, logp = choose_tokens(
        logits, jax.random.key(7), greedy=False, temperature=temperature, top_k=3
    )
    token, logp = np.asarray(token), np.asarray(logp)
    scaled = PROBS ** (1 / temperature)
    full = scaled / scaled.sum()
    renorm = np.where(np.arange(5) < 3, full, 0) / full[:3].sum()
    freq = np.bincount(token, minlength=5) / n
    np.testing.assert_allclose(freq, renorm, atol=0.015)
    # The returned log-prob ignores the top-k renormalisation.
    np.testing.assert_allclose(logp, np.log(full[token]), rtol=1e-5)


def test_two_level_inverse_cdf_follows_the_weights_and_skips_zeros():
    # 37 tokens in blocks of 8 (the last one padded), with an all-zero block and scattered zeros.
    weights = np.random.default_rng(1).uniform(0.0, 1.0, 37)
    weights[8:16] = 0.0
    weights[[0, 20, 36]] = 0.0
    weights[5] = 4.0
    n = 20_000
    w = jnp.tile(jnp.asarray(weights, jnp.float32)[None, :], (n, 1))
    token = np.asarray(sample_from_weights(jax.random.key(2), w))
    freq = np.bincount(token, minlength=37) / n
    assert (freq[weights == 0] == 0).all()
    np.testing.assert_allclose(freq, weights / weights.sum(), atol=0.01)
