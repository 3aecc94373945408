"""The block-skipping kernels (flash on GPU, splash with a dynamic mask on TPU) against einsum.

They run in Pallas' interpreter on CPU: packed rows with ragged groups (replies of different
lengths, an empty one, padding rows), grouped-query heads (G = 3), odd lengths (the kernels pad
T to their block), forward values and the q, k, v gradients. That the flash kernel skips dead
blocks is checked by poisoning a reply's block-aligned keys with NaN: another reply's queries,
which never walk those blocks, stay finite. Lowering for the real backends (Triton for CUDA,
Mosaic for TPU) runs on CPU too, up to the backend's own compiler; the tests marked
`accelerator` run the real kernels where a GPU or TPU is present.
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
from memr1.models.kernels import flash_gpu, launch, splash_packed
from tests.fake_devices import xla_flags
from tests.models.test_packed_mask import packed_row

# The Pallas interpreter runs every grid step as a loop of XLA ops: tens of seconds.
pytestmark = pytest.mark.slow

H, K, N = 6, 2, 16  # G = 3
ROOT = Path(__file__).resolve().parents[2]


def _rows(width: int) -> np.ndarray:
    """Three packed rows: ragged replies (one empty), a nearly full row, a short one."""
    return np.stack(
        [
            packed_row(width, 10, [5, 0, 12, 3]),
            packed_row(width, width // 2, [width // 2 - 3, 2]),
            packed_row(width, 3, [1, 1, 1, 1, 1]),
        ]
    )


def _inputs(seg: np.ndarray, dtype):
    b, t = seg.shape
    k1, k2, k3, k4 = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(k1, (b, t, H, N), jnp.float32).astype(dtype)
    k = jax.random.normal(k2, (b, K, t, N), jnp.float32).astype(dtype)
    v = jax.random.normal(k3, (b, K, t, N), jnp.float32).astype(dtype)
    cot = jax.random.normal(k4, (b, t, H, N), jnp.float32)
    return q, k, v, cot


def _values_and_grads(kernel, q, k, v, cot):
    def run(q, k, v):
        out, vjp = jax.vjp(kernel, q, k, v)
        return out, vjp(cot.astype(out.dtype))

    with launch.pallas_mode("interpret"):
        return jax.jit(run)(q, k, v)


def _rel(got, want) -> float:
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-6))


def _check(kernel, seg, dtype, tol):
    q, k, v, cot = _inputs(seg, dtype)
    dense = masks.packed_mask(jnp.asarray(seg))
    got, got_grads = _values_and_grads(functools.partial(kernel, segments_BT=seg), q, k, v, cot)
    want, want_grads = _values_and_grads(
        lambda q, k, v: attention.einsum_attention(q, k, v, dense), q, k, v, cot
    )
    assert got.shape == want.shape and got.dtype == want.dtype
    assert _rel(got, want) < tol, f"forward differs by {_rel(got, want):.2e}"
    for name, g, w in zip("qkv", got_grads, want_grads, strict=True):
        assert g.dtype == w.dtype
        assert _rel(g, w) < tol, f"d{name} differs by {_rel(g, w):.2e}"


def _flash(q, k, v, segments_BT, block):
    return flash_gpu.flash_attention(q, k, v, jnp.asarray(segments_BT), block=block)


def _splash(q, k, v, segments_BT):
    return splash_packed.splash_packed_attention(q, k, v, jnp.asarray(segments_BT))


@pytest.mark.parametrize("width,block", [(45, 8), (64, 16), (37, 32)])
def test_flash_matches_einsum_values_and_gradients(width, block):
    _check(functools.partial(_flash, block=block), _rows(width), jnp.float32, 1e-5)


def test_flash_matches_einsum_in_bfloat16():
    _check(functools.partial(_flash, block=16), _rows(45), jnp.bfloat16, 3e-2)


def test_splash_packed_matches_einsum_values_and_gradients():
    # 200 columns: two of splash's 128-column tiles once padded, replies across the boundary.
    seg = np.stack([packed_row(200, 70, [50, 0, 30, 3]), packed_row(200, 10, [120, 5])])
    _check(_splash, seg, jnp.float32, 1e-5)


def test_flash_never_reads_a_dead_block():
    """Reply 1 fills key blocks 2-3 exactly; reply 2's queries (blocks 4-5) never walk them,
    so NaN keys and values there reach no other reply's output."""
    block = 8
    seg = packed_row(48, 16, [16, 16])[None]
    q, k, v, _ = _inputs(seg, jnp.float32)
    poison = jnp.zeros(48, bool).at[16:32].set(True)[None, None, :, None]
    k_bad, v_bad = jnp.where(poison, jnp.nan, k), jnp.where(poison, jnp.nan, v)
    with launch.pallas_mode("interpret"):
        got = jax.jit(lambda *a: _flash(*a, seg, block))(q, k_bad, v_bad)
    want = attention.einsum_attention(q, k, v, masks.packed_mask(jnp.asarray(seg)))
    assert np.isnan(np.asarray(got[:, 16:32])).all()  # reply 1 reads its own poison
    assert _rel(got[:, 32:], want[:, 32:]) < 1e-5  # reply 2 never loads it
    assert _rel(got[:, :16], want[:, :16]) < 1e-5  # nor does the prompt


def test_flash_runs_a_full_causal_pass_from_the_masks_validity():
    """attention='flash' on an unpacked full pass (`masks.causal_mask`, left- and right-padded
    rows): every real token is prompt, padding reads only itself; real rows match einsum."""
    valid = np.ones((3, 37), bool)
    valid[0, :5], valid[1, :20], valid[2, 30:] = False, False, False
    mask = masks.causal_mask(jnp.asarray(valid))
    q, k, v, cot = _inputs(valid.astype(np.int32), jnp.float32)
    cot = cot * valid[:, :, None, None]

    def kernel(impl):
        return lambda q, k, v: attention.attend(q, k, v, mask, implementation=impl, chunk=8)

    got, got_grads = _values_and_grads(kernel("flash"), q, k, v, cot)
    want, want_grads = _values_and_grads(kernel("einsum"), q, k, v, cot)
    assert _rel(got[valid], want[valid]) < 1e-5
    for g, w in zip(got_grads, want_grads, strict=True):
        assert _rel(g, w) < 1e-5


def test_explicit_kernels_need_their_accelerator_or_the_interpreter():
    kw = dict(t=64, s=64, head_dim=128, dtype=jnp.bfloat16, packed=True)
    with pytest.raises(ValueError, match="'flash' needs a GPU, but this program runs on cpu"):
        attention.resolve("flash", platform="cpu", **kw)
    with pytest.raises(ValueError, match="'splash' needs a TPU, but this program runs on gpu"):
        attention.resolve("splash", platform="gpu", **kw)
    with launch.pallas_mode("interpret"):
        assert attention.resolve("flash", platform="cpu", **kw) == "flash"
        assert attention.resolve("splash", platform="cpu", **kw) == "splash"
    with pytest.raises(ValueError, match="power-of-two head_dim"):
        attention.resolve("flash", platform="gpu", **{**kw, "head_dim": 96})
    with pytest.raises(ValueError, match="pallas mode 'fast' is not one of"):
        launch.pallas_mode("fast").__enter__()


def _lowered(fn, platform, *shapes):
    return jax.jit(fn).trace(*shapes).lower(lowering_platforms=(platform,)).as_text()


@pytest.mark.parametrize(
    "kernel,platform,target",
    [
        (lambda *a: flash_gpu.flash_attention(*a, mode="native"), "cuda", "__gpu$xla.gpu.triton"),
        (lambda *a: splash_packed.splash_packed_attention(*a, mode="native"), "tpu",
         "tpu_custom_call"),
    ],
    ids=["flash-triton", "splash-mosaic"],
)  # fmt: skip
def test_kernels_lower_for_their_accelerator(kernel, platform, target):
    """Qwen-like tiles (N = 128, 128-column blocks, bf16, G = 7): forward and backward lower
    to three kernel calls (forward, dq, dk/dv) for the real backend, from a CPU."""
    b, t, h, kv = 2, 384, 14, 2
    q = jax.ShapeDtypeStruct((b, t, h, 128), jnp.bfloat16)
    k = jax.ShapeDtypeStruct((b, kv, t, 128), jnp.bfloat16)
    seg = jax.ShapeDtypeStruct((b, t), jnp.int32)

    def loss(q, k, v, s):
        return kernel(q, k, v, s).astype(jnp.float32).sum()

    assert _lowered(kernel, platform, q, k, k, seg).count(target) == 1
    assert _lowered(jax.grad(loss, argnums=(0, 1, 2)), platform, q, k, k, seg).count(target) == 3


_MESH_SCRIPT = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import AxisType, Mesh
from memr1 import sharding
from memr1.models import attention, masks
from memr1.models.kernels import launch
from tests.models.test_packed_mask import ragged_rows

seg = jnp.asarray(ragged_rows(3, 4, 150, 3))
b, t, h, k, n = 4, 150, 6, 2, 16
q, kk, v = (jax.random.normal(jax.random.key(i), s) for i, s in
            enumerate([(b, t, h, n), (b, k, t, n), (b, k, t, n)]))
want = attention.einsum_attention(q, kk, v, masks.packed_mask(seg))
mesh = Mesh(np.asarray(jax.devices()).reshape(2, 1, 2), sharding.MESH_AXES, (AxisType.Auto,) * 3)
for kernel in ("flash", "splash"):
    with sharding.use_mesh(mesh), launch.pallas_mode("interpret"):
        run = jax.jit(lambda *a: attention.attend(*a, implementation=kernel))
        assert "shard_map" in str(jax.make_jaxpr(run)(q, kk, v, masks.PackedMask(seg)))
        got = run(q, kk, v, masks.PackedMask(seg))
    err = float(jnp.abs(got - want).max())
    assert err < 1e-5, (kernel, err)
    print("OK", kernel, err)
"""


def test_kernels_under_a_mesh_run_per_shard_of_batch_and_heads():
    """2 x 2 fake CPU devices (data x tensor): both kernels run inside shard_map, same values."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(4),
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", _MESH_SCRIPT], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0 and proc.stdout.count("OK") == 2, proc.stderr[-3000:]


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU (Triton)")
def test_accelerator_flash_matches_einsum():
    """The Triton kernel itself: 128-column blocks, head dim 128, bf16, G = 3."""
    seg = _rows(300)
    q, k, v, cot = (jnp.pad(x, [(0, 0)] * 3 + [(0, 128 - N)]) for x in _inputs(seg, jnp.bfloat16))
    dense = masks.packed_mask(jnp.asarray(seg))

    def run(kernel):
        out, vjp = jax.vjp(kernel, q, k, v)
        return out, vjp(cot.astype(out.dtype))

    got, got_grads = jax.jit(lambda: run(lambda *a: flash_gpu.flash_attention(*a, seg)))()
    want, want_grads = run(lambda q, k, v: attention.einsum_attention(q, k, v, dense))
    for g, w in zip((got, *got_grads), (want, *want_grads), strict=True):
        assert _rel(g, w) < 3e-2


@pytest.mark.skipif(jax.default_backend() != "tpu", reason="needs a TPU (splash)")
def test_accelerator_splash_packed_matches_einsum():
    seg = _rows(300)
    q, k, v, _ = (jnp.pad(x, [(0, 0)] * 3 + [(0, 128 - N)]) for x in _inputs(seg, jnp.bfloat16))
    got = jax.jit(lambda *a: splash_packed.splash_packed_attention(*a, seg))(q, k, v)
    want = attention.einsum_attention(q, k, v, masks.packed_mask(jnp.asarray(seg)))
    assert _rel(got, want) < 3e-2
