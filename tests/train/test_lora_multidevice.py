"""LoRA on a 2×2×2 mesh of 8 fake CPU devices equals one device, and the train command places its
policy and frozen answerer in shards (see `lora_multidevice_check.py`, run in a subprocess because
the fake device count is fixed when XLA starts)."""

import pytest

from tests.fake_devices import run_check

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow


def test_lora_step_and_train_setup_on_eight_devices():
    report = run_check("tests.train.lora_multidevice_check", "LORA_MULTIDEVICE_OK", timeout=600)
    assert report["lora_grad_max_diff"] < 1e-5
    assert report["lora_param_max_diff_after_2_steps"] < 1e-5
    assert report["merged_answerer_max_diff"] < 1e-6
    assert report["trainable_params_lora_rank4"] == 1856
