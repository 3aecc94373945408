"""The rollout engine on 8 fake CPU devices (in a subprocess: `engine_mesh_check.py`): replies
equal to one device's on three meshes, and a decode loop that moves no weights and keeps each
device's pages on that device."""

import pytest

from tests.fake_devices import run_check


@pytest.mark.slow
def test_the_engine_splits_its_slots_and_pages_over_the_row_devices():
    report = run_check("tests.sampling.engine_mesh_check", "ENGINE_MESH_OK")
    assert set(report["logprob_max_diff"]) == {"1x8x1", "1x4x2", "2x2x2", "pallas_1x8x1"}
    # fsdp 8: only the round's exit test (any row active, rows ended) communicates.
    assert report["1x8x1"]["collectives_in_loop"] <= 2
    assert report["1x8x1"]["pool_shapes_per_device"][0][0] == 1
