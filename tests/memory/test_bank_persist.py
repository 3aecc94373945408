"""Saving and loading banks: round trips, versions, foreign directories, and killed saves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from memr1 import memory as mem

M, C, E, L = 5, 9, 3, 4
REPO = Path(__file__).resolve().parents[2]
APPLY = jax.jit(mem.apply_op)


def assert_banks_equal(a, b):
    assert a.overflow == b.overflow
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(a), jax.device_get(b))


def used_bank(overflow=mem.EVICT_LRU, texts=("tea", "naïve café", "x" * 20)):
    bank = mem.empty_bank(M, C, E, L, overflow=overflow)
    for i, text in enumerate(texts):
        bank = APPLY(bank, mem.make_op(bank, "ADD", text=text, emb=np.full(E, i), turn=i))
    bank = APPLY(bank, mem.make_op(bank, "UPDATE", target=0, text="green tea", turn=5))
    return mem.mark_retrieved(bank, np.array([1], np.int32), 6)


def test_round_trip_keeps_every_field_and_the_policy(tmp_path):
    bank = used_bank()
    assert mem.save_bank(tmp_path / "bank", bank) == 0
    loaded = mem.load_bank(tmp_path / "bank")
    assert_banks_equal(loaded, bank)
    assert mem.text_view(loaded) == mem.text_view(bank)
    assert mem.memory_history(loaded, 0)[-1]["old_text"] == "tea"
    # The loaded bank keeps working under jit.
    after = APPLY(loaded, mem.make_op(loaded, "DELETE", target=1))
    assert [row["id"] for row in mem.text_view(after)] == [0, 2]


def test_batched_round_trip(tmp_path):
    banks = [used_bank(mem.RAISE), used_bank(mem.RAISE, texts=("a",)), mem.empty_bank(M, C, E, L)]
    batched = mem.tile(mem.stack_banks(banks), 2)
    mem.save_bank(tmp_path, batched)
    loaded = mem.load_bank(tmp_path)
    assert loaded.batch_shape == (2, 3)
    assert_banks_equal(loaded, batched)


def test_new_saves_are_new_versions_and_old_ones_are_pruned(tmp_path):
    first, second = used_bank(), mem.empty_bank(M, C, E, L, overflow=mem.EVICT_LRU)
    assert mem.save_bank(tmp_path, first, keep=2) == 0
    assert mem.save_bank(tmp_path, second, keep=2) == 1
    assert_banks_equal(mem.load_bank(tmp_path), second)
    assert_banks_equal(mem.load_bank(tmp_path, version=0), first)
    assert mem.save_bank(tmp_path, first) == 2  # keep=1: only version 2 stays.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2"]
    with pytest.raises(mem.NotABankError, match="no bank version 0"):
        mem.load_bank(tmp_path, version=0)


def test_loading_what_is_not_a_bank_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "missing")):
        mem.load_bank(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(mem.NotABankError, match=f"{tmp_path / 'empty'} is not a memory bank"):
        mem.load_bank(tmp_path / "empty")
    # A model-style checkpoint made by the same Orbax mechanism, without the bank's config item.
    manager = ocp.CheckpointManager(tmp_path / "model", item_names=("params",))
    manager.save(0, args=ocp.args.Composite(params=ocp.args.StandardSave({"w": np.ones(3)})))
    manager.wait_until_finished()
    manager.close()
    with pytest.raises(mem.NotABankError, match=f"{tmp_path / 'model'} .*not a memory bank"):
        mem.load_bank(tmp_path / "model")
    with pytest.raises(mem.NotABankError, match="not a memory bank"):
        mem.save_bank(tmp_path / "model", used_bank())  # Would otherwise prune the model.
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["0"]
    # Right layout, wrong format name.
    manager = ocp.CheckpointManager(tmp_path / "other", item_names=("bank", "config"))
    manager.save(0, args=ocp.args.Composite(config=ocp.args.JsonSave({"format": "something"})))
    manager.wait_until_finished()
    manager.close()
    with pytest.raises(mem.NotABankError, match="config format is 'something'"):
        mem.load_bank(tmp_path / "other")


# The child process for the crash tests. It tags every array with the save number k, so a loaded
# bank is consistent only if all its fields carry the same k.
CHILD = textwrap.dedent(
    """
    import sys, time
    import jax.numpy as jnp
    from orbax.checkpoint._src.path import atomicity
    from memr1 import memory as mem

    directory, mode = sys.argv[1], sys.argv[2]

    def tagged(k):
        bank = mem.empty_bank(512, 64, 384, 64)
        return bank.replace(
            ids_M=jnp.arange(512, dtype=jnp.int32) + 1000 * k,
            emb_ME=jnp.full((512, 384), k, jnp.float32),
            next_id=jnp.int32(k),
        )

    if mode == "stall_before_rename":
        finalize = atomicity.AtomicRenameTemporaryPath.finalize

        async def stalled(self):
            print("FINALIZING", flush=True)
            time.sleep(120)
            await finalize(self)

        mem.save_bank(directory, tagged(0))
        print("SAVED 0", flush=True)
        atomicity.AtomicRenameTemporaryPath.finalize = stalled
        mem.save_bank(directory, tagged(1))
    else:
        for k in range(10_000):
            mem.save_bank(directory, tagged(k))
            print(f"SAVED {k}", flush=True)
    """
)


def start_child(directory: Path, mode: str) -> subprocess.Popen:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def read_until(child: subprocess.Popen, marker: str, timeout_s: float = 120) -> list[str]:
    lines, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            raise AssertionError(f"child exited before printing {marker!r}; it printed {lines}")
        lines.append(line.strip())
        if line.strip() == marker:
            return lines
    raise AssertionError(f"child did not print {marker!r} within {timeout_s} s")


def kill(child: subprocess.Popen) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    child.stdout.close()


def assert_consistent(bank) -> int:
    k = int(bank.next_id)
    np.testing.assert_array_equal(bank.ids_M, np.arange(512) + 1000 * k)
    assert np.all(np.asarray(bank.emb_ME) == k)
    return k


def test_a_save_killed_before_its_rename_leaves_the_previous_bank(tmp_path):
    child = start_child(tmp_path, "stall_before_rename")
    try:
        read_until(child, "FINALIZING")
        # The new version is fully written, but only under its temporary name.
        assert any(".orbax-checkpoint-tmp" in p.name for p in tmp_path.iterdir())
    finally:
        kill(child)
    assert assert_consistent(mem.load_bank(tmp_path)) == 0
    # The next save clears the debris and becomes the latest version.
    bank = mem.empty_bank(512, 64, 384, 64)
    assert mem.save_bank(tmp_path, bank) == 1
    assert not any(".orbax-checkpoint-tmp" in p.name for p in tmp_path.iterdir())
    assert_banks_equal(mem.load_bank(tmp_path), bank)


@pytest.mark.parametrize("delay_s", [0.05, 0.23])
def test_a_save_killed_at_any_moment_never_yields_a_half_written_bank(tmp_path, delay_s):
    child = start_child(tmp_path, "loop")
    try:
        lines = read_until(child, "SAVED 2")
        time.sleep(delay_s)  # Lands somewhere inside save 3 or a later one.
    finally:
        kill(child)
    last_reported = int(lines[-1].split()[1])
    assert assert_consistent(mem.load_bank(tmp_path)) >= last_reported
