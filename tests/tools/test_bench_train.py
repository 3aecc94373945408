"""tools/bench/bench_train.py's comparison batch: its loss must be far from zero, or the first-step
check (|memr1 - torch| <= rtol |torch|) compares rounding noise. A token-mean surrogate of
z-scored advantages over lengths unrelated to them was ~2e-3, and bf16 kernels of AVX2 and
AVX-512 CPUs differed by 2% on it."""

from __future__ import annotations

from argparse import Namespace

import numpy as np
import pytest

from tests.tool import load_tool


@pytest.mark.parametrize(
    "batch,group,length,prompt",
    [(4, 2, 16, 8), (8, 4, 256, 128), (8, 4, 1024, 512), (12, 3, 40, 17)],
)
def test_comparison_batch_has_a_loss_far_from_zero(batch, group, length, prompt):
    bench = load_tool("bench_train")
    args = Namespace(
        batch=batch, group=group, length=length, prompt=prompt, seed=0, shared_prompt=False
    )
    b = bench.make_batch(Namespace(vocab_size=97), args)
    adv, mask = b["advantages"], b["response_mask"]
    assert mask.shape == (batch, length) and not mask[:, :prompt].any()
    lengths = mask.sum(1)
    assert lengths.min() >= (length - prompt + 1) // 2 and lengths.max() <= length - prompt
    for a, n in zip(adv.reshape(-1, group), lengths.reshape(-1, group)):
        assert np.ptp(a) > 0, "every group carries signal"
        order = np.argsort(a, kind="stable")
        assert np.all(np.diff(n[order]) >= 0), "longer responses go to higher advantages"
    # The surrogate at ratio 1 (the first step's, up to the old-logp offsets): -token-mean A.
    loss = -float((adv[:, None] * mask).sum() / mask.sum())
    assert loss < -0.05, loss
