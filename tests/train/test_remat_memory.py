"""Remat bounds the activation memory of the compiled SFT step once the layers are scanned.

XLA's buffer plan (`compiled.memory_analysis()`) is deterministic, so the test compiles the real
SFT step at two depths and reads how much its temporaries grow per added layer. With
`scan_layers` and `remat`, a layer adds its stored input [B, T, D] plus a few copies of its
weights (its gradient, the stacked weights and their stacked gradient), not its attention
scores. In the unrolled layer loop XLA:CPU removes the optimisation barriers of
`jax.checkpoint` before scheduling, after which each block's recomputation is merged back into
or hoisted next to the forward pass: the growth is about one layer's attention activations,
remat or not (docs/benchmarks.md).
"""

from __future__ import annotations

import jax
import pytest
from flax import nnx

from memr1.models.config import ModelConfig
from memr1.models.transformer import abstract_model, count_params
from tests.tool import load_tool
from tests.train import tiny

pytestmark = [
    pytest.mark.skipif(
        jax.default_backend() != "cpu", reason="the numbers are XLA:CPU's buffer plan"
    ),
    pytest.mark.queue_early,  # one test of ~25 CPU s (tests/conftest.py)
]

# Attention scores [B, H, T, T] (2 MiB in float32) dwarf a layer's input (128 KiB) and weights
# (about 150 KiB), so the two regimes are far apart.
CFG = tiny.CFG.replace(d_model=64, n_layers=2, head_dim=16, d_ff=128, max_position=256)
ROWS, LENGTH = 2, 256


def _temp_bytes(cfg: ModelConfig) -> int:
    """XLA's temporary bytes of the compiled SFT step, as tools/bench/remat_memory.py reads them."""
    return load_tool("remat_memory").sft_temp_bytes(cfg, ROWS, LENGTH, chunk=64)


def _growth_per_layer(cfg: ModelConfig) -> int:
    return _temp_bytes(cfg.replace(n_layers=3)) - _temp_bytes(cfg.replace(n_layers=2))


def test_scanned_remat_adds_only_a_layer_input_and_weight_copies_per_layer():
    residual = ROWS * LENGTH * CFG.d_model * 4
    layer_weights = 4 * count_params(nnx.state(abstract_model(CFG)[1])["layers"][0])
    bound = residual + 4 * layer_weights
    scanned = _growth_per_layer(CFG.replace(scan_layers=True))
    assert scanned <= bound, (
        f"with scan_layers and remat a layer adds {scanned:,} bytes of XLA temporaries, more "
        f"than its input ({residual:,}) plus four copies of its weights ({layer_weights:,} "
        "each): the scanned backward pass keeps more than one block's activations; compare "
        "the compiled HLO's while loops with Transformer._scan_blocks"
    )
    unrolled = _growth_per_layer(CFG)
    assert unrolled > 4 * bound, (
        f"the unrolled layer loop with remat adds only {unrolled:,} bytes per layer: XLA:CPU "
        "seems to keep jax.checkpoint's barriers now; update docs/benchmarks.md (remat) and "
        "this test's expectation"
    )
