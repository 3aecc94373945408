"""How much of an SFT run's token positions are padding, with and without length grouping.

  python tools/bench/sft_padding.py SFT_JSONL HF_DIR --batch_size 8 --steps 1400 --sft_length 208 \
      --sft_buckets 8
  python tools/bench/sft_padding.py work/demo/seed-0/traces/sft.jsonl work/demo/seed-0/base \
      --groups 0,4,8,16 --out sft_padding.json

Tokenises the rows as `memr1.train` does (`sft.read_sft_pairs`: the prompt through the
tokenizer's chat template, the target and its EOS), then replays the batches the SFT loop would
draw for `--steps` steps (`order.sft_batch_indices`: random, or grouped by length for each
`train.sft_group_by_length` in --groups) and pads each to its bucket (`order.bucket_length` with
--sft_buckets widths), as `loop.run_sft` does. Prints per setting the share of token positions
that are padding, the positions a step computes against the random batches' (the update's FLOPs
follow positions; attention's part grows with the width squared), the widths used (one compiled
program each), and the real tokens a step trains on; writes JSON (--out). A physical count, not
a timing: it needs no model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from memr1.atomic import write_json_atomic
from memr1.env.policy import TextPolicy
from memr1.models.hf_io import config_from_hf
from memr1.models.tokenizer import load_tokenizer, special_ids
from memr1.torchless import without_torch
from memr1.train.order import bucket_length, sft_batch_indices
from memr1.train.sft import read_sft_pairs


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sft_data", help="JSONL of {messages, target} (memr1.train --sft_data)")
    parser.add_argument("hf_dir", help="the backbone's local HF directory (its tokenizer)")
    parser.add_argument("--batch_size", type=int, default=8, help="train.batch_size")
    parser.add_argument("--steps", type=int, default=1400, help="train.steps")
    parser.add_argument("--sft_length", type=int, default=208, help="train.sft_length")
    parser.add_argument("--sft_buckets", type=int, default=4, help="train.sft_buckets")
    parser.add_argument("--max_prompt_tokens", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0, help="the run's seed")
    parser.add_argument("--groups", default="0,4,8,16,32", help="sft_group_by_length values")
    parser.add_argument("--out", default="sft_padding.json")
    return parser.parse_args(argv)


def row_lengths(sft_data: str, hf_dir: str, max_prompt_tokens: int) -> list[int]:
    """Prompt + target + EOS tokens of every row, as the SFT loop reads them."""
    tok = load_tokenizer(hf_dir)
    ids = special_ids(tok, hf_dir)
    cfg = config_from_hf(hf_dir)
    policy = TextPolicy(
        cfg, None, None, tok, eos_ids=ids.eos_ids, pad_id=ids.pad_id,
        max_prompt_tokens=max_prompt_tokens,
    )  # fmt: skip
    return [len(r[0]) + len(r[1]) for r in read_sft_pairs(sft_data, policy)]


def replay(lengths, *, batch: int, steps: int, length: int, buckets: int, seed: int, group: int):
    """The padding of `steps` SFT steps drawn as `loop.run_sft` draws them."""
    real, positions, widths = 0, 0, set()
    for step in range(steps):
        idx = sft_batch_indices(lengths, batch, step, seed, group)
        rows = [lengths[i] for i in idx]
        width = bucket_length(max(rows), length, buckets)
        real, positions = real + sum(rows), positions + width * len(rows)
        widths.add(width)
    return {
        "group_by_length": group,
        "pad_frac": 1.0 - real / positions,
        "positions_per_step": positions / steps,
        "real_tokens_per_step": real / steps,
        "widths": sorted(widths),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    lengths = row_lengths(args.sft_data, args.hf_dir, args.max_prompt_tokens)
    longest = max(lengths)
    if longest > args.sft_length:
        raise SystemExit(
            f"{args.sft_data}: a row of {longest} tokens > --sft_length {args.sft_length}"
        )
    groups = [int(g) for g in args.groups.split(",")]
    rows = [
        replay(lengths, batch=args.batch_size, steps=args.steps, length=args.sft_length,
               buckets=args.sft_buckets,
               seed=args.seed, group=g)
        for g in groups
    ]  # fmt: skip
    base = next((r for r in rows if r["group_by_length"] == 0), rows[0])
    print(f"{len(lengths)} rows, mean {np.mean(lengths):.1f} tokens, longest {longest}")
    print("| sft_group_by_length | pad_frac | positions / step | vs random | widths |")
    print("|---|---|---|---|---|")
    for r in rows:
        r["positions_vs_random"] = r["positions_per_step"] / base["positions_per_step"]
        print(
            f"| {r['group_by_length']} | {r['pad_frac']:.3f} | {r['positions_per_step']:.0f} | "
            f"{r['positions_vs_random']:.3f} | {r['widths']} |"
        )
    out = {"sft_data": args.sft_data, "rows": len(lengths), "mean_length": float(np.mean(lengths)),
           "batch_size": args.batch_size, "steps": args.steps, "sft_length": args.sft_length,
           "sft_buckets": args.sft_buckets,
           "seed": args.seed, "settings": rows}  # fmt: skip
    write_json_atomic(args.out, out)
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
