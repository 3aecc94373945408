"""Flash attention over packed GRPO rows that skips dead blocks (Pallas, lowered to Triton).

The function is `attention.einsum_attention` under the packed mask (`masks.packed_allowed`):
queries q [B, T, H, N], keys and values k, v [B, K, T, N] (head-major, as the model holds them),
query head h reading key/value head h // G. T is padded to a multiple of the block with
padding columns (segment -1, which read only themselves).

Which blocks run. `masks.block_live` marks the (query block, key block) pairs that hold a pair
the mask lets read; `block_tables` turns it into, per query block, the list of its live key
blocks (and per key block, its live query blocks, for dk/dv), live ones first. Each program
walks its list for `count` steps: a dead block is never loaded nor multiplied. Inside a live
block the mask is `packed_allowed` of the tile's columns, so the result is exact whatever the
tables say, as long as they list every live block.

Three kernels, each a grid over (row, head, block):
  forward  (B, H, T/blk): one query block of one head against its live key blocks, an online
           softmax in float32; writes the output and the row's log-sum-exp.
  dq       (B, H, T/blk): the same walk, recomputing the probabilities from the log-sum-exp.
  dk, dv   (B, K, T/blk): one key block of one key/value head against the live query blocks of
           each of its G query heads, summing over the heads in the kernel (no [B, H, T, N]
           gradient is materialised and K/V are never repeated).
Matmuls a live block pair and query head: 2 forward, 3 dq (scores, dP, dQ), 4 dk/dv (scores,
dV, dP, dK); `memr1.models.kernels.costs` counts them.

Triton needs power-of-two tiles: the block and the head dim N (16 to 256) on a GPU. The
interpreter (`launch.pallas_mode("interpret")`) takes any sizes.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from memr1.models import masks
from memr1.models.kernels import launch

BLOCK = 128
NEG_INF = -1e30  # finite: a block whose row is all masked so far gives exp(0) * 0, never NaN


def block_tables(segments_BT: jax.Array, block: int) -> dict[str, jax.Array]:
    """The walk of each program, from `masks.block_live` [B, n, n] (n = T / block):
    kv_order [B, n, n] (query block i's live key blocks first, ascending), kv_count [B, n],
    and q_order, q_count the same per key block over query blocks."""
    live = masks.block_live(segments_BT, block)
    live_t = live.swapaxes(1, 2)

    def order(x):
        return jnp.argsort(~x, axis=-1, stable=True).astype(jnp.int32)

    return {
        "kv_order": order(live),
        "kv_count": live.sum(-1).astype(jnp.int32),
        "q_order": order(live_t),
        "q_count": live_t.sum(-1).astype(jnp.int32),
    }


def _dot(a, b, *, trans_a=False, trans_b=False):
    """a @ b (optionally transposed) accumulated in float32; float32 operands at full
    precision (Triton would use TF32)."""
    dims = (((0 if trans_a else 1,), (1 if trans_b else 0,)), ((), ()))
    precision = jax.lax.Precision.HIGHEST if a.dtype == jnp.float32 else None
    return jax.lax.dot_general(a, b, dims, precision=precision, preferred_element_type=jnp.float32)


def _allowed(q_start, k_start, seg_q, seg_k, block):
    cols = jnp.arange(block)
    return masks.packed_allowed(
        (q_start + cols)[:, None], (k_start + cols)[None, :], seg_q[:, None], seg_k[None, :]
    )


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


def _forward_kernel(q_ref, k_ref, v_ref, seg_ref, order_ref, count_ref, o_ref, lse_ref, *,
                    block: int, scale: float):  # fmt: skip
    i = pl.program_id(2)
    q = q_ref[...]
    seg_q = seg_ref[pl.ds(i * block, block)]

    def body(step, carry):
        acc, m, total = carry
        j = order_ref[step]
        cols = pl.ds(j * block, block)
        allowed = _allowed(i * block, j * block, seg_q, seg_ref[cols], block)
        s = jnp.where(allowed, _dot(q, k_ref[cols, :], trans_b=True) * scale, NEG_INF)
        m_new = jnp.maximum(m, s.max(axis=-1))
        p = jnp.where(allowed, jnp.exp(s - m_new[:, None]), 0.0)
        corr = jnp.exp(m - m_new)
        v = v_ref[cols, :]
        acc = acc * corr[:, None] + _dot(p.astype(v.dtype), v)
        return acc, m_new, total * corr + p.sum(axis=-1)

    init = (
        jnp.zeros(q.shape, jnp.float32),
        jnp.full((block,), NEG_INF, jnp.float32),
        jnp.zeros((block,), jnp.float32),
    )
    acc, m, total = jax.lax.fori_loop(0, count_ref[i], body, init)
    o_ref[...] = (acc / total[:, None]).astype(o_ref.dtype)
    lse_ref[...] = m + jnp.log(total)


def _dq_kernel(q_ref, k_ref, v_ref, seg_ref, do_ref, lse_ref, delta_ref, order_ref, count_ref,
               dq_ref, *, block: int, scale: float):  # fmt: skip
    i = pl.program_id(2)
    q, do = q_ref[...], do_ref[...]
    lse, delta = lse_ref[...], delta_ref[...]
    seg_q = seg_ref[pl.ds(i * block, block)]

    def body(step, dq):
        j = order_ref[step]
        cols = pl.ds(j * block, block)
        k, v = k_ref[cols, :], v_ref[cols, :]
        allowed = _allowed(i * block, j * block, seg_q, seg_ref[cols], block)
        p = jnp.where(allowed, jnp.exp(_dot(q, k, trans_b=True) * scale - lse[:, None]), 0.0)
        ds = p * (_dot(do, v, trans_b=True) - delta[:, None])
        return dq + _dot(ds.astype(k.dtype), k)

    dq = jax.lax.fori_loop(0, count_ref[i], body, jnp.zeros(q.shape, jnp.float32))
    dq_ref[...] = (dq * scale).astype(dq_ref.dtype)


def _dkv_kernel(q_ref, k_ref, v_ref, seg_ref, do_ref, lse_ref, delta_ref, order_ref, count_ref,
                dk_ref, dv_ref, *, block: int, scale: float, group: int):  # fmt: skip
    j = pl.program_id(2)
    k, v = k_ref[...], v_ref[...]
    seg_k = seg_ref[pl.ds(j * block, block)]
    count = count_ref[j]

    def head(g, carry):
        def body(step, carry):
            dk, dv = carry
            i = order_ref[step]
            rows = pl.ds(i * block, block)
            q, do = q_ref[rows, g, :], do_ref[rows, g, :]
            lse, delta = lse_ref[g, rows], delta_ref[g, rows]
            allowed = _allowed(i * block, j * block, seg_ref[rows], seg_k, block)
            p = jnp.where(allowed, jnp.exp(_dot(q, k, trans_b=True) * scale - lse[:, None]), 0.0)
            dv = dv + _dot(p.astype(do.dtype), do, trans_a=True)
            ds = p * (_dot(do, v, trans_b=True) - delta[:, None])
            return dk + _dot(ds.astype(q.dtype), q, trans_a=True), dv

        return jax.lax.fori_loop(0, count, body, carry)

    zeros = jnp.zeros(k.shape, jnp.float32)
    dk, dv = jax.lax.fori_loop(0, group, head, (zeros, zeros))
    dk_ref[...] = (dk * scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


# ----------------------------------------------------------------------------------------------
# Calls
# ----------------------------------------------------------------------------------------------


def _call(kernel, name, mode, grid, in_specs, out_specs, out_shape, *args):
    if mode == "standin":
        return launch.standin(name, out_shape, *args)
    from jax.experimental.pallas import triton as plgpu

    n = args[0].shape[-1]
    return pl.pallas_call(
        kernel,
        out_shape=out_shape,
        grid=grid,
        in_specs=in_specs,
        out_specs=out_specs,
        interpret=mode == "interpret",
        name=name,
        compiler_params=plgpu.CompilerParams(num_warps=4 if n <= 64 else 8, num_stages=2),
    )(*args)


def _specs(b, h, kv, t, n, block):
    """BlockSpecs shared by the kernels over grid (row, head, block): `q_blk` one query block
    of one head, `kv_row` a whole key/value row of that head's K/V head, `row` a row's segments,
    `stat` one block of a head's log-sum-exp, `list_` and `count` the program's walk."""
    g = h // kv
    nb = t // block
    return {
        "q_blk": pl.BlockSpec((None, block, None, n), lambda r, hh, i: (r, i, hh, 0)),
        "kv_row": pl.BlockSpec((None, None, t, n), lambda r, hh, i: (r, hh // g, 0, 0)),
        "row": pl.BlockSpec((None, t), lambda r, hh, i: (r, 0)),
        "stat": pl.BlockSpec((None, None, block), lambda r, hh, i: (r, hh, i)),
        "list_": pl.BlockSpec((None, None, nb), lambda r, hh, i: (r, i, 0)),
        "count": pl.BlockSpec((None, nb), lambda r, hh, i: (r, 0)),
    }


def _forward(q, k, v, seg, tables, block, mode):
    b, t, h, n = q.shape
    kv = k.shape[1]
    sp = _specs(b, h, kv, t, n, block)
    out_shape = (
        jax.ShapeDtypeStruct(q.shape, v.dtype),
        jax.ShapeDtypeStruct((b, h, t), jnp.float32),
    )
    kernel = functools.partial(_forward_kernel, block=block, scale=n**-0.5)
    return _call(
        kernel, "flash_forward", mode, (b, h, t // block),
        [sp["q_blk"], sp["kv_row"], sp["kv_row"], sp["row"], sp["list_"], sp["count"]],
        [sp["q_blk"], sp["stat"]], out_shape,
        q, k, v, seg, tables["kv_order"], tables["kv_count"],
    )  # fmt: skip


def _backward(q, k, v, seg, tables, o, lse, do, block, mode):
    b, t, h, n = q.shape
    kv = k.shape[1]
    g = h // kv
    sp = _specs(b, h, kv, t, n, block)
    delta = jnp.einsum("bthn,bthn->bht", o.astype(jnp.float32), do.astype(jnp.float32))
    scale = n**-0.5
    dq = _call(
        functools.partial(_dq_kernel, block=block, scale=scale), "flash_dq", mode,
        (b, h, t // block),
        [sp["q_blk"], sp["kv_row"], sp["kv_row"], sp["row"], sp["q_blk"], sp["stat"],
         sp["stat"], sp["list_"], sp["count"]],
        sp["q_blk"], jax.ShapeDtypeStruct(q.shape, q.dtype),
        q, k, v, seg, do, lse, delta, tables["kv_order"], tables["kv_count"],
    )  # fmt: skip
    group_rows = pl.BlockSpec((None, t, g, n), lambda r, kk, j: (r, 0, kk, 0))
    group_stat = pl.BlockSpec((None, g, t), lambda r, kk, j: (r, kk, 0))
    kv_blk = pl.BlockSpec((None, None, block, n), lambda r, kk, j: (r, kk, j, 0))
    dk, dv = _call(
        functools.partial(_dkv_kernel, block=block, scale=scale, group=g), "flash_dkv", mode,
        (b, kv, t // block),
        [group_rows, kv_blk, kv_blk, sp["row"], group_rows, group_stat, group_stat,
         sp["list_"], sp["count"]],
        [kv_blk, kv_blk],
        (jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)),
        q, k, v, seg, do, lse, delta, tables["q_order"], tables["q_count"],
    )  # fmt: skip
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _flash(q, k, v, seg, tables, block, mode):
    return _forward(q, k, v, seg, tables, block, mode)[0]


def _flash_fwd(q, k, v, seg, tables, block, mode):
    o, lse = _forward(q, k, v, seg, tables, block, mode)
    return o, (q, k, v, seg, tables, o, lse)


def _flash_bwd(block, mode, res, do):
    q, k, v, seg, tables, o, lse = res
    dq, dk, dv = _backward(q, k, v, seg, tables, o, lse, do, block, mode)
    return dq, dk, dv, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


def flash_attention(
    q_BTHN: jax.Array,
    k_BKTN: jax.Array,
    v_BKTN: jax.Array,
    segments_BT: jax.Array,
    *,
    block: int = BLOCK,
    mode: str | None = None,
) -> jax.Array:
    """Attention output [B, T, H, N] (dtype of v) under the packed mask of `segments_BT`,
    computing only the live blocks. `mode`: see `launch` (default: the current one)."""
    mode = mode or launch.current_mode()
    b, t, h, n = q_BTHN.shape
    kv = k_BKTN.shape[1]
    if k_BKTN.shape[2] != t or segments_BT.shape != (b, t):
        raise ValueError(
            f"flash_attention runs a full pass over packed rows: q {q_BTHN.shape}, "
            f"k {k_BKTN.shape} and segments {segments_BT.shape} must share B={b} and T={t}"
        )
    if h % kv:
        raise ValueError(f"flash_attention: {h} query heads do not group over {kv} K/V heads")
    pad = (-t) % block
    dt = v_BKTN.dtype
    q = jnp.pad(q_BTHN.astype(dt), ((0, 0), (0, pad), (0, 0), (0, 0)))
    k = jnp.pad(k_BKTN.astype(dt), ((0, 0), (0, 0), (0, pad), (0, 0)))
    v = jnp.pad(v_BKTN, ((0, 0), (0, 0), (0, pad), (0, 0)))
    seg = jnp.pad(segments_BT.astype(jnp.int32), ((0, 0), (0, pad)), constant_values=-1)
    tables = block_tables(seg, block)
    return _flash(q, k, v, seg, tables, block, mode)[:, :t]
