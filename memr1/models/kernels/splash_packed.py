"""The Pallas splash kernel (TPU) over packed GRPO rows, with the packed mask as a dynamic mask.

Splash takes a static mask (a Python object it turns into block tables at trace time) or a
`jax.Array` mask, which it reduces to block tables inside the program and whose empty blocks it
skips as it skips a static mask's. A packed row's mask depends on its segments, so it is built
inside jit from them (`masks.packed_mask`, the one definition), a [1, T, T] mask per row that
serves the row's G query heads of each key/value head (a multi-query call per K/V head).

Splash's own constructor marks its block tables as dynamic with `jnp.array(True)`, which is a
tracer when the mask is one, and the kernel then branches on it in Python
(`TracerBoolConversionError`); the tables are re-marked with a plain True (`_dynamic`).

T is padded to a multiple of the kernel's 128-column tile with padding columns (segment -1:
they read only themselves). Matmuls a live block pair and query head: 2 forward, 3 dq, 4 dk/dv
(splash's unfused backward), as `memr1.models.kernels.flash_gpu`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from memr1.models import masks
from memr1.models.kernels import launch

BLOCK = 128  # splash's default tile, forward and backward


def _dynamic(kernel):
    """`kernel` with its block tables marked dynamic by a Python bool (see the module)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_kernel as splash_kernel,
    )

    def mark(info):
        return None if info is None else info._replace(is_dynamic_mask=True)

    return splash_kernel.SplashAttentionKernel(
        mark(kernel.fwd_mask_info),
        mark(kernel.dq_mask_info),
        mark(kernel.dkv_mask_info),
        **kernel.kwargs,
    )


def _one_row(q_KGTN, k_KTN, v_KTN, seg_T, mode):
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    mask = masks.packed_mask(seg_T[None])  # [1, T, T]: one mask for every head of the row
    kernel = _dynamic(splash.make_splash_mqa_single_device(mask, interpret=mode == "interpret"))
    return jax.vmap(kernel)(q_KGTN, k_KTN, v_KTN)


def splash_packed_attention(
    q_BTHN: jax.Array,
    k_BKTN: jax.Array,
    v_BKTN: jax.Array,
    segments_BT: jax.Array,
    *,
    mode: str | None = None,
) -> jax.Array:
    """Attention output [B, T, H, N] (dtype of v) under the packed mask of `segments_BT`, by
    the splash kernel, its rows and K/V heads mapped over by `vmap` (a row's mask serves all its
    heads). `mode`: "native" (TPU) or "interpret" (`launch`; default: the current one)."""
    mode = mode or launch.current_mode()
    if mode == "standin":
        raise ValueError("splash_packed_attention has no stand-in: count with flash_gpu's")
    b, t, h, n = q_BTHN.shape
    kv = k_BKTN.shape[1]
    if k_BKTN.shape[2] != t or segments_BT.shape != (b, t):
        raise ValueError(
            f"splash_packed_attention runs a full pass over packed rows: q {q_BTHN.shape}, "
            f"k {k_BKTN.shape} and segments {segments_BT.shape} must share B={b} and T={t}"
        )
    g = h // kv
    pad = (-t) % BLOCK
    dt = v_BKTN.dtype
    scaled = (q_BTHN.astype(jnp.float32) * (n**-0.5)).astype(dt)
    q = jnp.pad(scaled, ((0, 0), (0, pad), (0, 0), (0, 0)))
    q_BKGTN = q.reshape(b, t + pad, kv, g, n).transpose(0, 2, 3, 1, 4)
    k = jnp.pad(k_BKTN.astype(dt), ((0, 0), (0, 0), (0, pad), (0, 0)))
    v = jnp.pad(v_BKTN, ((0, 0), (0, 0), (0, pad), (0, 0)))
    seg = jnp.pad(segments_BT.astype(jnp.int32), ((0, 0), (0, pad)), constant_values=-1)
    out_BKGTN = jax.vmap(lambda *xs: _one_row(*xs, mode))(q_BKGTN, k, v, seg)
    out_BTHN = out_BKGTN.transpose(0, 3, 1, 2, 4).reshape(b, t + pad, h, n)
    return out_BTHN[:, :t].astype(dt)
