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
