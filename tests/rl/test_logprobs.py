"""Chunked log-probs equal the naive full-logits computation, padded or not."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memr1.models import masks
from memr1.models.config import get_size
from memr1.models.transformer import forward, init_model, logits_fn
from memr1.rl import logprobs

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

CFG = get_size(
    "tiny",
    vocab_size=97,
    d_model=40,
    n_layers=2,
    n_heads=5,
    n_kv_heads=1,
    head_dim=8,
    d_ff=56,
    tie_embeddings=False,
    max_position=32768,
)


def _naive(graphdef, params, tokens, temperature):
    valid = jnp.ones(tokens.shape, bool)
    h, _ = forward(
        graphdef, params, tokens, masks.positions_from_valid(valid), masks.causal_mask(valid)
    )
    logp_all = jax.nn.log_softmax(logits_fn(graphdef, params, h) / temperature, axis=-1)
    taken = jnp.take_along_axis(logp_all[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
    return jnp.concatenate([jnp.zeros_like(taken[:, :1]), taken], axis=1)


def test_chunked_equals_naive_for_any_chunk_size():
    graphdef, params = init_model(CFG, seed=1)
    tokens = jax.random.randint(jax.random.key(0), (3, 23), 0, CFG.vocab_size)
    ref = _naive(graphdef, params, tokens, 0.7)
    for chunk in (1, 5, 22, 64):
        got, _ = logprobs.sequence_logprobs(
            graphdef, params, tokens, jnp.ones(tokens.shape, bool), temperature=0.7, chunk=chunk
        )
        np.testing.assert_allclose(got, ref, atol=1e-5)


def test_padded_rows_equal_unpadded_rows():
    graphdef, params = init_model(CFG, seed=2)
    row = jax.random.randint(jax.random.key(3), (1, 9), 0, CFG.vocab_size)
    ref, _ = logprobs.sequence_logprobs(graphdef, params, row, jnp.ones((1, 9), bool))
    # The same row left-padded by 4 and right-padded by 3 inside a batch.
    left = jnp.concatenate([jnp.zeros((1, 4), row.dtype), row, jnp.zeros((1, 3), row.dtype)], 1)
    valid = jnp.concatenate([jnp.zeros((1, 4)), jnp.ones((1, 9)), jnp.zeros((1, 3))], 1)
    got, _ = logprobs.sequence_logprobs(graphdef, params, left, valid.astype(bool), chunk=4)
    np.testing.assert_allclose(got[:, 4:13], ref, atol=1e-5)
    np.testing.assert_array_equal(got[:, :5], 0.0)  # padding and the first real token
    np.testing.assert_array_equal(got[:, 13:], 0.0)


def test_gradients_match_naive():
    graphdef, params = init_model(CFG, seed=4)
    tokens = jax.random.randint(jax.random.key(5), (2, 11), 0, CFG.vocab_size)

    def chunked_loss(p):
        lp, _ = logprobs.sequence_logprobs(
            graphdef, p, tokens, jnp.ones(tokens.shape, bool), chunk=3
        )
        return lp.sum()

    g1 = jax.grad(chunked_loss)(params)
    g2 = jax.grad(lambda p: _naive(graphdef, p, tokens, 1.0).sum())(params)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_entropy_of_uniform_logits():
    h = jnp.zeros((1, 4, 3))
    lp, ent = logprobs.chunked_token_logprobs(
        lambda x: jnp.zeros(x.shape[:2] + (10,)), h, jnp.zeros((1, 4), jnp.int32), chunk=3
    )
    np.testing.assert_allclose(lp, np.log(0.1), rtol=1e-6)
    np.testing.assert_allclose(ent, np.log(10.0), rtol=1e-6)


def _grouped_batch(group=3, prompts=2, p=7, n=5, seed=6):
    """Left-padded prompts repeated `group` times, each row its own right-padded response."""
    k1, k2 = jax.random.split(jax.random.key(seed))
    prompt = np.asarray(jax.random.randint(k1, (prompts, p), 0, CFG.vocab_size))
    resp = np.asarray(jax.random.randint(k2, (prompts * group, n), 0, CFG.vocab_size))
    pvalid = np.ones((prompts, p), bool)
    pvalid[0, :3] = False  # the first prompt is shorter, left-padded
    rvalid = np.ones((prompts * group, n), bool)
    rvalid[1, 2:] = False  # responses of different lengths, right-padded
    rvalid[4, 4:] = False
    tokens = np.concatenate([np.repeat(prompt, group, 0), resp], 1)
    valid = np.concatenate([np.repeat(pvalid, group, 0), rvalid], 1)
    return jnp.asarray(tokens), jnp.asarray(valid)


def test_grouped_logprobs_equal_whole_rows_on_the_responses():
    graphdef, params = init_model(CFG, seed=7)
    tokens, valid = _grouped_batch()
    ref, ref_ent = logprobs.sequence_logprobs(graphdef, params, tokens, valid, temperature=0.8)
    got, ent = logprobs.grouped_logprobs(
        graphdef, params, tokens, valid, group=3, prompt_width=7, temperature=0.8, chunk=2
    )
    resp = np.asarray(valid[:, 7:])
    np.testing.assert_allclose(
        np.asarray(got[:, 7:])[resp], np.asarray(ref[:, 7:])[resp], atol=1e-5
    )
    np.testing.assert_allclose(
        np.asarray(ent[:, 7:])[resp], np.asarray(ref_ent[:, 7:])[resp], atol=1e-5
    )
    np.testing.assert_array_equal(np.asarray(got)[:, 7:][~resp], 0.0)  # padding
    np.testing.assert_array_equal(got[:, :7], 0.0)  # prompt columns


def test_grouped_logprobs_gradients_equal_whole_rows():
    graphdef, params = init_model(CFG, seed=8)
    tokens, valid = _grouped_batch(seed=9)
    weights = jax.random.normal(jax.random.key(10), tokens.shape) * valid[:, :]
    weights = weights.at[:, :7].set(0.0)  # a loss on response tokens only, as GRPO's

    def loss(fn, p):
        return (fn(p)[0] * weights).sum()

    g1 = jax.grad(
        lambda p: loss(lambda q: logprobs.sequence_logprobs(graphdef, q, tokens, valid), p)
    )(params)
    g2 = jax.grad(
        lambda p: loss(
            lambda q: logprobs.grouped_logprobs(
                graphdef, q, tokens, valid, group=3, prompt_width=7
            ),
            p,
        )
    )(params)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_grouped_logprobs_refuse_rows_that_do_not_split_into_groups():
    graphdef, params = init_model(CFG, seed=1)
    tokens, valid = _grouped_batch()
    with pytest.raises(ValueError, match="groups of 4"):
        logprobs.grouped_logprobs(graphdef, params, tokens, valid, group=4, prompt_width=7)
