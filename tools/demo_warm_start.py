"""One demo seed up to its warm start: the stages before the RL stages, nothing after.

  python tools/demo_warm_start.py work/demo/seed-0                    # the demo's config
  python tools/demo_warm_start.py work/q/seed-0 --config experiments/cpu_demo/config.py:quick
  python tools/op_probe.py work/demo/seed-0 --gate                    # then probe its SFT manager

Runs `experiments.cpu_demo.run.SeedRun`'s stages data, tuples, careful_tuples, traces,
tokenizer, base, sft, rl_tuples and val_tuples into SEED_DIR (the seed from its name, seed-N, or
--seed), each skipped when its output is there, as `python -m experiments.cpu_demo` runs them;
then prints the wall time per stage and the manager rows' op mix, and writes them to
SEED_DIR/timings.json. For choosing a warm start by the op probe without the RL stages'
and the evaluations' time (docs/demo.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.cpu_demo.__main__ import _setup_environment, read_config
from memr1.torchless import without_torch

STAGES = (
    "data",
    "tuples",
    "careful_tuples",
    "traces",
    "tokenizer",
    "base",
    "sft",
    "rl_tuples",
    "val_tuples",
)
METHODS = {"careful_tuples": "make_careful_tuples", "sft": "train_sft"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed_dir", type=Path, help="the seed's folder (seed-N)")
    parser.add_argument("--seed", type=int, default=None, help="default: from the folder name")
    parser.add_argument("--config", default=None, help="the demo's config as FILE[:ARG]")
    parser.add_argument("--quick", action="store_true", help="the quick config (a smoke test)")
    args = parser.parse_args(argv)
    if args.quick and args.config is not None:
        parser.error("--quick is --config experiments/cpu_demo/config.py:quick; pass one of them")
    try:
        config = read_config(args.config, quick=args.quick)
        seed = args.seed if args.seed is not None else int(args.seed_dir.name.rsplit("-", 1)[1])
    except (ValueError, IndexError) as e:
        parser.error(f"{args.seed_dir}: {e} (name the folder seed-N or pass --seed)")
    root = args.seed_dir.absolute()
    root.mkdir(parents=True, exist_ok=True)
    _setup_environment(root.parent)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from absl import logging

    from experiments.cpu_demo.run import SeedRun

    logging.set_verbosity(logging.WARNING)
    run = SeedRun(config, seed, root, algo="grpo", log=lambda line: print(line, flush=True))
    for stage in STAGES:
        run._timed(stage, getattr(run, METHODS.get(stage, f"make_{stage}")))
    (root / "timings.json").write_text(json.dumps(run.timings, indent=1) + "\n")
    print(f"manager rows' op mix: {run.trace_mix}")
    print(f"warm start: {run.sft / 'checkpoints'}")
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
