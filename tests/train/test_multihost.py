"""The host-side pieces of a multi-host step that one process can check: which slice of a step
each process takes, how every process's metrics merge, the common prompt width, and that on one
process every collective is the identity (the two-process run is tests/train/test_multiprocess)."""

import jax
import numpy as np
import pytest

from memr1.env.policy import Completion
from memr1.train import batches, multihost
from tests.fake_devices import run_check


def test_each_process_takes_its_contiguous_share_of_the_step():
    shares = [multihost.process_slice(12, index=p, count=3) for p in range(3)]
    assert shares == [slice(0, 4), slice(4, 8), slice(8, 12)]
    assert multihost.process_slice(5) == slice(0, 5)  # one process: everything
    with pytest.raises(ValueError, match="states a step: 6 do not split evenly over 4"):
        multihost.process_slice(6, "states a step", index=0, count=4)


def test_metrics_merge_to_the_mean_over_processes_and_the_slowest_time():
    merged = multihost.merge_stats(
        [
            {"reward": 0.25, "op_add_frac": 0.5, "time_sample_s": 2.0},
            {"reward": 0.75, "op_delete_frac": 1.0, "time_sample_s": 3.5},
        ]
    )
    # A metric a process lacks counts as 0 there (op kinds its samples never produced).
    assert merged == {
        "reward": 0.5,
        "op_add_frac": 0.25,
        "op_delete_frac": 0.5,
        "time_sample_s": 3.5,
    }


def test_one_process_collectives_are_the_identity():
    stats = {"reward": 0.5, "time_sample_s": 1.0}
    assert multihost.gather(7) == [7]
    assert multihost.mean_over_processes(stats) == stats
    batch = {"tokens": np.arange(6).reshape(3, 2)}
    assert multihost.gather_rows(batch)["tokens"] is batch["tokens"]
    params = {"w": jax.numpy.ones((2, 3))}
    assert multihost.local_replica(params) is params
    key = jax.random.key(3)
    assert multihost.process_key(key) is key


def _completion(prompt_len: int, ids: list[int]) -> Completion:
    return Completion(
        text="",
        prompt_ids=np.arange(1, prompt_len + 1, dtype=np.int32),
        ids=np.asarray(ids, np.int32),
        logprobs=np.full(len(ids), -0.5, np.float32),
        finished=True,
    )


def test_rows_are_packed_at_the_common_prompt_width():
    groups = [[_completion(3, [7, 8]), _completion(3, [9])]]
    batch, _ = batches.pack_rollout(
        groups, np.array([[1.0, 0.0]]), response_width=2, pad_id=0, prompt_width=32
    )
    assert batch["tokens"].shape == (2, 34)
    np.testing.assert_array_equal(batch["tokens"][0, 29:], [1, 2, 3, 7, 8])
    default, _ = batches.pack_rollout(groups, np.array([[1.0, 0.0]]), response_width=2, pad_id=0)
    assert default["tokens"].shape == (2, 18)  # the bucket of the longest prompt
    with pytest.raises(ValueError, match="a prompt of 3 tokens does not fit prompt_width=2"):
        batches.pack_rollout(
            groups, np.array([[1.0, 0.0]]), response_width=2, pad_id=0, prompt_width=2
        )


def test_rollout_rows_on_one_process_choose_signal_groups_like_the_batch_functions():
    groups = [[_completion(2, [5]), _completion(2, [6])] for _ in range(3)]
    rewards = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]], np.float32)
    batch, stats = batches.rollout_rows(
        groups, rewards, {"reward": 0.5}, response_width=1, pad_id=0, group=2, keep=1
    )
    np.testing.assert_array_equal(batch["rewards"], [1.0, 0.0])  # the one group with signal
    assert stats["signal_groups_frac"] == 1.0 and stats["reward"] == 0.5
    assert stats["zero_signal_frac"] == pytest.approx(2 / 3)


@pytest.mark.slow
def test_a_process_local_replica_splits_the_process_rows_over_its_devices():
    """8 fake devices as one process of two (`local_replica_check.py`): the policy's rollout
    replica and a frozen copy's replica decode 4 of the 32 rows per device, with the per-device
    FLOPs and temporaries of the single-process decode copy (before: every device decoded all
    32, 7.8x the FLOPs)."""
    report = run_check("tests.train.local_replica_check", "LOCAL_REPLICA_OK")
    for name in ("rollout_replica", "local"):
        assert report[name] == report["decode_copy"]
    assert report["decode_copy"]["rows_per_device"] == 4
