"""The model with chunked attention computes what it computes with einsum attention.

Through the paths that call attention with more than one query position: the update's
log-probs and their gradients (whole rows, and GRPO groups packed one a row, also through the
block-skipping Pallas kernels in their interpreter), and the sampler's prefill. The model is
small with odd sizes (vocab 97, 6 query heads over 2 key/value heads, 29-token rows) and chunks
of 8 positions, so every pass has a remainder chunk. A compile-only check at Qwen2.5-3B
widths shows what chunking saves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memr1.models import config, transformer
from memr1.models.config import get_size
from memr1.models.kernels import launch
from memr1.rl import logprobs
from memr1.sampling.sampler import Sampler
from tests.tool import load_tool

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

CFG = get_size(
    "tiny",
    vocab_size=97,
    d_model=48,
    n_layers=2,
    head_dim=8,
    d_ff=56,
    tie_embeddings=False,
    max_position=128,
    remat=True,
    scan_layers=True,
    attention_chunk=8,
)
WIDTH, PROMPT = 29, 13


def _graphdefs(cfg, kernel: str = "chunked"):
    """(einsum graphdef, `kernel` graphdef, params): the same weights under both kernels."""
    graphdef, params = transformer.init_model(cfg.replace(attention="einsum"), seed=3)
    return graphdef, transformer.abstract_model(cfg.replace(attention=kernel))[0], params


def _rows(rows: int = 4):
    """Rows of a left-padded prompt (PROMPT columns) and a right-padded response."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, CFG.vocab_size, (rows, WIDTH)).astype(np.int32)
    valid = np.zeros((rows, WIDTH), bool)
    for r, (pad, end) in enumerate([(0, WIDTH), (4, 20), (9, 25), (2, 15)][:rows]):
        valid[r, pad:end] = True
    return jnp.asarray(tokens), jnp.asarray(valid)


def _packed_rows():
    """`_rows` as two GRPO groups of two rows sharing their PROMPT columns, packed one group a
    row (`memr1.rl.packing`)."""
    from memr1.rl import packing

    tokens, valid = (np.asarray(x).copy() for x in _rows())
    for a, b in ((0, 1), (2, 3)):
        tokens[b, :PROMPT], valid[b, :PROMPT] = tokens[a, :PROMPT], valid[a, :PROMPT]
    reply = valid.copy()
    reply[:, :PROMPT] = False
    batch = {"tokens": tokens, "valid": valid, "prompt_mask": valid[:, :PROMPT],
             "response_mask": reply, "advantages": np.zeros(4, np.float32)}  # fmt: skip
    need, reply_need = packing.packed_needs(batch, 2)
    packed = packing.pack_groups(batch, 2, need, reply_need)
    return {k: jnp.asarray(v) for k, v in packed.items()}


def _rel(got, want) -> float:
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-6))


def _loss_and_grads(fn, graphdef, params, *args, **kwargs):
    def loss(p):
        logp, _ = fn(graphdef, p, *args, **kwargs)
        return logp.sum(), logp

    return jax.jit(jax.value_and_grad(loss, has_aux=True))(params)


def _assert_same_update(fn, cfg, tol, *args, kernel="chunked", **kwargs):
    einsum_gd, chunked_gd, params = _graphdefs(cfg, kernel)
    (_, want), want_grads = _loss_and_grads(fn, einsum_gd, params, *args, **kwargs)
    (_, got), got_grads = _loss_and_grads(fn, chunked_gd, params, *args, **kwargs)
    assert _rel(got, want) < tol, f"log-probs differ by {_rel(got, want):.2e}"
    flat_got = jax.tree_util.tree_leaves_with_path(got_grads)
    for (path, g), w in zip(flat_got, jax.tree.leaves(want_grads), strict=True):
        err = _rel(g, w)
        assert err < tol, f"gradient {jax.tree_util.keystr(path)} differs by {err:.2e}"


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("bfloat16", 5e-2)], ids=["f32", "bf16"])
def test_sequence_logprobs_and_gradients_match_einsum(dtype, tol):
    tokens, valid = _rows()
    _assert_same_update(logprobs.sequence_logprobs, CFG.replace(dtype=dtype), tol, tokens, valid)


def test_packed_logprobs_match_einsum():
    # One packed row a group: the prompt once, both replies after it, under a segment mask.
    _assert_same_update(logprobs.packed_logprobs, CFG, 1e-5, _packed_rows())


@pytest.mark.parametrize("kernel", ["flash", "splash"])
def test_packed_logprobs_through_the_block_skipping_kernels_match_einsum(kernel):
    """The update's log-probs and every weight's gradient with the Pallas kernels (interpreted)
    in every block: ragged groups, padding columns, 3 query heads a K/V head, remat, scan."""
    with launch.pallas_mode("interpret"):
        _assert_same_update(logprobs.packed_logprobs, CFG, 1e-5, _packed_rows(), kernel=kernel)


def test_sampler_prefill_with_chunked_attention_matches_einsum():
    einsum_gd, chunked_gd, params = _graphdefs(CFG.replace(remat=False, scan_layers=False))
    prompts = [[5, 6, 7], list(range(1, 18)), list(range(40, 51))]  # bucket 32: four chunks
    outs = [
        Sampler(CFG, gd, pad_id=0).generate(
            params, prompts, key=jax.random.key(0), max_new_tokens=6, num_samples=2, temperature=0
        )
        for gd in (einsum_gd, chunked_gd)
    ]
    np.testing.assert_array_equal(outs[1].tokens, outs[0].tokens)
    np.testing.assert_allclose(outs[1].logprobs, outs[0].logprobs, atol=1e-5)


def test_config_rejects_unknown_kernels_and_chunks():
    with pytest.raises(ValueError, match="attention='flash2' is not one of"):
        CFG.replace(attention="flash2")
    with pytest.raises(ValueError, match="attention_chunk=0 must be >= 1"):
        CFG.replace(attention_chunk=0)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the numbers are XLA:CPU's buffer plan")
def test_chunked_prefill_needs_a_fraction_of_einsum_memory_at_3b_widths():
    """One Qwen2.5-3B block (small vocabulary), one 4,096-token prompt, bf16: compiled only."""
    cfg = config.get_size(
        "qwen2.5-3b", n_layers=1, vocab_size=512, dtype="bfloat16", param_dtype="bfloat16"
    )
    tool = load_tool("attention_memory")
    t = 4096
    temp = {
        k: tool.prefill_temp_bytes(cfg.replace(attention=k), 1, t) for k in ("einsum", "chunked")
    }
    scores = cfg.n_heads * t * t * 4  # float32 [B, K, T*G, S] at B = 1
    assert temp["einsum"] > scores, (
        f"the einsum prefill needs only {temp['einsum']:,} bytes of temporaries, less than its "
        f"float32 scores ({scores:,}): XLA no longer materialises them; revisit "
        "docs/benchmarks.md (attention)"
    )
    assert temp["chunked"] * 4 < temp["einsum"] and temp["chunked"] < scores / 2, (
        f"chunked attention needs {temp['chunked']:,} bytes of temporaries against einsum's "
        f"{temp['einsum']:,}: the chunks no longer bound the scores (see "
        "memr1.models.attention.chunked_attention)"
    )


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU (cuDNN)")
def test_accelerator_update_with_cudnn_matches_einsum():
    """cuDNN's backward with the mask as a [B, 1, T, S] bias, through the whole update."""
    tokens, valid = _rows()
    cfg = CFG.replace(dtype="bfloat16")
    _assert_same_update(logprobs.sequence_logprobs, cfg, 5e-2, tokens, valid, kernel="cudnn")
    _assert_same_update(logprobs.packed_logprobs, cfg, 5e-2, _packed_rows(), kernel="cudnn")
