"""Random op sequences through the jitted apply_op, checked against a pure-Python model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memr1 import memory as mem

from .reference import RefBank

# A tiny bank so that sequences fill it, evict, wrap the log and truncate text often.
M, C, E, L, K = 4, 6, 3, 5, 2
APPLY = jax.jit(mem.apply_op)
MARK = jax.jit(mem.mark_retrieved)
VMAP_APPLY = jax.jit(jax.vmap(mem.apply_op))

texts = st.text(alphabet="ab é€🙂", max_size=5)
# Targets are drawn relative to the next id to be issued (target = next_id - 1 - back), so most
# name a recent memory, some a deleted or evicted one, and back < 0 names an id never issued.
backs = st.one_of(st.integers(0, 2), st.integers(-2, 6))
# Every step draws all fields and uses the ones its kind needs; the repeated names weight the
# mix towards ADD and UPDATE, so banks fill up, evict, refuse and wrap the log within a sequence.
op_steps = st.fixed_dictionaries(
    {
        "name": st.sampled_from(
            ["ADD"] * 5 + ["UPDATE"] * 3 + ["DELETE", "NOOP", "BAD"] + ["RETRIEVE"] * 2
        ),  # fmt: skip
        "text": texts,
        "owner": st.integers(0, 3),
        "ts": st.integers(0, 4),
        "back": backs,
        "retrieved": st.lists(backs, min_size=K, max_size=K),
        "bad_kind": st.sampled_from([-1, 4, 17]),
    }
)
sequences = st.lists(op_steps, min_size=12, max_size=40)
policies = st.sampled_from(mem.OVERFLOW_POLICIES)


def to_op(bank, step: dict, turn: int, next_id: int):
    """(Op, args for RefBank.apply) for one step; a RETRIEVE step becomes a NOOP here."""
    kind = {"ADD": mem.ADD, "UPDATE": mem.UPDATE, "DELETE": mem.DELETE}.get(step["name"], mem.NOOP)
    kind = step["bad_kind"] if step["name"] == "BAD" else kind
    target = next_id - 1 - step["back"] if kind in (mem.UPDATE, mem.DELETE) else -1
    text = step["text"] if kind in (mem.ADD, mem.UPDATE) else ""
    owner, ts = step["owner"], step["ts"]
    emb = np.array([turn, turn + 0.5, -turn], np.float32)
    op = mem.make_op(bank, kind, text=text, emb=emb, target=target, owner=owner, timestamp=ts,
                     turn=turn)  # fmt: skip
    return op, (kind, target, text, emb, owner, ts, turn)


def check_against_reference(bank, ref: RefBank) -> None:
    view = mem.text_view(bank)
    assert view == ref.view()
    valid_ids = [row["id"] for row in view]
    assert len(valid_ids) == len(set(valid_ids)) <= M
    assert not set(valid_ids) & ref.gone, "a deleted or evicted id came back"
    host = jax.device_get(bank)
    for slot in np.flatnonzero(host.valid_M):
        np.testing.assert_array_equal(host.emb_ME[slot], ref.memories[host.ids_M[slot]].emb)
    counts = mem.counters(bank)
    assert {k: counts[k] for k in ref.counts} == ref.counts
    assert counts["log_dropped"] == max(len(ref.log) - L, 0)
    logged = [{k: e[k] for k in ("kind", "id", "turn", "timestamp", "old_text", "new_text")}
              for e in mem.op_log(bank)]  # fmt: skip
    assert logged == ref.log[-L:]
    assert int(host.next_id) == ref.next_id


@settings(max_examples=40, deadline=None)
@given(overflow=policies, steps=sequences)
def test_random_sequences_match_the_reference_model(overflow, steps):
    bank = mem.empty_bank(M, C, E, L, overflow=overflow)
    ref = RefBank(M, C, overflow)
    for turn, step in enumerate(steps):
        if step["name"] == "RETRIEVE":
            retrieved = [ref.next_id - 1 - back for back in step["retrieved"]]
            bank = MARK(bank, jnp.asarray(retrieved, jnp.int32), turn)
            ref.retrieve(retrieved)
            continue
        before = {row["id"]: row for row in mem.text_view(bank)}
        op, args = to_op(bank, step, turn, ref.next_id)
        bank = APPLY(bank, op)
        ref.apply(*args)
        target, text = args[1], args[2]
        if step["name"] == "UPDATE" and target in before and text:
            (row,) = [r for r in mem.text_view(bank) if r["id"] == target]
            assert row["version"] == before[target]["version"] + 1
            assert row["text"] == mem.decode_text(*mem.encode_text(text, C)[:2])
        check_against_reference(bank, ref)


@settings(max_examples=10, deadline=None)
@given(
    overflow=policies,
    prefix=st.lists(st.lists(op_steps, min_size=8, max_size=8), min_size=3, max_size=3),
    # As many candidates as banks, so the vmapped apply_op compiles once per policy.
    candidates=st.lists(op_steps, min_size=3, max_size=3),
)
def test_vmap_over_banks_and_candidates_equals_a_python_loop(overflow, prefix, candidates):
    """Three banks follow their own sequences in lockstep under vmap; then three candidate ops
    are tried on copies of the first bank, as the RL manager stage does."""
    empty = mem.empty_bank(M, C, E, L, overflow=overflow)
    banks = [empty] * 3
    batched = mem.stack_banks(banks)
    for turn in range(8):
        # RETRIEVE is not an Op: to_op turns it into a NOOP, so every bank takes one op per step.
        steps = [seq[turn] for seq in prefix]
        ops = [to_op(empty, step, turn, int(bank.next_id))[0] for step, bank in zip(steps, banks)]
        banks = [APPLY(bank, op) for bank, op in zip(banks, ops)]
        batched = VMAP_APPLY(batched, mem.stack_ops(ops))
    for got, want in zip(mem.unstack(batched), banks):
        jax.tree.map(np.testing.assert_array_equal, jax.device_get(got), jax.device_get(want))
    cand_ops = [to_op(empty, step, 8, int(banks[0].next_id))[0] for step in candidates]
    tried = VMAP_APPLY(mem.tile(banks[0], len(cand_ops)), mem.stack_ops(cand_ops))
    for got, op in zip(mem.unstack(tried), cand_ops):
        want = APPLY(banks[0], op)
        jax.tree.map(np.testing.assert_array_equal, jax.device_get(got), jax.device_get(want))
