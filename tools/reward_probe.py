"""What can the manager stage's reward teach? The reward probe of
experiments/cpu_demo/reward_probe.py.

  python tools/reward_probe.py work/demo/seed-0                  # through the RL Answer Agent
  python tools/reward_probe.py work/demo/seed-0 --answer sft     # through the warm start
  python tools/reward_probe.py work/demo/seed-0 --answer rules   # through a careful rule reader
  python tools/reward_probe.py work/demo/seed-0 --step best      # the stage's best validated step
  python tools/reward_probe.py work/demo/seed-0 --max_states 100 --out probe.json
  python tools/reward_probe.py work/q/seed-0 --config experiments/cpu_demo/config.py:quick
  python tools/reward_probe.py work/demo/seed-0 --spread sft     # which sampled groups it ranks

On the manager stage's own states (train turns with linked questions, read as the seed's
config has the stage read them: pass the run's --config), rewards five fixed behaviours (clean /
add / delete_add / overwrite / none) as a GRPO group is rewarded, and prints their mean reward
per gold operation of the turn. Where "clean" and "add" tie, GRPO cannot prefer UPDATE to ADD;
where "overwrite" and "add" tie at new facts, it cannot teach the manager to keep a memory.
Through the careful rule reader (person-aware, newest memory, no hedging;
experiments.cpu_demo.answer_teacher.RuleReader) it shows what the banks themselves would reward
with a reader that reads well. docs/demo.md has its tables for the demo's seeds. Prints a table
and writes JSON (--out; default SEED_DIR/reward_probe_<answer>.json).

With --spread MANAGER (the warm start "sft" or the RL stage's "rl") it samples G replies per
state from that manager at the stage's rollout settings instead, rewards each group through the
Answer Agent and through the careful rule reader, and prints the share of the groups each ranks
(a reward spread, the groups GRPO learns from), those only the rule reader ranks (the banks
decide them, the Answer Agent does not read it) and those no reader could rank (no linked
question retrieves a different memory text). JSON: SEED_DIR/reward_spread_<manager>_<answer>.json.
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
from experiments.cpu_demo.reward_probe import (
    BEHAVIOURS,
    SPREAD_KEYS,
    checkpoint_policy,
    probe_seed,
    reward_env,
    rollout_sampling,
    spread_table,
    stage_states,
)
from experiments.cpu_demo.run import SeedRun, check_seed_dir
from memr1.atomic import write_json_atomic
from memr1.torchless import without_torch

# Checkpoint folders of the answerers a seed folder holds; "rules" needs none.
ANSWERERS = {"rl": "answer_{algo}", "sft": "sft", "rules": None}
# Checkpoint folders of the managers --spread samples from.
MANAGERS = {"rl": "manager_{algo}", "sft": "sft"}


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
    parser.add_argument(
        "--spread",
        choices=sorted(MANAGERS),
        default=None,
        help="instead: which groups of this manager's sampled replies the reward ranks",
    )
    parser.add_argument("--sample_seed", type=int, default=0, help="--spread's sampling key")
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
            answerer = checkpoint_policy(run, spec)
        except FileNotFoundError as e:  # a step or best the run did not keep
            parser.error(str(e))
        through = spec
    if args.spread:
        manager = seed_dir / MANAGERS[args.spread].format(algo=args.algo) / "checkpoints"
        if not manager.is_dir():
            parser.error(f"checkpoint {manager}: not a directory (an Orbax train checkpoints dir)")
        result = spread(run, str(manager), answerer, args.max_states, args.sample_seed)
        result = {"manager": str(manager), "answerer": through, **result}
        print_spread(result)
        out = args.out or seed_dir / f"reward_spread_{args.spread}_{args.answer}.json"
    else:
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


def spread(run, manager: str, answerer, max_states: int | None, sample_seed: int) -> dict:
    """`spread_table` of G replies sampled from ``manager`` on the seed's manager-stage
    states, at the stage's rollout temperature and budget."""
    import jax

    from experiments.cpu_demo.op_probe import policy_sampler

    config = run.c
    sampling = rollout_sampling(run)
    states = stage_states(run, max_states)
    sample = policy_sampler(
        checkpoint_policy(run, manager).decode_copy(),
        sampling,
        group_size=config.group_size,
        style=config.style,
        key=jax.random.key(sample_seed),
    )
    rules = reward_env(run, RuleReader(style=config.style))
    return {
        "temperature": sampling.temperature,
        **spread_table(states, sample(states), reward_env(run, answerer), rules),
    }


def print_spread(result: dict) -> None:
    print(
        f"groups of {result['group_size']} replies sampled from {result['manager']} "
        f"(T {result['temperature']}) on {result['groups']} manager-stage states, rewarded "
        f"through {result['answerer']} and through the careful rule reader"
    )
    print("| share of the groups | |")
    print("|---|---:|")
    for key in SPREAD_KEYS:
        print(f"| {key} | {result[key]:.3f} |")


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
