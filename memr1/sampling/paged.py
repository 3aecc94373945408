"""The rollout engine's KV cache: fixed-size pages in one pool per layer, and decode attention
over a prompt's pages (read once for all of its samples) and each row's reply pages.

Memory layout, per layer (D = data × fsdp devices that decode rows, one slice each):
  k_pages, v_pages  [D, K, P, page, N]: P pages of `page` token slots per device, kv-head-major,
                    so gathered pages are a plain batch of [S, N] matrices per kv head (the
                    layout of `jax.experimental.pallas.ops.gpu.paged_attention`). Page 0 is the
                    null page: never handed out, written by rows that write nothing, read only
                    under a false mask.
Both parts are filled from their token 0, token j at page j // page, slot j % page:
  prompt_table [D, PS + 1, Tp]  the pages of the prompt in each of PS prompt slots (the last
                                slot is a dummy that holds none). A prompt is stored once,
                                whatever G is, and stays until its last sample ends.
  reply_table  [D, R, Tr]       each decode slot's reply pages, as many as its live length
                                needs (the scheduler, `memr1.sampling.scheduler`, hands them
                                out a round ahead).
Entries past a part's length name the null page.

A decode step writes each row's new key and value at reply slot `reply_len - 1`, then attends
in two parts, cascade style: the prompt part once per prompt slot, whose keys meet the queries
of all its rows at once (a [PS + 1, G] grid of lanes, row (slot, sample) in lane
slot·G + sample), and the reply part per row. Each part is a partial softmax (its max m, its sum
l and its unnormalised output o); they merge by their log-sum-exp, as a flash-decoding kernel
merges its splits. A step thus reads a resident prompt once, not once per sample. Each part
masks slots past its length, so a row reads the same values whatever its pages' neighbours
hold. This is the XLA path (any backend): it gathers every entry of both tables, null pages
included, so its reads follow the tables' widths (the engine sizes the reply table per round to
the longest live reply).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from memr1.models.attention import NEG_INF

NULL_PAGE = 0


class RowPages(NamedTuple):
    """Where the KV of each decode slot lives (shared by every layer of one decode step).

    Prompts sit in prompt slots (PS per device, the last one a dummy that holds no prompt); a
    row names its prompt's slot and its lane there (its sample index), so the queries of the
    rows of one prompt meet that prompt's keys in one [PS + 1, G] grid of lanes.

    prompt_table: [D, PS + 1, Tp] int32 page ids of each prompt slot's prompt.
    prompt_len: [D, PS + 1] int32 its tokens (0 for an empty slot).
    cell: [D, R] int32 the row's lane in the grid, prompt slot × G + sample (rows that hold
      nothing point into the dummy slot).
    reply_table: [D, R, Tr] int32 page ids of the row's reply.
    reply_len: [D, R] int32 reply tokens whose KV is cached once this step has written its own.
    write: [D, R] bool: the slot holds a live row (others write to the null page).
    """

    prompt_table: jax.Array
    prompt_len: jax.Array
    cell: jax.Array
    reply_table: jax.Array
    reply_len: jax.Array
    write: jax.Array


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["k_pages", "v_pages", "rows"],
    meta_fields=["lanes"],
)
@dataclasses.dataclass(frozen=True)
class PagedLayer:
    """One layer's pages and the rows' view of them: a cache that `transformer.forward` hands
    to its attention in place of a dense [B, K, S, N] buffer (see `attend`)."""

    k_pages: jax.Array  # [D, K, P, page, N]
    v_pages: jax.Array  # [D, K, P, page, N]
    rows: RowPages
    lanes: int  # G: lanes of a prompt slot (static)

    def attend(self, q_BTHN, k_BTKN, v_BTKN) -> tuple[jax.Array, PagedLayer]:
        """Writes one step's keys and values (T = 1, B = D·R slots, device-major) at each row's
        reply slot, then attends over the row's prompt and reply pages. Returns the attention
        output [B, 1, H, N] and the layer with its pages updated."""
        b, t, h, n = q_BTHN.shape
        d, r = self.rows.cell.shape
        if t != 1 or b != d * r:
            raise ValueError(f"a paged decode step takes [{d * r}, 1] queries, got [{b}, {t}]")
        kv = k_BTKN.shape[2]
        dtype = self.k_pages.dtype
        k_DRKN = k_BTKN.reshape(d, r, kv, n).astype(dtype)
        v_DRKN = v_BTKN.reshape(d, r, kv, n).astype(dtype)
        page_size = self.k_pages.shape[3]
        pos_DR = jnp.maximum(self.rows.reply_len - 1, 0)
        page_DR = jnp.take_along_axis(
            self.rows.reply_table, (pos_DR // page_size)[..., None], -1, mode="clip"
        )
        page_DR = jnp.where(self.rows.write, page_DR[..., 0], NULL_PAGE)
        write = jax.vmap(write_token)
        k_pages = write(self.k_pages, page_DR, pos_DR % page_size, k_DRKN)
        v_pages = write(self.v_pages, page_DR, pos_DR % page_size, v_DRKN)
        attention = functools.partial(paged_attention_xla, lanes=self.lanes)
        out_DRHN = jax.vmap(attention)(q_BTHN.reshape(d, r, h, n), k_pages, v_pages, self.rows)
        new = dataclasses.replace(self, k_pages=k_pages, v_pages=v_pages)
        return out_DRHN.reshape(b, 1, h, n).astype(v_BTKN.dtype), new


def write_token(pages_KPSN, page_R, slot_R, x_RKN) -> jax.Array:
    """One device's pages with row r's [K, N] vector written at (page_R[r], slot_R[r])."""
    return pages_KPSN.at[:, page_R, slot_R, :].set(x_RKN.transpose(1, 0, 2))


def write_prompt_pages(pages_DKPSN, cache_BKTN, page_ids_DBT) -> jax.Array:
    """Pages with a prefill's dense cache scattered into them.

    Args:
      pages_DKPSN: [D, K, P, page, N] the pool of one layer's keys (or values).
      cache_BKTN: [D·B, K, T, N] the prefill's cache, token j of each prompt at column j, T a
        multiple of the page size; device-major rows.
      page_ids_DBT: [D, B, T / page] the page that takes each page-sized block of columns
        (the null page for blocks past a prompt's tokens).
    """
    d, b, blocks = page_ids_DBT.shape
    _, kv, t, n = cache_BKTN.shape
    page = t // blocks
    x = cache_BKTN.reshape(d, b, kv, blocks, page, n).transpose(0, 2, 1, 3, 4, 5)
    x = x.reshape(d, kv, b * blocks, page, n).astype(pages_DKPSN.dtype)
    ids_DX = page_ids_DBT.reshape(d, b * blocks)
    return jax.vmap(lambda pages, ids, v: pages.at[:, ids].set(v))(pages_DKPSN, ids_DX, x)


def gather_pages(pages_KPSN, table_XT) -> jax.Array:
    """[K, X, T·page, N]: the pages each of X tables names, in order (an XLA gather: every
    entry is read, null pages included)."""
    kv, _, page, n = pages_KPSN.shape
    x, t = table_XT.shape
    return jnp.take(pages_KPSN, table_XT, axis=1, mode="clip").reshape(kv, x, t * page, n)


def masked_scores(q_KXQN, k_KXSN, length_X) -> jax.Array:
    """Scaled scores [K, X, Q, S] float32 of X sets of Q queries over their keys, NEG_INF at
    slots past each set's length."""
    n = q_KXQN.shape[-1]
    scores = jnp.einsum("kxqn,kxsn->kxqs", q_KXQN, k_KXSN, preferred_element_type=jnp.float32)
    valid_XS = jnp.arange(k_KXSN.shape[2])[None, :] < length_X[:, None]
    return jnp.where(valid_XS[None, :, None, :], scores * (n**-0.5), NEG_INF)


def paged_attention_xla(q_RHN, k_KPSN, v_KPSN, rows: RowPages, lanes: int) -> jax.Array:
    """One device's decode attention [R, H, N] (float32): one softmax over each row's prompt
    keys and reply keys, the prompt's scores and weighted values computed once per prompt slot
    for the queries of its `lanes` (G) lanes, the reply's per row.

    `rows` holds one device's slice (no D axis). A prompt's pages are gathered once for all of
    its rows, so a step reads each resident prompt once, not once per sample. The softmax is
    taken over the row's scores of both parts at once, as a dense cache's would be (a kernel
    that never holds all of a row's scores merges per-part softmaxes by their log-sum-exp
    instead: the same function, other rounding).
    """
    r, h, n = q_RHN.shape
    kv = k_KPSN.shape[0]
    hg = h // kv
    slots = rows.prompt_table.shape[0]
    cells = slots * lanes
    q_KRGN = q_RHN.reshape(r, kv, hg, n).transpose(1, 0, 2, 3)
    # The prompt part on the [slots, lanes] grid: row (slot, sample) in lane slot·G + sample.
    q_grid = jnp.zeros((kv, cells, hg, n), q_RHN.dtype).at[:, rows.cell].set(q_KRGN)
    q_grid = q_grid.reshape(kv, slots, lanes * hg, n)
    k_prompt = gather_pages(k_KPSN, rows.prompt_table)
    s_prompt = masked_scores(q_grid, k_prompt, rows.prompt_len)
    s_prompt = jnp.take(s_prompt.reshape(kv, cells, hg, -1), rows.cell, axis=1, mode="clip")
    k_reply = gather_pages(k_KPSN, rows.reply_table)
    s_reply = masked_scores(q_KRGN, k_reply, rows.reply_len)
    split = s_prompt.shape[-1]
    probs = jax.nn.softmax(jnp.concatenate([s_prompt, s_reply], axis=-1), axis=-1)
    dtype = v_KPSN.dtype
    p_prompt = probs[..., :split].astype(dtype)
    p_grid = jnp.zeros((kv, cells, hg, split), dtype).at[:, rows.cell].set(p_prompt)
    p_grid = p_grid.reshape(kv, slots, lanes * hg, split)
    v_prompt = gather_pages(v_KPSN, rows.prompt_table)
    o_grid = jnp.einsum("kxqs,kxsn->kxqn", p_grid, v_prompt, preferred_element_type=jnp.float32)
    o_prompt = jnp.take(o_grid.reshape(kv, cells, hg, n), rows.cell, axis=1, mode="clip")
    v_reply = gather_pages(v_KPSN, rows.reply_table)
    o_reply = jnp.einsum(
        "krgs,krsn->krgn", probs[..., split:].astype(dtype), v_reply,
        preferred_element_type=jnp.float32,
    )  # fmt: skip
    return (o_prompt + o_reply).transpose(1, 0, 2, 3).reshape(r, h, n)
