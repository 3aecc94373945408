"""Batches of banks: stack / unstack / tile, vmap over banks and over G candidate ops, scan."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memr1 import memory as mem

M, C, E, L = 5, 11, 3, 7
# The loops below use one jitted apply_op (compiled once per overflow policy): eager lax.switch
# would re-dispatch every primitive and dominate the test time.
APPLY = jax.jit(mem.apply_op)


def assert_banks_equal(a, b):
    assert a.overflow == b.overflow
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(a), jax.device_get(b))


def seeded_bank(overflow=mem.EVICT_OLDEST):
    bank = mem.empty_bank(M, C, E, L, overflow=overflow)
    for i, text in enumerate(["ann", "bob", "cat", "dan"]):
        bank = APPLY(bank, mem.make_op(bank, "ADD", text=text, timestamp=i, turn=i))
    return APPLY(bank, mem.make_op(bank, "DELETE", target=1, turn=4))


def candidate_ops(bank):
    """One op of every kind, including ones that must be counted rather than applied."""
    return [
        mem.make_op(bank, "ADD", text="new", emb=np.ones(E), timestamp=9, turn=5),
        mem.make_op(bank, "UPDATE", target=2, text="cat2", timestamp=9, turn=5),
        mem.make_op(bank, "DELETE", target=3, turn=5),
        mem.make_op(bank, "NOOP"),
        mem.make_op(bank, "UPDATE", target=1, text="stale", turn=5),  # 1 was deleted.
        mem.make_op(bank, 6),
    ]


def test_vmap_over_candidate_ops_on_copies_of_one_bank_equals_a_loop():
    bank = seeded_bank()
    ops = candidate_ops(bank)
    batched = jax.jit(jax.vmap(mem.apply_op))(mem.tile(bank, len(ops)), mem.stack_ops(ops))
    for g, got in enumerate(mem.unstack(batched)):
        assert_banks_equal(got, APPLY(bank, ops[g]))


def test_vmap_over_a_batch_of_banks_equals_a_loop():
    banks = [seeded_bank(), mem.empty_bank(M, C, E, L, overflow=mem.EVICT_OLDEST), seeded_bank()]
    banks[2] = APPLY(banks[2], mem.make_op(banks[2], "ADD", text="extra"))
    ops = candidate_ops(banks[0])[:3]
    batched = jax.jit(jax.vmap(mem.apply_op))(mem.stack_banks(banks), mem.stack_ops(ops))
    for bank, op, got in zip(banks, ops, mem.unstack(batched)):
        assert_banks_equal(got, APPLY(bank, op))


def test_nested_vmap_over_banks_and_candidates():
    banks = mem.stack_banks([seeded_bank(), seeded_bank(mem.EVICT_OLDEST)])
    ops = candidate_ops(seeded_bank())[:4]
    ops_BG = jax.tree.map(lambda x: np.stack([x, x[::-1]]), mem.stack_ops(ops))
    tiled_BG = jax.vmap(lambda b: mem.tile(b, len(ops)))(banks)
    out_BG = jax.jit(jax.vmap(jax.vmap(mem.apply_op)))(tiled_BG, ops_BG)
    assert out_BG.ids_M.shape == (2, len(ops), M)
    for b, row in enumerate(mem.unstack(out_BG)):
        for g, got in enumerate(mem.unstack(row)):
            op = jax.tree.map(lambda x, b=b, g=g: x[b, g], ops_BG)
            assert_banks_equal(got, APPLY(mem.unstack(banks)[b], op))


def test_apply_ops_scan_equals_a_loop():
    bank = seeded_bank(mem.EVICT_LRU)
    ops = candidate_ops(bank) * 2
    looped = bank
    for op in ops:
        looped = APPLY(looped, op)
    assert_banks_equal(jax.jit(mem.apply_ops)(bank, mem.stack_ops(ops)), looped)


def test_stack_unstack_tile_round_trip():
    a, b = seeded_bank(), mem.empty_bank(M, C, E, L, overflow=mem.EVICT_OLDEST)
    stacked = mem.stack_banks([a, b])
    assert stacked.batch_shape == (2,) and stacked.text_MC.shape == (2, M, C)
    back = mem.unstack(stacked)
    assert_banks_equal(back[0], a)
    assert_banks_equal(back[1], b)
    tiled = mem.tile(stacked, 4)
    assert tiled.batch_shape == (4, 2)
    assert_banks_equal(mem.unstack(mem.unstack(tiled)[3])[0], a)


def test_stack_refuses_mixed_configs():
    with pytest.raises(ValueError, match="differs from bank 0"):
        mem.stack_banks([seeded_bank(mem.RAISE), seeded_bank(mem.EVICT_LRU)])
    with pytest.raises(ValueError, match="no batch axis"):
        mem.unstack(seeded_bank())


def test_vmapped_mark_retrieved_matches_per_bank():
    banks = [seeded_bank(mem.EVICT_LRU), seeded_bank(mem.EVICT_LRU)]
    ids_BK = jnp.array([[0, 2], [3, -1]], jnp.int32)
    got = jax.vmap(mem.mark_retrieved)(mem.stack_banks(banks), ids_BK, jnp.array([4, 5]))
    for i, bank in enumerate(banks):
        assert_banks_equal(mem.unstack(got)[i], mem.mark_retrieved(bank, ids_BK[i], 4 + i))


@pytest.mark.parametrize("overflow", mem.OVERFLOW_POLICIES)
def test_production_sizes_trace_without_allocating(overflow):
    """B=32 banks x G=8 candidates at M=256, C=256, E=384: shapes only, via eval_shape."""
    b, g, m, c, e, n_log = 32, 8, 256, 256, 384, 512
    bank = jax.eval_shape(lambda: mem.empty_bank(m, c, e, n_log, overflow=overflow))
    bank_BG = jax.tree.map(lambda x: jax.ShapeDtypeStruct((b, g, *x.shape), x.dtype), bank)
    op = mem.make_op(mem.empty_bank(1, c, e, 0), "ADD", text="x")
    op_BG = jax.tree.map(lambda x: jax.ShapeDtypeStruct((b, g, *x.shape), x.dtype), op)
    out = jax.eval_shape(jax.vmap(jax.vmap(mem.apply_op)), bank_BG, op_BG)
    assert out.emb_ME.shape == (b, g, m, e) and out.log.new_text_LC.shape == (b, g, n_log, c)
    assert out.emb_ME.dtype == jnp.float32 and out.counters.adds.dtype == jnp.int32
