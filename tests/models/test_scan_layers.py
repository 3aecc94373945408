"""`scan_layers` computes what the unrolled layer loop computes, on the same parameter layout.

The scan stacks the per-layer weights inside the traced call only, so the parameter state (what
checkpoints, HF import/export and LoRA paths see) is the same with the option on or off, and the
loss and gradients match the loop's. Odd dimensions (vocab 61, 3 layers, 11 tokens) let a
transposition of the layer axis show.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from memr1.models.config import get_size
from memr1.models.transformer import Transformer, abstract_model
from memr1.rl.logprobs import sequence_logprobs
from memr1.train import lora
from tests.train import tiny

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

CFG = get_size(
    "tiny",
    vocab_size=61,
    d_model=24,
    n_layers=3,
    head_dim=4,
    d_ff=40,
    tie_embeddings=False,
    max_position=64,
    remat=True,
)
_rng = np.random.default_rng(0)
TOKENS = jnp.asarray(_rng.integers(1, CFG.vocab_size, (3, 11)), jnp.int32)
VALID = jnp.asarray(np.arange(11)[None] >= np.array([0, 2, 4])[:, None])  # left padding


def _loss_and_grads(module: nnx.Module, trainable=nnx.Param):
    graphdef, params = nnx.split(module)
    train, frozen = nnx.split_state(params, trainable, ...)

    def loss(train):
        # The frozen part is re-wrapped inside the trace, as `memr1.models.params.rebind` does.
        merged = nnx.merge_state(train, jax.tree.map(lambda x: x, frozen))
        logp, _ = sequence_logprobs(graphdef, merged, TOKENS, VALID, chunk=4)
        return -logp.sum()

    return jax.jit(jax.value_and_grad(loss))(train)


def _assert_close(loop, scan):
    np.testing.assert_allclose(scan[0], loop[0], rtol=1e-6)
    flat_loop, flat_scan = nnx.to_flat_state(loop[1]), nnx.to_flat_state(scan[1])
    assert [p for p, _ in flat_scan] == [p for p, _ in flat_loop]
    for (path, a), (_, b) in zip(flat_loop, flat_scan, strict=True):
        err = f"gradient of {'/'.join(map(str, path))} differs between the loop and the scan"
        np.testing.assert_allclose(b.get_value(), a.get_value(), rtol=1e-5, atol=1e-6, err_msg=err)


def test_same_parameter_layout():
    loop = nnx.to_flat_state(abstract_model(CFG)[1])
    scan = nnx.to_flat_state(abstract_model(CFG.replace(scan_layers=True))[1])
    assert [(p, v.get_value().shape) for p, v in scan] == [
        (p, v.get_value().shape) for p, v in loop
    ]


@pytest.mark.parametrize("remat", [False, True])
def test_loss_and_gradients_match_the_loop(remat):
    cfg = CFG.replace(remat=remat)
    loop = _loss_and_grads(Transformer(cfg, nnx.Rngs(params=0)))
    scan = _loss_and_grads(Transformer(cfg.replace(scan_layers=True), nnx.Rngs(params=0)))
    _assert_close(loop, scan)


def test_lora_adapters_are_scanned_with_their_layers():
    rule = lora.LoraConfig.from_config(tiny.config(lora_rank=2, lora_alpha=4.0))
    loop_model = lora.module_fn(CFG, rule)()
    scan_model = lora.module_fn(CFG.replace(scan_layers=True), rule)()
    # B starts at zero; a random B makes the adapters' own contribution visible in the loss.
    for model in (loop_model, scan_model):
        for i, (_, var) in enumerate(nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))):
            var.set_value(0.1 * jax.random.normal(jax.random.key(i), var.get_value().shape))
    _assert_close(
        _loss_and_grads(loop_model, nnx.LoRAParam), _loss_and_grads(scan_model, nnx.LoRAParam)
    )


def test_layers_that_differ_are_refused():
    rule = lora.LoraConfig.from_config(
        tiny.config(lora_rank=2, lora_alpha=4.0, lora_module_path="layers/0/attn")
    )
    model = lora.module_fn(CFG.replace(scan_layers=True), rule)()
    with pytest.raises(ValueError, match="layer 1 differs from layer 0"):
        _loss_and_grads(model, nnx.LoRAParam)


def test_the_sampler_decodes_alike_with_scan_layers():
    """The sampler always runs with a KV cache, where the blocks stay a layer loop: turning
    `scan_layers` on (the recipe's) leaves its tokens and log-probs unchanged."""
    from memr1.sampling import Sampler

    graphdef, params = nnx.split(Transformer(CFG.replace(remat=False), nnx.Rngs(params=0)))
    scan_graphdef, _ = nnx.split(
        Transformer(CFG.replace(remat=False, scan_layers=True), nnx.Rngs(params=0))
    )
    prompts = [[5, 9, 13, 2], [7, 1]]
    kw = dict(key=jax.random.key(0), max_new_tokens=6, num_samples=2, temperature=1.0)
    loop = Sampler(CFG, graphdef).generate(params, prompts, **kw)
    scan = Sampler(CFG.replace(scan_layers=True), scan_graphdef).generate(params, prompts, **kw)
    np.testing.assert_array_equal(np.asarray(scan.tokens), np.asarray(loop.tokens))
    np.testing.assert_allclose(np.asarray(scan.logprobs), np.asarray(loop.logprobs), atol=1e-6)
