"""A resumed run holds what a fresh run holds, and its KL reference is the start weights.

The real `train()` runs in a subprocess (`resume_memory_check.py`: the train command defines absl
flags, see tests/reliability/test_train_cli.py).
"""

import pytest

from tests.fake_devices import run_check

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow


def test_a_resume_holds_no_fresh_state_beside_the_restored_one():
    """SFT, runlocal: 28.7 MiB live on a fresh run and, before the fix, 57.4 MiB after a
    resume (the fresh state stayed alive beside the restored one); a GRPO run resumed from
    other weights keeps the start weights' reference."""
    report = run_check("tests.train.resume_memory_check", "RESUME_MEMORY_OK")
    assert report["resumed_live_bytes"] == report["fresh_live_bytes"]
    assert report["reference_max_diff"] == report["lora_reference_max_diff"] == 0.0
