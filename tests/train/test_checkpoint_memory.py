"""An asynchronous save keeps nothing on the devices while it writes: the next (donating) step
runs in the state's own buffers, and what is written is the state as it was saved.

Live device bytes are read from `jax.live_arrays()`, each buffer once (Orbax's per-shard views
of an array are Array objects of their own over the same buffer) and in device memory only (the
save's copy is in the host memory space). Orbax's write is held at a gate until the step has run
and been measured, so the measurement is taken while the save is in flight, every time. Without
the host copy (`memr1.train.host_memory.host_copy`) the step ran beside a second state: 2x the
state on CPU.
"""

from __future__ import annotations

import asyncio
import gc
import threading

import jax
import pytest
from orbax.checkpoint._src.serialization import jax_array_handlers

from memr1.train import checkpoint, host_memory
from tests.tool import load_tool
from tests.train import tiny


def live_device_bytes() -> int:
    """Bytes of every live buffer in device memory, each buffer counted once."""
    gc.collect()
    kind = jax.devices()[0].default_memory().kind
    buffers = {}
    for x in jax.live_arrays():
        if x.is_deleted():
            continue
        for shard in x.addressable_shards:
            if shard.data.sharding.memory_kind in (None, kind):
                buffers[shard.data.unsafe_buffer_pointer()] = shard.data.nbytes
    return sum(buffers.values())


@pytest.fixture
def held_write(monkeypatch):
    """A gate that Orbax's array writes wait at (the device-to-host copy is already done)."""
    gate = threading.Event()
    write = jax_array_handlers._async_serialize_replica_slices

    async def held(*args, **kwargs):
        while not gate.is_set():
            await asyncio.sleep(0.01)
        return await write(*args, **kwargs)

    monkeypatch.setattr(jax_array_handlers, "_async_serialize_replica_slices", held)
    yield gate
    gate.set()


def test_the_step_after_an_async_save_runs_in_the_states_own_memory(
    policy, sft_step, held_write, tmp_path
):
    setup, s0 = policy
    s = tiny.copy_tree(s0)
    batch = jax.device_put(tiny.sft_batch(step=0))
    state_bytes = sum(x.nbytes for x in jax.tree.leaves(s))
    saved = jax.tree.map(lambda x: jax.device_get(x).copy(), s)
    # The estimate's count for a save (tools/memory_estimate.py) on the device.
    estimate = load_tool("memory_estimate").estimate("tiny", "1x141GB")
    allowed = 1.1 * state_bytes + estimate["save"]["device"]
    ckpt = checkpoint.Checkpointer(tmp_path, async_save=True)
    before = live_device_bytes()  # the state and whatever else this process holds
    others = before - state_bytes
    assert ckpt.save(1, s, {"next_step": 1})
    s, _ = sft_step(s, batch)  # donates the saved state
    jax.block_until_ready(s)
    during = live_device_bytes()
    assert ckpt._manager.is_saving_in_progress(), "the write finished before the measurement"
    held_write.set()
    ckpt.close()
    assert during - others <= allowed, (
        f"{(during - others) / 2**20:.1f} MiB live on the device beside the save, the state "
        f"being {state_bytes / 2**20:.1f} MiB (allowed {allowed / 2**20:.1f})"
    )
    with checkpoint.Checkpointer(tmp_path) as again:
        restored, data = again.restore_latest(setup.abstract_state, setup.state_shardings)
    assert data == {"next_step": 1} and tiny.leaves_equal(restored, saved)
    assert int(s.step) == int(s0.step) + 1  # the step ran on the state the save had copied


def test_the_host_copy_is_in_host_memory_and_holds_the_same_values(policy):
    _, s0 = policy
    copy = host_memory.host_copy(s0)
    kinds = {x.sharding.memory_kind for x in jax.tree.leaves(copy)}
    assert kinds == {host_memory.HOST_MEMORY}
    assert jax.tree.structure(copy) == jax.tree.structure(s0)
    assert tiny.leaves_equal(copy, s0)
    again = host_memory.host_copy(copy)  # already in host memory: kept as it is
    assert all(a is b for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(copy), strict=True))


def test_without_a_host_memory_space_the_state_is_saved_as_it_is(policy, monkeypatch, caplog):
    _, s0 = policy
    monkeypatch.setattr(host_memory, "has_host_memory", lambda: False)
    with caplog.at_level("WARNING"):
        assert host_memory.host_copy(s0) is s0
    assert "no 'pinned_host' memory" in caplog.text
