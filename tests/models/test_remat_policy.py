"""`model.remat_policy`: what a rematerialised block keeps changes the backward pass's FLOPs and
memory, never its values.

"full" keeps only each block's input, so the backward recomputes the whole block; "minimal" also
keeps the outputs of the block's weight matmuls, so only attention and the elementwise ops are
recomputed: the update costs ~6N FLOPs a token instead of ~8N.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from memr1.models.config import get_size
from memr1.models.transformer import Transformer
from memr1.rl.logprobs import sequence_logprobs

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

CFG = get_size(
    "tiny",
    vocab_size=61,
    d_model=64,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=16,
    d_ff=160,
    tie_embeddings=False,
    max_position=64,
)
B, T = 2, 24
_rng = np.random.default_rng(0)
TOKENS = jnp.asarray(_rng.integers(1, CFG.vocab_size, (B, T)), jnp.int32)
VALID = jnp.asarray(np.arange(T)[None] >= np.array([0, 5])[:, None])  # left padding


def _grad_fn(cfg):
    graphdef, params = nnx.split(Transformer(cfg, nnx.Rngs(params=0)))

    def loss(params):
        return -sequence_logprobs(graphdef, params, TOKENS, VALID, chunk=8)[0].sum()

    return jax.jit(jax.value_and_grad(loss)), params


@pytest.mark.parametrize("scan", [False, True])
def test_minimal_gives_the_loss_and_gradients_of_no_remat(scan):
    base = CFG.replace(scan_layers=scan)
    results = []
    for cfg in (base, base.replace(remat=True, remat_policy="minimal")):
        fn, params = _grad_fn(cfg)
        results.append(fn(params))
    (want_loss, want), (got_loss, got) = results
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6)
    for (path, a), (_, b) in zip(nnx.to_flat_state(want), nnx.to_flat_state(got), strict=True):
        np.testing.assert_allclose(
            b.get_value(), a.get_value(), rtol=1e-5, atol=1e-6, err_msg="/".join(map(str, path))
        )


def _flops(cfg) -> float:
    fn, params = _grad_fn(cfg)
    return float(fn.lower(params).compile().cost_analysis()["flops"])


def test_minimal_recomputes_no_weight_matmul_and_full_recomputes_every_one():
    """Compiled FLOPs of the gradient (unrolled layers: XLA's cost analysis counts a scanned
    body once): "full" adds one forward pass of the blocks' weight matmuls to the step without
    remat, "minimal" adds none of it."""
    plain = _flops(CFG)
    full = _flops(CFG.replace(remat=True, remat_policy="full"))
    minimal = _flops(CFG.replace(remat=True, remat_policy="minimal"))
    d, f, kv = CFG.d_model, CFG.d_ff, CFG.n_kv_heads * CFG.head_dim
    per_token = 2 * (d * d + 2 * d * kv + d * d + 3 * d * f)  # q, k, v, o, gate, up, down
    matmuls = CFG.n_layers * B * T * per_token
    assert full - plain == pytest.approx(matmuls, rel=0.25), (plain, full, matmuls)
    assert minimal - plain < 0.25 * matmuls, (plain, minimal, matmuls)


def test_an_unknown_policy_is_named():
    with pytest.raises(ValueError, match="remat_policy='dots'"):
        CFG.replace(remat_policy="dots")
