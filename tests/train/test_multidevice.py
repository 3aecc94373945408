"""SFT and GRPO on a 2×2×2 mesh of 8 fake CPU devices equal the single-device results.

The fake device count is fixed when XLA's backend starts, so the check runs in a subprocess
(`multidevice_check.py`), where the flag is set before JAX is imported; this test process keeps
its single device.
"""

import pytest

from tests.fake_devices import run_check

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow


@pytest.mark.slow
def test_sharded_steps_match_one_device_and_shard_the_state():
    report = run_check("tests.train.multidevice_check", "MULTIDEVICE_OK")
    assert report["sft_grad_max_diff"] < 1e-5 and report["grpo_grad_max_diff"] < 1e-5
