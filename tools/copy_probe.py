"""Does a demo policy copy names from its prompt? The reading probe of
experiments/cpu_demo/probe.py.

  python tools/copy_probe.py work/demo/seed-0                       # the SFT warm start
  python tools/copy_probe.py work/demo/seed-0 --checkpoint work/demo/seed-0/answer_grpo/checkpoints
  python tools/copy_probe.py work/demo/seed-0 --split test --out probe.json
  python tools/copy_probe.py work/q/seed-0 --config experiments/cpu_demo/config.py:quick

Scores, under teacher forcing on the teachers' replies to a held-out split, every target token
that names something and occurs in the prompt: the share the policy ranks first and its mean
probability, and apart the share for those that open a memory's text in a manager reply (the
fact's person). Chance (guessing among the world's names) is about 0.1; docs/demo.md explains why
this number, not EM, says whether a warm start can be improved by RL. The teachers' replies
are written as the run's config writes its traces (--config: the same FILE[:ARG] as the run's;
an op-first warm start is scored on op-first replies). Prints a table and writes
JSON (--out; default SEED_DIR/copy_probe_<split>.json). --reading also answers the same
questions greedily and reports EM where the gold answer is written in a shown memory and where
it is not (experiments/cpu_demo/reading.py): a reader scores far higher on the first, a policy
that answers from the world's prior the same on both.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from experiments.cpu_demo.__main__ import read_config
from experiments.cpu_demo.probe import AGENTS, probe_checkpoint
from experiments.cpu_demo.run import SeedRun, check_seed_dir
from memr1.atomic import write_json_atomic
from memr1.torchless import without_torch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed_dir", type=Path, help="a demo seed folder (work/demo/seed-N)")
    parser.add_argument("--seed", type=int, default=None, help="default: from the folder name")
    parser.add_argument(
        "--checkpoint",
        default=None,
        help="DIR, DIR:STEP or DIR:best (default: SEED_DIR/sft/checkpoints)",
    )
    parser.add_argument("--split", choices=("validation", "test"), default="validation")
    parser.add_argument("--max_rows", type=int, default=200, help="rows per agent")
    parser.add_argument("--quick", action="store_true", help="the folder is a --quick demo's")
    parser.add_argument("--config", default=None, help="the run's demo config as FILE[:ARG]")
    parser.add_argument(
        "--reading",
        action="store_true",
        help="also answer the split's questions greedily: EM where the gold is in a shown memory",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    seed_dir = args.seed_dir
    try:
        seed = check_seed_dir(
            seed_dir,
            ("base/config.json", "data/metadata.json", f"data/{args.split}.json"),
            args.seed,
        )
        config = read_config(args.config, quick=args.quick)
    except ValueError as e:
        parser.error(str(e))
    checkpoint = args.checkpoint or str(seed_dir / "sft" / "checkpoints")
    from memr1.train.checkpoint import split_spec

    if not Path(split_spec(checkpoint)[0]).is_dir():
        parser.error(f"checkpoint {checkpoint}: not a directory (an Orbax train checkpoints dir)")
    run = SeedRun(config, seed, seed_dir, algo="grpo", log=lambda _: None)
    result = probe_checkpoint(
        run, checkpoint, args.split, max_rows=args.max_rows, reading=args.reading
    )

    print(f"copy probe of {checkpoint} on {args.split} ({result['rows']} rows)")
    print("| agent | copy tokens | top-1 | mean p | opening a memory | its top-1 |")
    print("|---|---|---|---|---|---|")
    for agent in AGENTS:
        s = result["scores"][agent]
        cells = f"{s['top1']:.2f} | {s['mean_prob']:.2f} | {s['opening_tokens']}"
        print(f"| {agent} | {s['tokens']} | {cells} | {s['opening_top1']:.2f} |")
    if args.reading:
        r = result["reading"]
        print(f"reading: greedy answers to {r['questions']} questions")
        print("| gold in a shown memory | questions | EM | teacher EM | agrees with teacher |")
        print("|---|---|---|---|---|")
        for group, g in r["groups"].items():
            cells = f"{g['em']:.3f} | {g['teacher_em']:.3f} | {g['agrees_with_teacher']:.3f}"
            print(f"| {group} | {g['n']} | {cells} |")
    out = args.out or seed_dir / f"copy_probe_{args.split}.json"
    write_json_atomic(out, result, indent=1)  # never a half-written report
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
