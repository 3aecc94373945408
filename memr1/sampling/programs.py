"""The rollout engine's compiled programs: a prefill into pages, and a round of decode steps.

Both are pure functions of the weights, the page pool (`memr1.sampling.paged`, donated: XLA
updates it in place) and small per-row arrays the host scheduler builds. Rows are device-major
[C·R, ...] and the pool [C, 2K, P, page, N]; under a row split (`memr1.sampling.layout`) each
data × fsdp device holds its own C slice of both, so a device reads and writes only its own
pages.

Keys: a row's tokens are drawn with fold_in(fold_in(fold_in(key, prompt), sample), position),
position 0 being its first generated token (drawn by the prefill). A row's reply therefore
depends on the run's key, its prompt's index and its sample index only, not on its slot, the
slot count or which rows share its batch.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from memr1.models import transformer
from memr1.models.config import ModelConfig
from memr1.models.masks import causal_mask, positions_from_valid
from memr1.sampling import stopping
from memr1.sampling.logits_processing import choose_tokens
from memr1.sampling.output import splitter
from memr1.sampling.paged import PagedLayer, RowPages, write_prompt_pages

Pool = list[jax.Array]  # per layer [C, 2K, P, page, N]: keys, then values


def row_keys(key: jax.Array, prompt_R: jax.Array, sample_R: jax.Array) -> jax.Array:
    """[R] PRNG keys fold_in(fold_in(key, prompt), sample): one stream per (prompt, sample)."""
    by_prompt = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, prompt_R)
    return jax.vmap(jax.random.fold_in)(by_prompt, sample_R)


def new_pool(cfg: ModelConfig, devices: int, pages: int, page: int, dtype, sharding) -> Pool:
    """A zeroed pool of `pages` pages a device, per layer, placed by `sharding` (or default)."""
    shape = (devices, 2 * cfg.n_kv_heads, pages, page, cfg.head_dim)
    return _pool_fn(cfg.n_layers, shape, jnp.dtype(dtype).name, sharding)()


@functools.lru_cache(maxsize=16)
def _pool_fn(layers: int, shape: tuple, dtype: str, sharding):
    def make():
        return [jnp.zeros(shape, dtype) for _ in range(layers)]

    return jax.jit(make, out_shardings=sharding)


class Programs:
    """The jitted prefill and round of one backbone (compiled once per shape bucket)."""

    def __init__(self, cfg: ModelConfig, graphdef: Any, pad_id: int):
        self.cfg = cfg
        self.graphdef = graphdef
        self.pad_id = pad_id
        static = ("num_samples", "greedy", "top_k", "use_top_p", "row_split")
        self.prefill = jax.jit(self._prefill, static_argnames=static, donate_argnames=("pool",))
        static = ("steps", "num_samples", "kernel", "greedy", "top_k", "use_top_p", "row_split")
        self.round = jax.jit(self._round, static_argnames=static, donate_argnames=("pool",))

    def compiled(self) -> int:
        """Programs compiled so far (prefill and round together)."""
        return self.prefill._cache_size() + self.round._cache_size()

    def _choose(self, greedy, temperature, top_k, top_p, use_top_p):
        return functools.partial(
            choose_tokens,
            greedy=greedy,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p if use_top_p else None,
        )

    def _prefill(
        self, params, pool: Pool, tokens_BT, lengths_B, page_ids_CBT, prompt_B, key,
        temperature, top_p, stops: stopping.StopSet, *, num_samples: int, greedy: bool,
        top_k: int | None, use_top_p: bool, row_split,
    ):  # fmt: skip
        """Prefills B = C·Bp left-padded prompts, writes their KV into their pages (token 0
        first) and draws the first token of each of their G samples.

        The forward pass is the reference sampler's (`Sampler._prefill`: left padding, the
        last column's logits), so a first token's log-prob is the reference's to the bit.

        Returns (pool, tokens [B, G], log-probs [B, G], stopped [B, G]: the first token ends
        the row by itself).
        """
        split = splitter(row_split)
        graphdef = transformer.without_remat(self.graphdef, params)
        tokens_BT, lengths_B = split(tokens_BT), split(lengths_B)
        b, t = tokens_BT.shape
        valid_BT = jnp.arange(t)[None, :] >= (t - lengths_B)[:, None]
        cache = transformer.init_cache(self.cfg, b, t, pool[0].dtype)
        cache = jax.tree.map(split, cache)
        h_BTD, cache = transformer.forward(
            graphdef,
            params,
            tokens_BT,
            positions_from_valid(valid_BT),
            causal_mask(valid_BT),
            cache,
            0,
        )
        logits_BV = transformer.logits_fn(graphdef, params, h_BTD[:, -1:])[:, 0]
        # Column t - length + j holds token j: roll each row so that token 0 leads its pages.
        from_B1T1 = ((jnp.arange(t)[None, :] + t - lengths_B[:, None]) % t)[:, None, :, None]
        roll = functools.partial(jnp.take_along_axis, indices=from_B1T1, axis=2)
        page_ids_CBT = split(page_ids_CBT)
        pool = [
            split(write_prompt_pages(pages, jax.tree.map(roll, new), page_ids_CBT))
            for pages, new in zip(pool, cache, strict=True)
        ]
        g = num_samples
        keys_R = row_keys(key, jnp.repeat(prompt_B, g), jnp.tile(jnp.arange(g), b))
        keys_R = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys_R, 0)
        choose = self._choose(greedy, temperature, top_k, top_p, use_top_p)
        token_R, logp_R = choose(jnp.repeat(logits_BV, g, axis=0), keys_R)
        tail_RW = stopping.push_tail(stopping.empty_tail(b * g, stops.window), token_R)
        stop_R = stopping.hits_stop(token_R, tail_RW, stops)
        return pool, token_R.reshape(b, g), logp_R.reshape(b, g), stop_R.reshape(b, g)

    def _round(
        self, params, pool: Pool, rows: dict, key, temperature, top_p, stops: stopping.StopSet,
        max_new, refill_at, *, steps: int, num_samples: int, kernel: str, greedy: bool,
        top_k: int | None, use_top_p: bool, row_split,
    ):  # fmt: skip
        """Up to `steps` decode steps over C·R slots.

        `rows` (from `Scheduler.round_inputs`): token [S] (each row's newest token, fed first),
        length [S] (tokens generated, >= 1), tail [S, W] (its last W tokens, -1 before the
        first), active [S], prompt_len, prompt_id (what its keys fold in), sample [S]; the
        row's lane cell [C, R] and reply_table [C, R, Tr]; each prompt slot's prompt_table
        [C, PS, Tp] and prompt_slot_len [C, PS]. The round ends after `steps` steps,
        when no row is active, or once `refill_at` rows have ended (so that waiting rows take
        their slots).

        Returns (pool, tokens [S, steps], log-probs [S, steps] (column i: step i's token, pad
        and 0 where the row was not active), length [S], active [S], stopped [S], steps run,
        active row-steps).
        """
        split = splitter(row_split)
        graphdef = transformer.without_remat(self.graphdef, params)
        rows = {k: split(v) for k, v in rows.items()}
        d, r = rows["cell"].shape
        keys_R = row_keys(key, rows["prompt_id"], rows["sample"])
        choose = self._choose(greedy, temperature, top_k, top_p, use_top_p)
        pad = jnp.int32(self.pad_id)
        s = d * r

        def cond(carry):
            i, _, _, _, _, active_R, _, _, _, ended, _ = carry
            return (i < steps) & jnp.any(active_R) & (ended < refill_at)

        def body(carry):
            i, pool, token_R, length_R, tail_RW, active_R, stopped_R, toks, logps, ended, live = (
                carry
            )
            pool, logits_RV = _decode_step(
                graphdef, params, pool, rows, token_R, length_R, active_R,
                num_samples=num_samples, kernel=kernel, row_split=row_split,
            )  # fmt: skip
            step_keys = jax.vmap(jax.random.fold_in)(keys_R, length_R)
            new_R, logp_R = choose(logits_RV, step_keys)
            new_R = jnp.where(active_R, new_R, pad)
            logp_R = jnp.where(active_R, logp_R, 0.0)
            toks = jax.lax.dynamic_update_slice(toks, new_R[:, None], (0, i))
            logps = jax.lax.dynamic_update_slice(logps, logp_R[:, None], (0, i))
            length_R = length_R + active_R.astype(jnp.int32)
            tail_RW = jnp.where(active_R[:, None], stopping.push_tail(tail_RW, new_R), tail_RW)
            stop_R = active_R & stopping.hits_stop(new_R, tail_RW, stops)
            ends_R = stop_R | (active_R & (length_R >= max_new))
            live = live + jnp.sum(active_R, dtype=jnp.int32)
            ended = ended + jnp.sum(ends_R, dtype=jnp.int32)
            carry = (i + 1, pool, new_R, length_R, tail_RW, active_R & ~ends_R,
                     stopped_R | stop_R, toks, logps, ended, live)  # fmt: skip
            return carry

        carry = (
            jnp.int32(0),
            pool,
            rows["token"],
            rows["length"],
            rows["tail"],
            rows["active"],
            jnp.zeros((s,), bool),
            split(jnp.full((s, steps), pad, jnp.int32)),
            split(jnp.zeros((s, steps), jnp.float32)),
            jnp.int32(0),
            jnp.int32(0),
        )
        i, pool, _, length_R, _, active_R, stopped_R, toks, logps, _, live = jax.lax.while_loop(
            cond, body, carry
        )
        return pool, toks, logps, length_R, active_R, stopped_R, i, live


def _decode_step(
    graphdef, params, pool: Pool, rows: dict, token_R, length_R, active_R, *,
    num_samples: int, kernel: str, row_split,
):  # fmt: skip
    """One decode step of every slot through the paged pool: (pool, logits [S, V])."""
    d, r = rows["cell"].shape
    view = RowPages(
        rows["prompt_table"],
        rows["prompt_slot_len"],
        rows["cell"],
        rows["reply_table"],
        length_R.reshape(d, r),
        active_R.reshape(d, r),
    )
    cache = [PagedLayer(pages, view, num_samples, kernel, row_split) for pages in pool]
    positions_R1 = (rows["prompt_len"] + length_R - 1)[:, None]
    h_R1D, cache = transformer.forward(
        graphdef, params, token_R[:, None], positions_R1, None, cache, 0
    )
    split = splitter(row_split)
    pool = [split(c.pages) for c in cache]
    return pool, transformer.logits_fn(graphdef, params, h_R1D)[:, 0]
