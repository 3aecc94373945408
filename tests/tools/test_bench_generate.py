"""tools/bench/bench_generate.py's sampler-vs-trainer check: the trainer's log-probs of a rollout's
tokens are the reference sampler's and the engine's own (float32, where only summation order
differs)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tool import load_tool


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("which", ["sampler", "engine"])
def test_the_trainer_scores_a_group_rollout_as_the_sampler_did(temperature, which):
    import jax

    from memr1.models import transformer
    from memr1.models.config import get_size
    from memr1.sampling import Sampler
    from memr1.sampling.engine import Engine

    bench = load_tool("bench_generate")
    args = bench.parse_args(["--size", "tiny", "--dtype", "float32", "--new-tokens", "12",
                             "--temperature", str(temperature)])  # fmt: skip
    cfg = get_size("tiny", dtype="float32")
    graphdef, _ = transformer.abstract_model(cfg)
    params = jax.jit(lambda: transformer.init_model(cfg, 0)[1])()
    prompts = np.random.default_rng(0).integers(1, cfg.vocab_size, (3, 7), dtype=np.int32)
    sampler = (Sampler if which == "sampler" else Engine)(cfg, graphdef)
    gap = bench.sampler_trainer_gap(graphdef, params, sampler, prompts, args, 4)
    assert (gap["samples"], gap["rows"]) == (4, 12) and gap["tokens"] > 0
    assert gap["mean"] < 1e-5 and gap["max"] < 1e-4, gap
