"""The attention kernels agree with the einsum reference on padded, grouped, awkward shapes.

Masks are built as the model's callers build them (`masks.causal_mask`): left-padded prompts,
right-padded responses, and a cache that a later pass extends (queries at slots offset..offset+T
of S > T). Shapes are odd or prime (T = 37 with chunks of 8, G = 3 query heads per key/value
head), in float32 and bfloat16, forward values and the gradients the update needs.

The cuDNN kernel cannot run here: its arguments are checked, and the same call with
implementation="xla" (the reference implementation of `jax.nn.dot_product_attention`) must
reproduce the einsum kernel. The splash kernel runs in Pallas' interpreter. The tests marked
`accelerator` run the real kernels when a GPU or TPU is present.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memr1.models import attention, masks
from tests.fake_devices import xla_flags

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

B, H, K, N = 3, 6, 2, 16  # G = 3
ROOT = Path(__file__).resolve().parents[2]


def _valid(t: int) -> np.ndarray:
    """Rows: left-padded by 5, left-padded by 20 (past a chunk), right-padded after 30."""
    valid = np.ones((B, t), bool)
    valid[0, :5] = False
    valid[1, :20] = False
    valid[2, 30:] = False
    return valid


def _inputs(t: int, s: int, dtype, seed: int = 0):
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(k1, (B, t, H, N), jnp.float32).astype(dtype)
    k = jax.random.normal(k2, (B, K, s, N), jnp.float32).astype(dtype)
    v = jax.random.normal(k3, (B, K, s, N), jnp.float32).astype(dtype)
    return q, k, v


def _full_pass(t: int, dtype):
    """A full causal pass over left/right-padded rows: T == S."""
    valid = _valid(t)
    return (*_inputs(t, t, dtype), masks.causal_mask(jnp.asarray(valid))), valid


def _cache_pass(dtype, offset: int = 11, t: int = 13, s: int = 29):
    """T response queries at slots offset.. of an S-slot cache holding a left-padded prompt."""
    valid = np.zeros((B, s), bool)
    for row, (pad, response) in enumerate([(5, t), (9, t), (0, 7)]):  # row 2 ends early
        valid[row, pad : offset + response] = True
    mask = masks.causal_mask(jnp.asarray(valid), offset + jnp.arange(t))
    return (*_inputs(t, s, dtype, seed=1), mask), valid[:, offset : offset + t]


def _tol(dtype) -> float:
    return 1e-5 if dtype == jnp.float32 else 3e-2


def _close(got, want, dtype, what: str, rows=None):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    if rows is not None:  # compare only query rows that read at least one key
        got, want = got[rows], want[rows]
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-6)
    assert err < _tol(dtype), f"{what}: max relative difference {err:.2e} (dtype {dtype})"


def _outputs_and_grads(kernel, q, k, v, mask, cot):
    """kernel(q, k, v, mask) and the gradients of <that, cot> with respect to q, k and v."""

    def run(q, k, v, mask, cot):
        out, vjp = jax.vjp(lambda q, k, v: kernel(q, k, v, mask), q, k, v)
        return out, vjp(jnp.asarray(cot, out.dtype))

    return jax.jit(run)(q, k, v, mask, cot)


def _check_against_einsum(kernel, q, k, v, mask, cot, dtype, rows=None):
    """Forward values (on `rows`) and gradients of `kernel` equal the einsum kernel's."""
    got, got_grads = _outputs_and_grads(kernel, q, k, v, mask, cot)
    want, want_grads = _outputs_and_grads(attention.einsum_attention, q, k, v, mask, cot)
    _close(got, want, dtype, "forward", rows)
    for name, g, w in zip("qkv", got_grads, want_grads, strict=True):
        _close(g, w, dtype, f"d{name}")


def _cotangent(t: int, rows=None):
    cot = np.asarray(jax.random.normal(jax.random.key(7), (B, t, H, N), jnp.float32))
    return cot if rows is None else cot * rows[:, :, None, None]


DTYPES = pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
PASSES = pytest.mark.parametrize("which", ["full", "cache"])


def _pass(which: str, dtype):
    return _full_pass(37, dtype) if which == "full" else _cache_pass(dtype)


# ----------------------------------------------------------------------------------------------
# chunked == einsum
# ----------------------------------------------------------------------------------------------


@DTYPES
@PASSES
def test_chunked_matches_einsum_values_and_gradients(dtype, which):
    (q, k, v, mask), _ = _pass(which, dtype)
    chunked = functools.partial(attention.chunked_attention, chunk=8)  # T = 37 or 13: a remainder
    _check_against_einsum(chunked, q, k, v, mask, _cotangent(q.shape[1]), dtype)


def test_chunked_never_builds_scores_for_all_queries():
    (q, k, v, mask), _ = _full_pass(37, jnp.float32)
    jaxpr = str(
        jax.make_jaxpr(functools.partial(attention.chunked_attention, chunk=8))(q, k, v, mask)
    )
    # einsum builds [B, K, T*G, S] = [3, 2, 111, 37]; a chunk of 8 positions [3, 2, 24, 37].
    assert "f32[3,2,111,37]" not in jaxpr
    assert "f32[3,2,24,37]" in jaxpr


def test_a_pass_within_one_chunk_is_the_einsum_program():
    (q, k, v, mask), _ = _full_pass(37, jnp.float32)
    got = attention.chunked_attention(q, k, v, mask, chunk=37)
    np.testing.assert_array_equal(got, attention.einsum_attention(q, k, v, mask))


# ----------------------------------------------------------------------------------------------
# cuDNN's arguments, checked through the XLA implementation of the same call
# ----------------------------------------------------------------------------------------------


def test_cudnn_arguments_pad_to_even_lengths_with_unread_slots():
    (q, k, v, mask), _ = _cache_pass(jnp.bfloat16)  # T = 13, S = 29: both odd
    (query, key, value), kw = attention.cudnn_arguments(q, k, v, mask)
    assert query.shape == (B, 14, H, N) and key.shape == value.shape == (B, 30, K, N)
    assert query.dtype == key.dtype == value.dtype == jnp.bfloat16
    assert kw["mask"].shape == (B, 1, 14, 30) and kw["mask"].dtype == jnp.bool_
    assert kw["scale"] == pytest.approx(N**-0.5)
    np.testing.assert_array_equal(kw["mask"][:, 0, :13, :29], mask)
    assert not kw["mask"][:, :, 13].any() and not kw["mask"][..., 29].any()
    np.testing.assert_array_equal(key[:, :29], k.transpose(0, 2, 1, 3))


@DTYPES
@PASSES
def test_cudnn_call_matches_einsum_through_xla(dtype, which):
    (q, k, v, mask), _ = _pass(which, dtype)
    reads = np.asarray(mask).any(-1)  # fully masked rows (left padding) carry no meaning
    xla = functools.partial(attention.cudnn_attention, implementation="xla")
    _check_against_einsum(xla, q, k, v, mask, _cotangent(q.shape[1], reads), dtype, reads)


# ----------------------------------------------------------------------------------------------
# splash (Pallas interpreter)
# ----------------------------------------------------------------------------------------------


def test_splash_segments_mark_real_tokens_and_pad_to_the_tile():
    (_, _, _, mask), valid = _full_pass(37, jnp.float32)
    seg, padded = attention.splash_segments(mask)
    assert padded == attention.SPLASH_BLOCK and seg.shape == (B, padded)
    np.testing.assert_array_equal(seg[:, :37], valid.astype(np.int32))
    assert not seg[:, 37:].any()


@DTYPES
def test_splash_matches_einsum_on_real_tokens(dtype):
    (q, k, v, mask), valid = _full_pass(37, dtype)
    splash = functools.partial(attention.splash_attention, interpret=True)
    _check_against_einsum(splash, q, k, v, mask, _cotangent(37, valid), dtype, valid)


_MESH_SCRIPT = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType, Mesh
from memr1 import sharding
from memr1.models import attention, masks

b, t, h, k, n = 4, 37, 6, 2, 16
q, kk, v = (jax.random.normal(jax.random.key(i), s) for i, s in
            enumerate([(b, t, h, n), (b, k, t, n), (b, k, t, n)]))
valid = np.ones((b, t), bool)
valid[0, :5] = valid[3, :30] = False
valid[2, 30:] = False
mask = masks.causal_mask(jnp.asarray(valid))
mesh = Mesh(np.asarray(jax.devices()).reshape(2, 1, 2), sharding.MESH_AXES, (AxisType.Auto,) * 3)
with sharding.use_mesh(mesh):
    assert attention.backend() == "cpu"
    run = jax.jit(lambda *a: attention.splash_attention(*a, interpret=True))
    assert "shard_map" in str(jax.make_jaxpr(run)(q, kk, v, mask))
    got = run(q, kk, v, mask)
want = attention.einsum_attention(q, kk, v, mask)
err = float(jnp.abs((got - want) * valid[:, :, None, None]).max())
assert err < 1e-5, err
print("OK", err)
"""


def test_splash_under_a_mesh_runs_per_shard_of_batch_and_heads():
    """2 x 2 fake CPU devices (data x tensor): the kernel runs inside shard_map, same values."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": xla_flags(4),
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        [sys.executable, "-c", _MESH_SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]


def test_splash_refuses_a_cache_extending_pass():
    (q, k, v, mask), _ = _cache_pass(jnp.float32)
    with pytest.raises(ValueError, match="T == S"):
        attention.splash_attention(q, k, v, mask, interpret=True)


# ----------------------------------------------------------------------------------------------
# Which kernel runs
# ----------------------------------------------------------------------------------------------


def _resolve(impl, platform, t=64, s=64, n=128, dtype=jnp.bfloat16, packed=False):
    return attention.resolve(
        impl, t=t, s=s, head_dim=n, dtype=dtype, platform=platform, packed=packed
    )


def test_auto_picks_by_backend_and_shape():
    assert attention.backend() == jax.default_backend()
    if jax.default_backend() == "cpu":
        assert attention.resolve("auto", t=64, s=64, head_dim=128, dtype=jnp.bfloat16) == "chunked"
    assert _resolve("auto", "cpu") == "chunked"
    assert _resolve("auto", "cpu", t=1) == "einsum"  # the decode step
    assert _resolve("auto", "gpu") == "cudnn"
    assert _resolve("auto", "gpu", dtype=jnp.float32) == "chunked"  # cuDNN: bf16/fp16 only
    assert _resolve("auto", "gpu", n=256) == "chunked"  # beyond 128 only from Hopper on
    assert _resolve("auto", "gpu", t=1) == "einsum"
    assert _resolve("auto", "tpu") == "splash"
    assert _resolve("auto", "tpu", t=16, s=80) == "chunked"  # a cache-extending pass
    assert _resolve("auto", "tpu", n=64) == "chunked"
    # Packed GRPO rows: the block-skipping kernels where they apply.
    assert _resolve("auto", "gpu", packed=True) == "flash"
    assert _resolve("auto", "gpu", packed=True, dtype=jnp.float32) == "flash"
    assert _resolve("auto", "gpu", packed=True, n=96) == "cudnn"  # Triton: power-of-two tiles
    assert _resolve("auto", "tpu", packed=True) == "splash"
    assert _resolve("auto", "tpu", packed=True, n=64) == "chunked"
    assert _resolve("auto", "cpu", packed=True) == "chunked"
    assert _resolve("auto", "gpu", packed=True, t=1) == "einsum"


def test_explicit_choices_and_their_errors():
    assert _resolve("einsum", "gpu") == "einsum"
    assert _resolve("chunked", "gpu") == "chunked"
    assert _resolve("cudnn", "gpu", t=1) == "einsum"
    assert _resolve("splash", "tpu", t=16, s=80) == "chunked"
    assert _resolve("flash", "gpu") == "flash"  # a full causal pass: segments from validity
    assert _resolve("flash", "gpu", t=16, s=80) == "chunked"
    assert _resolve("splash", "tpu", packed=True) == "splash"
    with pytest.raises(ValueError, match="'cudnn' needs a GPU, but this program runs on cpu"):
        _resolve("cudnn", "cpu")
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        _resolve("cudnn", "gpu", dtype=jnp.float32)
    with pytest.raises(ValueError, match="head_dim % 8"):
        _resolve("cudnn", "gpu", n=12)
    with pytest.raises(ValueError, match="'splash' needs a TPU"):
        _resolve("splash", "cpu")
    with pytest.raises(ValueError, match="'flash2' is not one of"):
        _resolve("flash2", "cpu")


# ----------------------------------------------------------------------------------------------
# The real kernels, where an accelerator is present
# ----------------------------------------------------------------------------------------------


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU (cuDNN)")
@PASSES
def test_accelerator_cudnn_matches_einsum(which):
    (q, k, v, mask), _ = _pass(which, jnp.bfloat16)
    q, k, v = (jnp.pad(x, [(0, 0)] * 3 + [(0, 128 - N)]) for x in (q, k, v))  # head_dim 128
    reads = np.asarray(mask).any(-1)
    cot = np.pad(_cotangent(q.shape[1], reads), [(0, 0)] * 3 + [(0, 128 - N)])
    _check_against_einsum(attention.cudnn_attention, q, k, v, mask, cot, jnp.bfloat16, reads)


@pytest.mark.skipif(jax.default_backend() != "tpu", reason="needs a TPU (splash)")
def test_accelerator_splash_matches_einsum():
    (q, k, v, mask), valid = _full_pass(37, jnp.bfloat16)
    q, k, v = (jnp.pad(x, [(0, 0)] * 3 + [(0, 128 - N)]) for x in (q, k, v))
    got = jax.jit(attention.splash_attention)(q, k, v, mask)
    _close(got, attention.einsum_attention(q, k, v, mask), jnp.bfloat16, "forward", valid)
