"""tools/bench/sft_padding.py counts the padding of an SFT run's batches from a real JSONL and
tokenizer, random and grouped by length (`memr1.train.order`), as `loop.run_sft` draws them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memr1.train.order import bucket_length
from tests.tool import load_tool
from tests.train import tiny


def _write_rows(path, n=48, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            words = " ".join(["the cat sat"] * int(rng.integers(1, 12)))
            messages = [{"role": "user", "content": f"Question {i}: {words}?"}]
            f.write(json.dumps({"messages": messages, "target": words}) + "\n")


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    return tiny.make_hf_base(tmp_path_factory.mktemp("sft_padding") / "base", max_position=512)


def test_the_replay_counts_each_steps_positions_and_grouping_cuts_padding(hf_dir, tmp_path):
    tool = load_tool("sft_padding")
    data, out = tmp_path / "sft.jsonl", tmp_path / "pad.json"
    _write_rows(data)
    argv = [str(data), str(hf_dir), "--batch_size", "4", "--steps", "24", "--sft_length", "256",
            "--sft_buckets", "8", "--groups", "0,4", "--out", str(out)]  # fmt: skip
    assert tool.main(argv) == 0
    report = json.loads(out.read_text())
    lengths = tool.row_lengths(str(data), str(hf_dir), 512)
    assert report["rows"] == 48 and report["mean_length"] == pytest.approx(np.mean(lengths))
    allowed = {bucket_length(n, 256, 8) for n in range(1, 257)}
    random, grouped = report["settings"]
    for r in (random, grouped):
        assert set(r["widths"]) <= allowed
        real, positions = r["real_tokens_per_step"], r["positions_per_step"]
        assert r["pad_frac"] == pytest.approx(1 - real / positions)
    # Each epoch (12 steps of 4) trains on every row once either way: the same real tokens.
    assert grouped["real_tokens_per_step"] == pytest.approx(random["real_tokens_per_step"])
    assert grouped["pad_frac"] < random["pad_frac"]
    assert grouped["positions_vs_random"] < 1.0


def test_a_row_longer_than_sft_length_is_refused_naming_the_file(hf_dir, tmp_path):
    tool = load_tool("sft_padding")
    data = tmp_path / "sft.jsonl"
    _write_rows(data)
    with pytest.raises(SystemExit, match=r"sft\.jsonl: a row of \d+ tokens > --sft_length 16"):
        tool.main([str(data), str(hf_dir), "--sft_length", "16", "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()
