"""Mesh sizes are resolved and checked before any compute; multi-host start-up is opt-in."""

import pytest

from memr1.models.config import get_size
from memr1.train import mesh
from tests.train import tiny


def test_minus_one_takes_the_remaining_devices():
    assert mesh.resolve_mesh_shape(1, -1, 1, 8) == (1, 8, 1)
    assert mesh.resolve_mesh_shape(2, -1, 2, 8) == (2, 2, 2)
    assert mesh.resolve_mesh_shape(-1, 2, 1, 8) == (4, 2, 1)


@pytest.mark.parametrize(
    "sizes, n, message",
    [
        ((2, 2, 1), 8, "needs 4 devices but 8 are available"),
        ((3, -1, 1), 8, "does not divide the 8 available devices"),
        ((-1, -1, 1), 8, "at most one axis"),
        ((1, 0, 1), 8, "positive int or -1"),
    ],
)
def test_impossible_mesh_shapes_are_refused_with_the_reason(sizes, n, message):
    with pytest.raises(ValueError, match=message):
        mesh.resolve_mesh_shape(*sizes, n)


def test_tensor_axis_must_divide_heads_and_widths():
    with pytest.raises(ValueError, match=r"tensor=3 does not divide n_heads=4.*n_kv_heads=2"):
        mesh.check_model_fits_mesh(tiny.CFG, 1, 1, 3)
    with pytest.raises(ValueError, match="fsdp=3 does not divide d_model=32"):
        mesh.check_model_fits_mesh(tiny.CFG, 1, 3, 1)
    # Qwen-2.5-7B has 4 key/value heads: a tensor axis of 8 cannot split them.
    with pytest.raises(ValueError, match="tensor=8 does not divide n_kv_heads=4"):
        mesh.check_model_fits_mesh(get_size("qwen2.5-7b"), 1, 1, 8)
    mesh.check_model_fits_mesh(get_size("qwen2.5-7b"), 1, 2, 4)


def test_build_mesh_on_this_host():
    m = mesh.build_mesh(1, -1, 1, model_cfgs=[tiny.CFG])
    assert m.axis_names == ("data", "fsdp", "tensor")
    assert mesh.batch_divisor(m) == m.devices.size
    with pytest.raises(ValueError, match="needs 16 devices"):
        mesh.build_mesh(4, 4, 1)
    m2 = mesh.mesh_from_config({"data": 1, "fsdp": -1, "tensor": 1}, [tiny.CFG])
    assert m2.shape == m.shape


class _FakeInit:
    def __init__(self):
        self.calls = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, None),
        ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}, None),  # a one-task SLURM job
        ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"}, {}),
        ({"OMPI_MCA_orte_hnp_uri": "x", "OMPI_COMM_WORLD_SIZE": "2"}, {}),
        ({"TPU_WORKER_HOSTNAMES": "h0,h1"}, {}),
        (
            {"JAX_COORDINATOR_ADDRESS": "h0:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"},
            {"coordinator_address": "h0:1234", "num_processes": 2, "process_id": 1},
        ),
    ],
)
def test_distributed_initialisation_only_under_a_multi_process_launcher(env, expected):
    fake = _FakeInit()
    started = mesh.maybe_initialize_distributed(env, initialize=fake)
    assert started == (expected is not None)
    assert fake.calls == ([] if expected is None else [expected])


def test_explicit_launch_without_a_process_id_is_an_error():
    env = {"JAX_COORDINATOR_ADDRESS": "h0:1234", "JAX_NUM_PROCESSES": "2"}
    with pytest.raises(ValueError, match="JAX_PROCESS_ID is not"):
        mesh.maybe_initialize_distributed(env, initialize=_FakeInit())


@pytest.mark.parametrize(
    "shards, micro_rows, n_micro",
    [(8, 1, 128), (16, 1, 64), (4, 1, 128), (2, 2, 128), (8, 2, 64), (12, 1, 1032 // 24)],
)
def test_micro_batches_hold_whole_groups(shards, micro_rows, n_micro):
    # The paper's 128 prompts x G 8 = 1,024 rows; a micro-batch is lcm(micro rows x shards, 8).
    rows = 128 * 8 if shards != 12 else 1032
    got = mesh.micro_batch_count(rows, group=8, micro_rows=micro_rows, shards=shards)
    assert got == n_micro
    # Whole groups, evenly over the shards.
    size = rows // got
    assert size % 8 == 0 and size % (micro_rows * shards) == 0


def test_a_batch_that_cannot_hold_whole_groups_is_refused():
    with pytest.raises(ValueError, match="whole groups of 8 .24 rows each"):
        mesh.micro_batch_count(1000, group=8, micro_rows=1, shards=3)
    with pytest.raises(ValueError, match="micro_rows=0"):
        mesh.micro_batch_count(1024, group=8, micro_rows=0, shards=8)
