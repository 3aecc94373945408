"""The rollout engine's KV cache: fixed-size pages in one pool per layer, and decode attention
over a prompt's pages (read once for all of its samples) and each row's reply pages.

Memory layout, per layer (C = data × fsdp devices that decode rows of their own, one slice each):
  pages  [C, 2K, P, page, N]: P pages of `page` token slots per device; heads [0, K) hold keys
         and [K, 2K) values, head-major, so one gather fetches both and gathered pages are a
         plain batch of [S, N] matrices per kv head (`jax.experimental.pallas.ops.gpu.
         paged_attention`'s layout, keys and values side by side). Page 0 is the null page:
         never handed out, written by rows that write nothing, read only under a false mask.
Both parts of a row's KV are filled from their token 0, token j at page j // page, slot j % page:
  prompt_table [C, PS, Tp]  the pages of the prompt in each of PS prompt slots. A prompt is
                            stored once, whatever G is, and stays until its last sample ends.
  reply_table  [C, R, Tr]   each decode slot's reply pages, as many as its live length needs
                            (the scheduler, `memr1.sampling.scheduler`, hands them out a round
                            ahead).
Entries past a part's length name the null page.

A decode step writes each row's new key and value at reply slot `reply_len - 1`, then attends
in two parts, cascade style: the prompt part once per prompt slot, whose keys meet the queries
of all its rows at once (a [PS, G] grid of lanes, row (slot, sample) in lane slot·G + sample),
and the reply part per row: two partial softmaxes (each its max, its sum and its unnormalised
output) merged by their log-sum-exp. A step thus reads a resident prompt once, not once per
sample. Each part masks slots past its length, so a row reads the same values
whatever its pages' neighbours hold. This is the XLA path (any backend): it gathers every entry
of both tables, null pages included, so its reads follow the tables' widths (the engine sizes
the reply table per round to the longest live reply).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from memr1.models.attention import NEG_INF

NULL_PAGE = 0


class RowPages(NamedTuple):
    """Where the KV of each decode slot lives (shared by every layer of one decode step).

    Prompts sit in prompt slots (PS per device); a row names its prompt's slot and its lane
    there (its sample index), so the queries of the rows of one prompt meet that prompt's keys
    in one [PS, G] grid of lanes.

    prompt_table: [C, PS, Tp] int32 page ids of each prompt slot's prompt.
    prompt_len: [C, PS] int32 its tokens (0 for an empty slot).
    cell: [C, R] int32 the row's lane in the grid, prompt slot × G + sample (PS × G, past the
      grid, for a slot that holds no row: it reads zeros and writes nothing there).
    reply_table: [C, R, Tr] int32 page ids of the row's reply.
    reply_len: [C, R] int32 reply tokens whose KV is cached once this step has written its own.
    write: [C, R] bool: the slot holds a live row (others write to the null page).
    """

    prompt_table: jax.Array
    prompt_len: jax.Array
    cell: jax.Array
    reply_table: jax.Array
    reply_len: jax.Array
    write: jax.Array


KERNELS = ("xla", "pallas")


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["pages", "rows"],
    meta_fields=["lanes", "kernel", "row_split"],
)
@dataclasses.dataclass(frozen=True)
class PagedLayer:
    """One layer's pages and the rows' view of them: a cache that `transformer.forward` hands
    to its attention in place of a dense [B, K, S, N] buffer (see `attend`).

    `kernel` computes each part: "xla" gathers the pages a table names (any backend); "pallas"
    walks only the live pages (`memr1.sampling.paged_kernel`; interpreted off a GPU). Under a
    row split (`row_split`, a sharding over the data × fsdp axes) the Pallas call runs in a
    `shard_map`, each device over its own pages.
    """

    pages: jax.Array  # [C, 2K, P, page, N]: keys in heads [0, K), values in [K, 2K)
    rows: RowPages
    lanes: int  # G: lanes of a prompt slot (static)
    kernel: str = "xla"
    row_split: Any = None

    def attend(self, q_BTHN, k_BTKN, v_BTKN) -> tuple[jax.Array, PagedLayer]:
        """Writes one step's keys and values (T = 1, B = C·R slots, device-major) at each row's
        reply slot, then attends over the row's prompt and reply pages. Returns the attention
        output [B, 1, H, N] and the layer with its pages updated."""
        b, t, h, n = q_BTHN.shape
        d, r = self.rows.cell.shape
        if t != 1 or b != d * r:
            raise ValueError(f"a paged decode step takes [{d * r}, 1] queries, got [{b}, {t}]")
        kv = k_BTKN.shape[2]
        new_CRKN = jnp.concatenate([k_BTKN, v_BTKN], axis=2).reshape(d, r, 2 * kv, n)
        page_size = self.pages.shape[3]
        pos_CR = jnp.maximum(self.rows.reply_len - 1, 0)
        page_CR = jnp.take_along_axis(
            self.rows.reply_table, (pos_CR // page_size)[..., None], -1, mode="clip"
        )
        page_CR = jnp.where(self.rows.write, page_CR[..., 0], NULL_PAGE)
        pages = jax.vmap(write_token)(
            self.pages, page_CR, pos_CR % page_size, new_CRKN.astype(self.pages.dtype)
        )
        attention = jax.vmap(
            functools.partial(paged_attention, lanes=self.lanes, kernel=self.kernel)
        )
        if self.kernel == "pallas" and self.row_split is not None:
            # A Pallas call is opaque to XLA's partitioner: run it on each device's own slice.
            spec = jax.sharding.PartitionSpec(self.row_split.spec[0])
            attention = jax.shard_map(
                attention,
                mesh=self.row_split.mesh,
                in_specs=(spec, spec, jax.tree.map(lambda _: spec, self.rows)),
                out_specs=spec,
                check_vma=False,
            )
        out_CRHN = attention(q_BTHN.reshape(d, r, h, n), pages, self.rows)
        new = dataclasses.replace(self, pages=pages)
        return out_CRHN.reshape(b, 1, h, n).astype(v_BTKN.dtype), new


def write_token(pages_KPSN, page_R, slot_R, x_RKN) -> jax.Array:
    """One device's pages with row r's [2K, N] keys and values written at (page_R[r],
    slot_R[r])."""
    return pages_KPSN.at[:, page_R, slot_R, :].set(x_RKN.transpose(1, 0, 2))


def write_prompt_pages(pages_CKPSN, cache: dict, page_ids_CBT) -> jax.Array:
    """Pages with a prefill's dense cache scattered into them.

    Args:
      pages_CKPSN: [C, 2K, P, page, N] one layer's pool.
      cache: {"k", "v"}: [C·B, K, T, N] the prefill's cache of that layer, token j of each
        prompt at column j, T a multiple of the page size; device-major rows.
      page_ids_CBT: [C, B, T / page] the page that takes each page-sized block of columns
        (the null page for blocks past a prompt's tokens).
    """
    d, b, blocks = page_ids_CBT.shape
    x_BKTN = jnp.concatenate([cache["k"], cache["v"]], axis=1)
    _, heads, t, n = x_BKTN.shape
    page = t // blocks
    x = x_BKTN.reshape(d, b, heads, blocks, page, n).transpose(0, 2, 1, 3, 4, 5)
    x = x.reshape(d, heads, b * blocks, page, n).astype(pages_CKPSN.dtype)
    ids_CT = page_ids_CBT.reshape(d, b * blocks)
    return jax.vmap(lambda pages, ids, v: pages.at[:, ids].set(v))(pages_CKPSN, ids_CT, x)


def gather_pages(pages_KPSN, table_RT) -> jax.Array:
    """[2K, Y, T·page, N]: the pages each of Y tables names, in order (an XLA gather: every
    entry is read, null pages included)."""
    heads, _, page, n = pages_KPSN.shape
    y, t = table_RT.shape
    return jnp.take(pages_KPSN, table_RT, axis=1, mode="clip").reshape(heads, y, t * page, n)


def masked_scores(q_KRQN, k_KRSN, length_R) -> jax.Array:
    """Scaled scores [K, X, Q, S] float32 of X sets of Q queries over their keys, NEG_INF at
    slots past each set's length."""
    n = q_KRQN.shape[-1]
    scores = jnp.einsum("kxqn,kxsn->kxqs", q_KRQN, k_KRSN, preferred_element_type=jnp.float32)
    valid_RS = jnp.arange(k_KRSN.shape[2])[None, :] < length_R[:, None]
    return jnp.where(valid_RS[None, :, None, :], scores * (n**-0.5), NEG_INF)


class Partial(NamedTuple):
    """A softmax over part of a row's keys: its unnormalised output o [K, R, Q, N], running max
    m and sum l = sum(exp(score - m)) [K, R, Q], all float32."""

    o: jax.Array
    m: jax.Array
    l: jax.Array  # noqa: E741


def partial_attention(q_KRQN, kv_KRSN, length_R) -> Partial:
    """Softmax attention of R sets of Q queries over the first `length_R` of their keys and
    values (`kv_KRSN`: keys in heads [0, K), values in [K, 2K))."""
    kv = q_KRQN.shape[0]
    scores = masked_scores(q_KRQN, kv_KRSN[:kv], length_R)
    m = jnp.max(scores, axis=-1)
    p = jnp.exp(scores - m[..., None])
    v = kv_KRSN[kv:]
    o = jnp.einsum("krqs,krsn->krqn", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return Partial(o, m, jnp.sum(p, axis=-1))


def merge_partials(a: Partial, b: Partial) -> jax.Array:
    """The normalised output of the softmax over both parts' keys (their log-sum-exp merge); 0
    for a query with no key in either part (a slot without a row)."""
    m = jnp.maximum(a.m, b.m)
    wa, wb = jnp.exp(a.m - m), jnp.exp(b.m - m)
    total = a.l * wa + b.l * wb
    total = jnp.where(total > 0, total, 1.0)
    return (a.o * wa[..., None] + b.o * wb[..., None]) / total[..., None]


def part(q_KRQN, pages_KPSN, table_RT, length_R, kernel: str) -> Partial:
    """One part of the attention by `kernel` (see `PagedLayer`)."""
    if kernel == "xla":
        return partial_attention(q_KRQN, gather_pages(pages_KPSN, table_RT), length_R)
    if kernel == "pallas":
        from memr1.sampling.paged_kernel import paged_partial

        interpret = jax.default_backend() != "gpu"
        return Partial(*paged_partial(q_KRQN, pages_KPSN, table_RT, length_R,
                                      interpret=interpret))  # fmt: skip
    raise ValueError(f"engine.attention={kernel!r} is not one of {KERNELS}")


def paged_attention(q_RHN, pages_KPSN, rows: RowPages, lanes: int, kernel: str = "xla"):
    """One device's decode attention [R, H, N] (float32): the prompt part once per prompt slot
    for the queries of its `lanes` (G) lanes, the reply part per row, each a partial softmax
    (by `kernel`), merged by their log-sum-exp (as a flash-decoding kernel merges its splits).

    `rows` holds one device's slice (no C axis). A prompt's pages are gathered once for all of
    its rows, so a step reads each resident prompt once, not once per sample, and only the
    prompt part's [K, lanes·Hg, N] outputs, maxima and sums return to the rows.
    """
    r, h, n = q_RHN.shape
    kv = pages_KPSN.shape[0] // 2
    hg = h // kv
    slots = rows.prompt_table.shape[0]
    cells = slots * lanes
    q_KRGN = q_RHN.reshape(r, kv, hg, n).transpose(1, 0, 2, 3)
    # The prompt part on the [slots, lanes] grid: row (slot, sample) in lane slot·G + sample.
    q_grid = jnp.zeros((kv, cells, hg, n), q_RHN.dtype).at[:, rows.cell].set(q_KRGN, mode="drop")
    q_grid = q_grid.reshape(kv, slots, lanes * hg, n)
    on_grid = part(q_grid, pages_KPSN, rows.prompt_table, rows.prompt_len, kernel)

    def to_rows(x, empty):  # [K, slots, lanes·Hg, ...] -> [K, R, Hg, ...]
        x = x.reshape(kv, cells, hg, *x.shape[3:])
        return jnp.take(x, rows.cell, axis=1, mode="fill", fill_value=empty)

    # A slot without a row reads an empty part (no keys: max NEG_INF, sum 0), so that its merge
    # stays finite: what it writes lands in the null page, which every row reads (masked).
    prompt = Partial(to_rows(on_grid.o, 0), to_rows(on_grid.m, NEG_INF), to_rows(on_grid.l, 0))
    reply = part(q_KRGN, pages_KPSN, rows.reply_table, rows.reply_len, kernel)
    return merge_partials(prompt, reply).transpose(1, 0, 2, 3).reshape(r, h, n)
