"""A Pallas (GPU, Triton) kernel for one part of the engine's paged decode attention.

`paged_partial` computes what `memr1.sampling.paged.partial_attention` computes (the partial
softmax of X sets of Q queries over the first `length` keys of the pages a table names: the
unnormalised output o, the running max m and sum l), but walks only the pages that hold a set's
tokens: a program per (set, kv head) loops over the set's live pages, `pages_per_block` at a
time, and keeps an online softmax, as `jax.experimental.pallas.ops.gpu.paged_attention` does
for one query; it reads no null page and writes no gathered copy. Its bytes are what it
reads: each live page once per kv head (keys and values), the queries, and its outputs
(`paged_partial_bytes`); XLA's cost analysis counts a custom call as 0.

On a CPU it runs in Pallas' interpreter (`interpret=True`), where the tests check it against the
XLA path; the engine uses it where `engine.attention` is "pallas".
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from memr1.models.attention import NEG_INF

_MIN_ROWS = 16  # a Triton dot takes at least 16 rows


def _kernel(q_ref, k_ref, v_ref, table_ref, length_ref, o_ref, m_ref, l_ref, *, per_block):
    q = q_ref[...]
    rows, n = q.shape
    page = k_ref.shape[1]
    width = per_block * page
    length = length_ref[0]
    blocks = pl.cdiv(pl.cdiv(length, page), per_block)

    def body(b, carry):
        o, m, l = carry  # noqa: E741
        ids = table_ref[pl.ds(b * per_block, per_block)]
        k = k_ref[ids].reshape(width, n)
        v = v_ref[ids].reshape(width, n)
        s = plgpu.dot(q, k, trans_b=True).astype(jnp.float32) * (n**-0.5)
        s = jnp.where((b * width + jnp.arange(width) < length)[None, :], s, NEG_INF)
        m_new = jnp.maximum(m, s.max(axis=-1))
        correction = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new[:, None])
        l = l * correction + p.sum(axis=-1)  # noqa: E741
        o = o * correction[:, None] + plgpu.dot(p.astype(v.dtype), v).astype(jnp.float32)
        return o, m_new, l

    init = (
        jnp.zeros((rows, n), jnp.float32),
        jnp.full((rows,), NEG_INF, jnp.float32),
        jnp.zeros((rows,), jnp.float32),
    )
    o, m, l = jax.lax.fori_loop(0, blocks, body, init)  # noqa: E741
    o_ref[...] = o
    m_ref[...] = m
    l_ref[...] = l


def paged_partial(q_KXQN, pages_KPSN, table_XT, length_X, *, pages_per_block: int = 8,
                  interpret: bool = False):  # fmt: skip
    """(o [K, X, Q, N], m [K, X, Q], l [K, X, Q]) float32 of `partial_attention`.

    Args:
      q_KXQN: the queries of X sets, Q a set, per kv head.
      pages_KPSN: [2K, P, page, N] one device's pages (keys in heads [0, K), values in [K, 2K)).
      table_XT: [X, T] int32 page ids of each set; length_X: [X] int32 its tokens.
      pages_per_block: pages a step of the loop reads.
      interpret: run in Pallas' interpreter (any backend).
    """
    kv, x, q, n = q_KXQN.shape
    _, pages, page, _ = pages_KPSN.shape
    t = table_XT.shape[1]
    per_block = min(pages_per_block, t)
    rows = max(_MIN_ROWS, 1 << max(0, q - 1).bit_length())
    q_KXQN = jnp.pad(q_KXQN, ((0, 0), (0, 0), (0, rows - q), (0, 0)))
    table_XT = jnp.pad(table_XT, ((0, 0), (0, -t % per_block)))  # the null page
    kernel = functools.partial(_kernel, per_block=per_block)

    def one(q_KQN, table_T, length_1):
        return pl.pallas_call(
            kernel,
            grid=(kv,),
            in_specs=[
                pl.BlockSpec((None, rows, n), lambda k: (k, 0, 0)),
                pl.BlockSpec((None, pages, page, n), lambda k: (k, 0, 0, 0)),  # keys
                pl.BlockSpec((None, pages, page, n), lambda k: (k + kv, 0, 0, 0)),  # values
                pl.BlockSpec((table_T.shape[0],), lambda k: (0,)),
                pl.BlockSpec((1,), lambda k: (0,)),
            ],
            out_specs=[
                pl.BlockSpec((None, rows, n), lambda k: (k, 0, 0)),
                pl.BlockSpec((None, rows), lambda k: (k, 0)),
                pl.BlockSpec((None, rows), lambda k: (k, 0)),
            ],
            out_shape=[
                jax.ShapeDtypeStruct((kv, rows, n), jnp.float32),
                jax.ShapeDtypeStruct((kv, rows), jnp.float32),
                jax.ShapeDtypeStruct((kv, rows), jnp.float32),
            ],
            interpret=interpret,
            name="engine_paged_partial",
        )(q_KQN, pages_KPSN, pages_KPSN, table_T, length_1)

    o, m, l = jax.vmap(one, in_axes=(1, 0, 0), out_axes=1)(q_KXQN, table_XT, length_X[:, None])  # noqa: E741
    return o[:, :, :q], m[:, :, :q], l[:, :, :q]


def paged_partial_bytes(q_shape, length_X, *, page: int, kv: int, n: int, itemsize: int) -> int:
    """Bytes `paged_partial` reads and writes: each set's live pages once per kv head, keys and
    values; its queries; its outputs (float32)."""
    x, q = q_shape[1], q_shape[2]
    pages = sum(math.ceil(int(length) / page) for length in length_X)
    live = pages * page * 2 * kv * n * itemsize
    return live + kv * x * q * n * itemsize + kv * x * q * (n + 2) * 4
