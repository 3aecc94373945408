"""Throughput of batched bank operations under jit: B banks x G candidate ops.

The RL manager stage tries G candidate ops on copies of each of B banks. Three ways of paying for
that are timed, each compiled once before timing:
  step        [B, G] banks in, one op each, banks donated (the buffers are updated in place);
  scan        [B, G] banks in, T ops each inside one call (``apply_ops``), banks donated;
  tile_apply  [B] banks in, tiled to [B, G] inside the call and one op each applied, which is
              the manager stage's real pattern (the copies are the cost).

``python -m memr1.memory.bench`` prints the table with the default sizes.
"""

from __future__ import annotations

import statistics
import time

import jax
import numpy as np

from memr1.memory.bank import ADD, DELETE, EVICT_LRU, NOOP, UPDATE, MemoryBank, empty_bank, tile
from memr1.memory.ops import Op, apply_op, apply_ops
from memr1.torchless import without_torch


def _random_ops(rng: np.random.Generator, shape: tuple[int, ...], bank: MemoryBank, max_id: int):
    """Random ops of every kind; targets are drawn from ids issued so far, so most resolve."""
    c, e = bank.text_bytes, bank.emb_dim
    length = rng.integers(1, c + 1, size=shape)
    text = rng.integers(32, 127, size=(*shape, c)).astype(np.uint8)
    text = np.where(np.arange(c) < length[..., None], text, 0).astype(np.uint8)
    return Op(
        kind=rng.choice([NOOP, ADD, UPDATE, DELETE], size=shape, p=[0.3, 0.4, 0.2, 0.1]).astype(
            np.int32
        ),
        target=rng.integers(0, max(max_id, 1), size=shape).astype(np.int32),
        text_C=text,
        length=length.astype(np.int32),
        emb_E=rng.standard_normal((*shape, e)).astype(np.float32),
        owner=rng.integers(0, 2, size=shape).astype(np.int32),
        timestamp=rng.integers(1_600_000_000, 1_700_000_000, size=shape).astype(np.int32),
        turn=rng.integers(0, 1000, size=shape).astype(np.int32),
        truncated=np.zeros(shape, bool),
    )


def _half_full_bank(rng, capacity, text_bytes, emb_dim, log_capacity, overflow) -> MemoryBank:
    bank = empty_bank(capacity, text_bytes, emb_dim, log_capacity, overflow=overflow)
    n = capacity // 2
    adds = _random_ops(rng, (n,), bank, 1)
    adds = adds.replace(kind=np.full((n,), ADD, np.int32))
    return jax.jit(apply_ops)(bank, adds)


def _time(fn, args_fn, repeats: int) -> float:
    """Median wall seconds of ``fn(*args_fn())``; args are rebuilt because banks are donated."""
    jax.block_until_ready(fn(*args_fn()))  # Compile and warm up.
    times = []
    for _ in range(repeats):
        args = args_fn()
        jax.block_until_ready(args)
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_bank_ops(
    batch: int = 32,
    group: int = 8,
    capacity: int = 256,
    emb_dim: int = 384,
    text_bytes: int = 256,
    log_capacity: int = 64,
    scan_steps: int = 16,
    repeats: int = 5,
    overflow: str = EVICT_LRU,
    seed: int = 0,
) -> list[dict]:
    """Times batched ``apply_op`` on the default backend.

    Returns:
      One dict per mode (step, scan, tile_apply) with the sizes, ``seconds`` (median per call),
      ``ops`` (ops per call) and ``ops_per_s``.
    """
    rng = np.random.default_rng(seed)
    one = _half_full_bank(rng, capacity, text_bytes, emb_dim, log_capacity, overflow)
    banks_B = tile(one, batch)
    max_id = int(one.next_id)

    def banks_BG():
        return (jax.jit(lambda b: jax.vmap(lambda x: tile(x, group))(b))(banks_B),)

    ops_BG = jax.device_put(_random_ops(rng, (batch, group), one, max_id))
    ops_BGT = jax.device_put(_random_ops(rng, (batch, group, scan_steps), one, max_id))
    step = jax.jit(jax.vmap(jax.vmap(apply_op)), donate_argnums=0)
    scan = jax.jit(jax.vmap(jax.vmap(apply_ops)), donate_argnums=0)
    tile_apply = jax.jit(jax.vmap(lambda bank, ops_G: jax.vmap(apply_op)(tile(bank, group), ops_G)))
    runs = [
        ("step", lambda b: step(b, ops_BG), banks_BG, batch * group),
        ("scan", lambda b: scan(b, ops_BGT), banks_BG, batch * group * scan_steps),
        ("tile_apply", lambda b: tile_apply(b, ops_BG), lambda: (banks_B,), batch * group),
    ]
    results = []
    for mode, fn, args_fn, n_ops in runs:
        seconds = _time(fn, args_fn, repeats)
        results.append(
            {
                "mode": mode,
                "B": batch,
                "G": group,
                "M": capacity,
                "E": emb_dim,
                "C": text_bytes,
                "L": log_capacity,
                "ops": n_ops,
                "seconds": seconds,
                "ops_per_s": n_ops / seconds,
            }
        )
    return results


def format_table(results: list[dict]) -> str:
    """A Markdown table of :func:`bench_bank_ops` results."""
    lines = [
        "| mode | B | G | M | E | C | L | ops/call | ms/call | ops/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['mode']} | {r['B']} | {r['G']} | {r['M']} | {r['E']} | {r['C']} | {r['L']} "
            f"| {r['ops']} | {1e3 * r['seconds']:.2f} | {r['ops_per_s']:,.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    without_torch()
    print(f"backend: {jax.default_backend()}, devices: {jax.devices()}")
    print(format_table(bench_bank_ops()))
