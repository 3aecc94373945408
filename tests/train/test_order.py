"""Which rows a step trains on (`memr1.train.order`): SFT batches grouped by length cover each
epoch once, hold rows of neighbouring lengths, come in a random order, and cut the padding that
the SFT loop logs as train/pad_frac."""

from __future__ import annotations

import numpy as np
import pytest

from memr1.train import loop, mesh, sft, state
from memr1.train.metrics_log import MetricsWriter, read_jsonl
from memr1.train.order import batch_indices, grouped_batch_indices
from tests.train import tiny

LENGTHS = np.random.default_rng(7).integers(5, 200, size=103).tolist()


def _epoch(lengths, batch, group, seed=3, epoch=0):
    per_epoch = len(lengths) // batch
    steps = range(epoch * per_epoch, (epoch + 1) * per_epoch)
    return [grouped_batch_indices(lengths, batch, s, seed, group) for s in steps]


def test_batch_indices_cover_each_epoch_once():
    seen = np.concatenate([batch_indices(10, 4, s, seed=1) for s in range(5)])
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:20]) == list(range(10))
    np.testing.assert_array_equal(batch_indices(10, 4, 3, 1), batch_indices(10, 4, 3, 1))


@pytest.mark.parametrize("epoch", [0, 1])
def test_grouped_batches_visit_each_row_at_most_once_an_epoch(epoch):
    batches = _epoch(LENGTHS, 8, 4, epoch=epoch)
    rows = np.concatenate(batches)
    assert len(batches) == 103 // 8 and len(rows) == len(set(rows.tolist())) == 96
    assert all(len(b) == 8 for b in batches)
    # Pure in (seed, step): a resumed run replays the same batches; other epochs drop others.
    again = grouped_batch_indices(LENGTHS, 8, 5 + epoch * 12, 3, 4)
    np.testing.assert_array_equal(again, batches[5])
    other = np.concatenate(_epoch(LENGTHS, 8, 4, epoch=1 - epoch))
    assert set(rows.tolist()) != set(other.tolist())


def test_one_chunk_an_epoch_gives_batches_of_disjoint_length_ranges():
    # group = the epoch's batch count: one sorted chunk, so batch k holds the k-th block of
    # lengths; random batches would overlap.
    batches = _epoch(LENGTHS, 8, 103 // 8)
    spans = sorted((min(LENGTHS[i] for i in b), max(LENGTHS[i] for i in b)) for b in batches)
    assert all(hi <= next_lo for (_, hi), (next_lo, _) in zip(spans, spans[1:])), spans


def test_grouping_narrows_each_batch_and_keeps_the_order_of_lengths_random():
    def mean_spread(batches):
        return np.mean([np.ptp([LENGTHS[i] for i in b]) for b in batches])

    grouped = _epoch(LENGTHS, 8, 4)
    random = [batch_indices(len(LENGTHS), 8, s, 3) for s in range(12)]
    assert mean_spread(grouped) < 0.5 * mean_spread(random)
    firsts = [min(LENGTHS[i] for i in b) for b in _epoch(LENGTHS, 8, 103 // 8)]
    assert firsts != sorted(firsts) and firsts != sorted(firsts, reverse=True)


def test_grouping_refuses_what_it_cannot_batch():
    with pytest.raises(ValueError, match="cannot fill one batch of 8"):
        grouped_batch_indices([3] * 7, 8, 0, 0, 2)
    with pytest.raises(ValueError, match="sft_group_by_length=0"):
        grouped_batch_indices(LENGTHS, 8, 0, 0, 0)
    with pytest.raises(ValueError, match="train.sft_group_by_length=-1"):
        _sft_loop(sft_group_by_length=-1)
    with pytest.raises(ValueError, match="train.sft_buckets=0"):
        _sft_loop(sft_buckets=0)
    with pytest.raises(ValueError, match="sft_group_by_length=2 is for SFT, not grpo"):
        tiny.loop_config(sft_group_by_length=2)


def _sft_loop(**train):
    cfg = tiny.config("runlocal,algo=sft", **train)
    return loop.LoopConfig.from_config(cfg)


def _pairs(n=32, seed=0):
    rng = np.random.default_rng(seed)
    return [
        ([1, 2, 3, 4], rng.integers(5, 60, size=int(k)).tolist())
        for k in rng.integers(2, 58, size=n)
    ]


def _run_sft(tmp_path, group, buckets=4):
    cfg = tiny.CFG
    setup, s0 = state.create_train_state(
        mesh.build_mesh(1, 1, 1, model_cfgs=[cfg]), cfg, tiny.optim(), seed=0
    )
    step = sft.make_sft_step(setup, tiny.sft_config(n_micro=1))
    lcfg = _sft_loop(steps=8, batch_size=4, sft_group_by_length=group, sft_buckets=buckets)
    logdir = tmp_path / f"g{group}b{buckets}"
    with MetricsWriter(logdir, tensorboard=False) as writer:
        loop.run_sft(setup, s0, step, _pairs(), cfg=lcfg, length=64, pad_id=0, writer=writer)
    return [r["train/pad_frac"] for r in read_jsonl(logdir / "metrics.jsonl")], lcfg


def _expected_pad_frac(idx, pairs, buckets):
    lengths = [len(pairs[i][0]) + len(pairs[i][1]) for i in idx]
    width = loop.bucket_length(max(lengths), 64, buckets)
    return 1.0 - sum(lengths) / (len(idx) * width)


@pytest.mark.slow
def test_the_sft_loop_logs_its_padding_and_grouping_cuts_it(tmp_path):
    pairs = _pairs()
    lengths = [len(p) + len(t) for p, t in pairs]
    # (group, buckets): random batches; 8 batches of 4 = an epoch's one sorted chunk; the same
    # with 2 widths (32, 64) instead of 4, so that the loop must pass train.sft_buckets on.
    runs = {key: _run_sft(tmp_path, *key) for key in ((0, 4), (8, 4), (8, 2))}
    for (group, buckets), (logged, lcfg) in runs.items():
        for s in range(8):
            if group:
                idx = grouped_batch_indices(lengths, 4, s, lcfg.seed, group)
            else:
                idx = batch_indices(32, 4, s, lcfg.seed)
            want = _expected_pad_frac(idx, pairs, buckets)
            assert logged[s] == pytest.approx(want, abs=1e-6), (group, buckets, s)
    # 0.39 -> 0.29 here: what is left is each batch's rounding up to its 16-token bucket.
    assert np.mean(runs[8, 4][0]) < np.mean(runs[0, 4][0]) - 0.08, runs
    assert np.mean(runs[8, 2][0]) > np.mean(runs[8, 4][0]), runs
    assert loop.bucket_length(113, 208, 8) == 144 and loop.bucket_length(113, 208) == 160
