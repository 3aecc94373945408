"""The rollout's decode copy of the weights: its layout rules, and on 8 fake devices its HLO.

The multi-device half runs in a subprocess (`layout_check.py`): the fake device count is fixed
when XLA's backend starts.
"""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from memr1.models import transformer
from memr1.models.config import get_size
from memr1.sampling.layout import decode_dtype, decode_spec, rollout_params, row_sharding
from tests.fake_devices import run_check
from tests.sampling.reference import TEST_CFG
from tests.tool import load_tool

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow


def test_decode_spec_keeps_only_the_tensor_axis():
    assert decode_spec(P("tensor", "fsdp")) == P("tensor", None)
    assert decode_spec(P("fsdp", "tensor", None)) == P(None, "tensor", None)
    assert decode_spec(P(("data", "fsdp"), None)) == P(None, None)
    assert decode_spec(
        P(
            ("fsdp", "tensor"),
        )
    ) == P("tensor")
    assert decode_spec(P()) == P()


def test_decode_dtype_is_the_compute_dtype_unless_storage_is_narrower():
    cfg = TEST_CFG
    assert decode_dtype(cfg.replace(param_dtype="float32", dtype="bfloat16")) == "bfloat16"
    assert decode_dtype(cfg.replace(param_dtype="float32", dtype="float32")) == "float32"
    assert decode_dtype(cfg.replace(param_dtype="bfloat16", dtype="float32")) == "bfloat16"
    assert decode_dtype(cfg.replace(param_dtype="bfloat16", dtype="float16")) == "float16"


def test_rollout_params_casts_once_and_copies_nothing_already_laid_out():
    _, params = transformer.init_model(TEST_CFG, seed=0)
    # float32 storage and compute on one device: the weights are their own decode copy.
    assert rollout_params(params, TEST_CFG) is params
    copy = rollout_params(params, TEST_CFG.replace(dtype="bfloat16"))
    pairs = zip(jax.tree.leaves(params), jax.tree.leaves(copy), strict=True)
    for master, decoded in pairs:
        assert decoded.dtype == np.dtype("bfloat16")
        np.testing.assert_array_equal(np.asarray(decoded), np.asarray(master.astype("bfloat16")))
    assert row_sharding(copy, 8) is None  # one device decodes every row


def test_memory_estimate_counts_the_decode_copy_whole_and_frozen_copies_in_bf16():
    tool = load_tool("memory_estimate")
    n = transformer.count_params(transformer.abstract_model(get_size("tiny"))[1])
    for setup, devices in (("1x141GB", 1), ("8x80GB-fsdp", 8)):
        est = tool.estimate("tiny", setup, tool.Workload())
        assert est["rollout"]["decode_copy"] == 2 * n  # bf16, whole on every device
        per_device = est["params_per_device"]
        # float32 master weights in FSDP shards (norms and biases are whole on every device).
        assert est["params"] == 4 * per_device
        assert per_device == n if devices == 1 else per_device < n / 4
        assert est["reference"] == est["answer_agent"] == 2 * per_device  # bf16, in shards
        rollout = est["rollout"]
        assert rollout["total"] == 2 * n + rollout["kv_cache"] + rollout["prefill_attention"]


@pytest.mark.slow
def test_decode_copy_moves_no_weights_in_the_loop_on_8_devices():
    report = run_check("tests.sampling.layout_check", "LAYOUT_OK")
    assert report["decode_copy_1x8x1"]["collectives_in_loop"] == 1
    assert report["training_shards_1x8x1"]["collectives_in_loop"] > 1
