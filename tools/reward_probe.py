"""What can the manager stage's reward teach? The reward probe of
experiments/cpu_demo/reward_probe.py.

  python tools/reward_probe.py work/demo/seed-0                  # through the RL Answer Agent
  python tools/reward_probe.py work/demo/seed-0 --answer sft     # through the warm start
  python tools/reward_probe.py work/demo/seed-0 --answer rules   # through a careful rule reader
  python tools/reward_probe.py work/demo/seed-0 --step best      # the stage's best validated step
  python tools/reward_probe.py work/demo/seed-0 --max_states 100 --out probe.json
  python tools/reward_probe.py work/q/seed-0 --config experiments/cpu_demo/config.py:quick

On the manager stage's own states (train turns with linked questions, read as the seed's
config has the stage read them: pass the run's --config), rewards five fixed behaviours (clean /
add / delete_add / overwrite / none) as a GRPO group is rewarded, and prints their mean reward
per gold operation of the turn. Where "clean" and "add" tie, GRPO cannot prefer UPDATE to ADD;
where "overwrite" and "add" tie at new facts, it cannot teach the manager to keep a memory.
Through the careful rule reader (person-aware, newest memory, no hedging;
experiments.cpu_demo.answer_teacher.RuleReader) it shows what the banks themselves would reward
with a reader that reads well. docs/demo.md has its tables for the demo's seeds. Prints a table
and writes JSON (--out; default SEED_DIR/reward_probe_<answer>.json).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from experiments.cpu_demo.__main__ import read_config
from experiments.cpu_demo.answer_teacher import RuleReader
from experiments.cpu_demo.reward_probe import BEHAVIOURS, checkpoint_answerer, probe_seed
from experiments.cpu_demo.run import SeedRun, check_seed_dir
from memr1.atomic import write_json_atomic
from memr1.torchless import without_torch

# Checkpoint folders of the answerers a seed folder holds; "rules" needs none.
ANSWERERS = {"rl": "answer_{algo}", "sft": "sft", "rules": None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed_dir", type=Path, help="a demo seed folder (work/demo/seed-N)")
    parser.add_argument("--seed", type=int, default=None, help="default: from the folder name")
    parser.add_argument(
        "--answer",
        choices=sorted(ANSWERERS),
        default="rl",
        help="the frozen Answer Agent: the RL stage's (default), the warm start, or rules",
    )
    parser.add_argument("--algo", choices=("grpo", "ppo"), default="grpo")
    parser.add_argument(
        "--step", default=None, help="the answerer's checkpoint step: N or best (default: latest)"
    )
    parser.add_argument("--max_states", type=int, default=None, help="default: all")
    parser.add_argument("--config", default=None, help="the run's config as FILE[:ARG]")
    parser.add_argument("--quick", action="store_true", help="the folder is a --quick demo's")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    seed_dir = args.seed_dir
    try:
        seed = check_seed_dir(
            seed_dir,
            ("base/config.json", "data/gold_ops.json", "rl_tuples/metadata.json"),
            args.seed,
        )
    except ValueError as e:
        parser.error(str(e))
    try:
        config = read_config(args.config, quick=args.quick)
    except ValueError as e:
        parser.error(str(e))
    run = SeedRun(config, seed, seed_dir, algo=args.algo, log=print)
    if args.answer == "rules":
        through, answerer = "the careful rule reader", RuleReader(style=config.style)
    else:
        checkpoint = seed_dir / ANSWERERS[args.answer].format(algo=args.algo) / "checkpoints"
        if not checkpoint.is_dir():
            parser.error(
                f"checkpoint {checkpoint}: not a directory (an Orbax train checkpoints dir)"
            )
        spec = str(checkpoint) if args.step is None else f"{checkpoint}:{args.step}"
        try:
            answerer = checkpoint_answerer(run, spec)
        except FileNotFoundError as e:  # a step or best the run did not keep
            parser.error(str(e))
        through = spec
    result = {"answerer": through, **probe_seed(run, answerer, max_states=args.max_states)}

    print(f"reward probe through {through} ({result['states']} manager-stage states)")
    print("| gold op | states | " + " | ".join(BEHAVIOURS) + " |")
    print("|---|---|" + "---|" * len(BEHAVIOURS))
    for group, g in result["groups"].items():
        cells = " | ".join(f"{g['reward'][b]:.3f}" for b in BEHAVIOURS)
        print(f"| {group} | {g['n']} | {cells} |")
    out = args.out or seed_dir / f"reward_probe_{args.answer}.json"
    write_json_atomic(out, result, indent=1)  # never a half-written report
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
