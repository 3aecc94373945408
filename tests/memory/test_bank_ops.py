"""Bank operations one at a time: ids, versions, counters, the op log, overflow policies."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memr1 import memory as mem

# Odd, distinct sizes so a swapped axis shows up as a shape error.
M, C, E, L = 3, 7, 5, 6
APPLY = jax.jit(mem.apply_op)
MARK = jax.jit(mem.mark_retrieved)


def emb(value: float) -> np.ndarray:
    return np.full((E,), value, np.float32)


def run(bank, *ops):
    """Applies (kind, kwargs) pairs in order through the jitted apply_op."""
    for kind, kwargs in ops:
        bank = APPLY(bank, mem.make_op(bank, kind, **kwargs))
    return bank


def texts(bank) -> dict[int, str]:
    return {row["id"]: row["text"] for row in mem.text_view(bank)}


def fresh(overflow=mem.RAISE, log_capacity=L):
    return mem.empty_bank(M, C, E, log_capacity, overflow=overflow)


def test_empty_bank_shapes_and_dtypes():
    bank = fresh()
    assert bank.ids_M.shape == (M,) and bank.ids_M.dtype == jnp.int32
    assert bank.text_MC.shape == (M, C) and bank.text_MC.dtype == jnp.uint8
    assert bank.emb_ME.shape == (M, E) and bank.emb_ME.dtype == jnp.float32
    assert bank.valid_M.dtype == jnp.bool_ and not bank.valid_M.any()
    assert bank.log.old_text_LC.shape == (L, C)
    assert (bank.capacity, bank.text_bytes, bank.emb_dim, bank.log_capacity) == (M, C, E, L)
    assert mem.text_view(bank) == []


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"capacity": 0}, "capacity"),
        ({"text_bytes": 2.5}, "text_bytes"),
        ({"log_capacity": -1}, "log_capacity"),
        ({"overflow": "drop"}, "overflow policy 'drop'"),
    ],
)
def test_empty_bank_rejects_bad_config(kwargs, match):
    args = {"capacity": M, "text_bytes": C, "emb_dim": E, "log_capacity": L, **kwargs}
    with pytest.raises(ValueError, match=match):
        mem.empty_bank(**args)


def test_add_assigns_fresh_ids_and_fills_the_row():
    bank = run(
        fresh(),
        ("ADD", dict(text="tea", emb=emb(1), owner=4, timestamp=100, turn=0)),
        ("ADD", dict(text="coffee", emb=emb(2), owner=5, timestamp=200, turn=1)),
    )
    assert mem.text_view(bank) == [
        {"id": 0, "text": "tea", "owner": 4, "created": 100, "updated": 100, "version": 1},
        {"id": 1, "text": "coffee", "owner": 5, "created": 200, "updated": 200, "version": 1},
    ]
    slot = int(np.flatnonzero(np.asarray(bank.ids_M) == 1)[0])
    np.testing.assert_array_equal(bank.emb_ME[slot], emb(2))
    assert int(bank.next_id) == 2 and int(bank.counters.adds) == 2


def test_update_keeps_the_id_bumps_the_version_and_logs_the_old_text():
    bank = run(
        fresh(),
        ("ADD", dict(text="a dog", emb=emb(1), timestamp=100, turn=0)),
        ("UPDATE", dict(target=0, text="two dogs", emb=emb(3), timestamp=300, turn=4)),
    )
    (row,) = mem.text_view(bank)
    assert row == {"id": 0, "text": "two dog", "owner": 0, "created": 100, "updated": 300,
                   "version": 2}  # fmt: skip
    np.testing.assert_array_equal(bank.emb_ME[0], emb(3))
    assert int(bank.counters.truncations) == 1  # "two dogs" is 8 bytes, C is 7.
    history = mem.memory_history(bank, 0)
    assert [(h["kind"], h["turn"], h["old_text"], h["new_text"]) for h in history] == [
        ("ADD", 0, None, "a dog"),
        ("UPDATE", 4, "a dog", "two dog"),
    ]


def test_delete_removes_the_memory_and_its_id_is_never_reused():
    bank = run(
        fresh(),
        ("ADD", dict(text="x")),
        ("DELETE", dict(target=0, turn=2)),
        ("ADD", dict(text="y")),
    )
    assert texts(bank) == {1: "y"}
    assert mem.memory_history(bank, 0)[-1]["kind"] == "DELETE"
    assert mem.memory_history(bank, 0)[-1]["old_text"] == "x"


@pytest.mark.parametrize("kind", ["UPDATE", "DELETE"])
@pytest.mark.parametrize("target", [0, 7, -1])  # 0 is deleted below; 7 was never issued.
def test_unknown_or_deleted_ids_are_counted_noops(kind, target):
    bank = run(fresh(), ("ADD", dict(text="gone")), ("ADD", dict(text="kept")))
    bank = run(bank, ("DELETE", dict(target=0)))
    before = jax.device_get(bank)
    after = run(bank, (kind, dict(target=target, text="new")))
    assert texts(after) == {1: "kept"}
    assert int(after.counters.unknown_id) == 1
    np.testing.assert_array_equal(after.text_MC, before.text_MC)
    assert int(after.log.cursor) == int(before.log.cursor)


def test_empty_text_and_bad_kinds_are_counted_not_applied():
    bank = run(fresh(), ("ADD", dict(text="")), ("ADD", dict(text="x")), (9, {}), (-2, {}))
    bank = run(bank, ("UPDATE", dict(target=0, text="")), ("NOOP", {}), ("NONE", {}))
    assert texts(bank) == {0: "x"}
    counts = mem.counters(bank)
    assert (counts["empty_text"], counts["bad_kind"], counts["noops"]) == (2, 2, 2)
    assert (counts["adds"], counts["updates"]) == (1, 0)


def test_raise_policy_refuses_counts_and_the_host_raises_naming_capacity():
    bank = run(fresh(), *[("ADD", dict(text=str(i))) for i in range(M)])
    full = run(bank, ("ADD", dict(text="one more")))
    assert texts(full) == texts(bank)
    assert int(full.counters.refused_full) == 1
    with pytest.raises(mem.BankOverflowError, match=f"capacity {M} exceeded"):
        mem.raise_if_overflowed(full)
    mem.raise_if_overflowed(full, since=full)  # No new refusal since then: silent.
    with pytest.raises(mem.BankOverflowError, match="1 ADD op"):
        mem.apply_op_checked(bank, mem.make_op(bank, "ADD", text="z"))
    batched = mem.stack_banks([bank, full, bank])
    with pytest.raises(mem.BankOverflowError, match=r"in bank \(1,\) of batch \(3,\)"):
        mem.raise_if_overflowed(batched)


def test_evict_oldest_replaces_the_oldest_update_then_the_smallest_id():
    bank = run(
        fresh(mem.EVICT_OLDEST),
        ("ADD", dict(text="a", timestamp=50)),
        ("ADD", dict(text="b", timestamp=10)),
        ("ADD", dict(text="c", timestamp=10)),
    )
    bank = run(bank, ("ADD", dict(text="d", timestamp=60, turn=9)))
    assert texts(bank) == {0: "a", 2: "c", 3: "d"}  # b and c tie on time; b has the smaller id.
    assert mem.memory_history(bank, 1) == [
        {"seq": 1, "kind": "ADD", "id": 1, "turn": 0, "timestamp": 10, "old_text": None,
         "new_text": "b"},
        {"seq": 3, "kind": "EVICT", "id": 1, "turn": 9, "timestamp": 60, "old_text": "b",
         "new_text": None},
    ]  # fmt: skip
    bank = run(bank, ("UPDATE", dict(target=2, text="c2", timestamp=70)))
    bank = run(bank, ("ADD", dict(text="e", timestamp=80)))
    assert texts(bank) == {2: "c2", 3: "d", 4: "e"}  # a (50) is now older than c (70).
    assert int(bank.counters.evictions) == 2


def test_evict_lru_spares_recently_retrieved_memories():
    bank = run(fresh(mem.EVICT_LRU), *[("ADD", dict(text=t)) for t in "abc"])
    bank = MARK(bank, jnp.array([0, -1], jnp.int32), 7)
    assert np.asarray(bank.last_retrieved_M).tolist() == [7, -1, -1]
    bank = run(bank, ("ADD", dict(text="d")))
    assert texts(bank) == {0: "a", 2: "c", 3: "d"}  # 1 was used longest ago.
    bank = MARK(bank, jnp.array([2, 3, 99], jnp.int32), 8)  # 99 is absent: ignored.
    bank = run(bank, ("ADD", dict(text="e")))
    assert texts(bank) == {2: "c", 3: "d", 4: "e"}


def test_the_log_ring_counts_what_it_overwrites():
    bank = run(fresh(mem.EVICT_OLDEST, log_capacity=2), *[("ADD", dict(text=t)) for t in "abc"])
    assert [e["new_text"] for e in mem.op_log(bank)] == ["b", "c"]
    assert [e["seq"] for e in mem.op_log(bank)] == [1, 2]
    assert mem.counters(bank)["log_dropped"] == 1
    no_log = run(fresh(log_capacity=0), ("ADD", dict(text="a")), ("DELETE", dict(target=0)))
    assert mem.op_log(no_log) == [] and mem.counters(no_log)["log_dropped"] == 2


def test_growth_stats_follow_the_conversation():
    bank = run(
        fresh(mem.EVICT_OLDEST, log_capacity=3),
        ("ADD", dict(text="a", turn=0)),
        ("ADD", dict(text="b", turn=1)),
        ("ADD", dict(text="c", turn=1)),
        ("UPDATE", dict(target=0, text="A", turn=2)),
        ("DELETE", dict(target=1, turn=3)),
    )
    stats = mem.growth_stats(bank)
    assert stats["size"] == 2 and stats["capacity"] == M
    assert stats["counters"]["log_dropped"] == 2
    # Only turns 1..3 are still in the ring, and the sizes are still right.
    rows = [
        (r["turn"], r["adds"], r["updates"], r["deletes"], r["size"]) for r in stats["per_turn"]
    ]
    assert rows == [(1, 1, 0, 0, 3), (2, 0, 1, 0, 3), (3, 0, 0, 1, 2)]


def test_wrappers_equal_apply_op():
    bank = fresh()
    text_C, length, _ = mem.encode_text("hello", C)
    via_wrappers = jax.jit(
        lambda b: mem.noop(
            mem.delete(
                mem.update(
                    mem.add(b, text_C, length, emb(1), 3, 10, 0), 0, text_C, 2, emb(2), 11, 1
                ),
                5,
                12,
                2,
            )
        )
    )(bank)
    via_ops = run(
        bank,
        ("ADD", dict(text="hello", emb=emb(1), owner=3, timestamp=10, turn=0)),
        ("UPDATE", dict(target=0, text="he", emb=emb(2), timestamp=11, turn=1)),
        ("DELETE", dict(target=5, timestamp=12, turn=2)),
        ("NOOP", {}),
    )
    jax.tree.map(np.testing.assert_array_equal, via_wrappers, via_ops)


def test_host_views_want_one_bank():
    with pytest.raises(ValueError, match="unstack"):
        mem.text_view(mem.tile(fresh(), 2))


def test_make_op_validates_inputs():
    bank = fresh()
    with pytest.raises(ValueError, match="unknown op kind 'MERGE'"):
        mem.make_op(bank, "MERGE")
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        mem.make_op(bank, "ADD", text="x", emb=np.zeros(4))
    with pytest.raises(ValueError, match="timestamp 4294967296"):
        mem.make_op(bank, "ADD", text="x", timestamp=2**32)
