"""``python -m experiments.cpu_demo``: the Memory-R1 claim in miniature, on a CPU, with no
downloads.

  python -m experiments.cpu_demo                      # one seed, GRPO, into work/demo
  python -m experiments.cpu_demo --seeds 3            # three seeds, then the EM gain as mean ± std
  python -m experiments.cpu_demo --algo ppo           # PPO instead of GRPO for both RL stages
  python -m experiments.cpu_demo --quick              # every stage in a few steps (a smoke test)
  python -m experiments.cpu_demo --config experiments/cpu_demo/config.py:quick   # = --quick

Per seed (see experiments/cpu_demo/run.py): a synthloco benchmark, a BPE tokenizer, a tiny backbone
warm-started by SFT on the traces of two imperfect rule-based teachers, RL of the Answer Agent
and then of the Memory Manager (rewarded through the frozen Answer Agent) with exact match as the
only reward, and the four systems evaluated on the held-out test conversations. Then
WORKDIR/results.md and WORKDIR/plots/*.png. An interrupted run resumes where it stopped; a
folder built under other settings than the config's is refused, naming them (an evaluation is
run again); pass --fresh to start the seeds over. ``--split validation`` evaluates on the
validation split, on which the demo's sizes were chosen. ``--config FILE[:ARG]`` reads the demo's
sizes from a config file (default: experiments/cpu_demo/config.py, see its docstring);
``--quick`` is its quick variant.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import ml_collections

from experiments.cpu_demo import config as demo_config
from memr1.torchless import without_torch


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.cpu_demo", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seeds", type=int, default=1, help="number of seeds (0 .. N-1)")
    parser.add_argument("--workdir", default="work/demo", help="output folder")
    parser.add_argument("--algo", choices=("grpo", "ppo"), default="grpo", help="RL algorithm")
    parser.add_argument(
        "--config",
        default=None,
        help="the demo's config as FILE[:ARG] (default: experiments/cpu_demo/config.py)",
    )
    parser.add_argument("--quick", action="store_true", help="a few steps per stage (:quick)")
    parser.add_argument("--split", choices=("test", "validation"), default="test")
    parser.add_argument("--fresh", action="store_true", help="delete the seeds' folders first")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    if args.quick and args.config is not None:
        parser.error("--quick is --config experiments/cpu_demo/config.py:quick; pass one of them")
    return args


def read_config(spec: str | None, *, quick: bool = False) -> ml_collections.ConfigDict:
    """The demo's config from ``FILE[:ARG]`` (a file with ``get_config(arg)``), by default
    experiments/cpu_demo/config.py (with arg "quick" when ``quick``).

    Raises:
      ValueError: ``quick`` with a ``spec`` (which would ignore it), or a spec that is not a
        Python config file.
    """
    if quick and spec is not None:
        raise ValueError(
            "--quick is --config experiments/cpu_demo/config.py:quick; pass one of them"
        )
    if spec is None:
        return demo_config.get_config("quick" if quick else None)
    path, _, arg = spec.partition(":")
    if not path.endswith(".py") or not Path(path).is_file():
        raise ValueError(f"--config {spec}: {path} is not a Python config file")
    module_spec = importlib.util.spec_from_file_location("_demo_config", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(arg or None)


def _setup_environment(workdir: Path) -> None:
    """CPU unless told otherwise, no hub, and a compilation cache shared by every stage.

    The settings travel as environment variables (a user's own win), which the training
    subprocesses inherit and read when they import JAX; this process has imported JAX already
    (with its config), so its own JAX config is updated to match, and the evaluations it runs
    read and fill the same cache. A program compiled by one stage is then read from disk by the
    next and by every later seed. Every program is cached, however fast it compiled: the demo's
    programs are small, and most compile in under a second (JAX's default threshold), so with it
    each stage and each seed compiled them again. A hit is the executable a compile would give
    (the key holds the program, the compile options and XLA_FLAGS), so nothing the demo
    computes changes.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    jax_settings = {  # environment variable (its JAX config name lower-cased): default, type
        "JAX_PLATFORMS": ("cpu", str),
        "JAX_COMPILATION_CACHE_DIR": (str(workdir / ".jax_cache"), str),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": ("0", float),
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": ("-1", int),
    }
    for env, (default, _) in jax_settings.items():
        os.environ.setdefault(env, default)
    if "jax" in sys.modules:
        import jax

        for env, (_, kind) in jax_settings.items():
            jax.config.update(env.lower(), kind(os.environ[env]))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = read_config(args.config, quick=args.quick)
    except ValueError as err:
        print(f"experiments.cpu_demo: error: {err}", file=sys.stderr)
        return 2
    workdir = Path(args.workdir).absolute()
    workdir.mkdir(parents=True, exist_ok=True)
    _setup_environment(workdir)

    from absl import logging

    from experiments.cpu_demo import plots, report
    from experiments.cpu_demo.run import SeedRun

    # Orbax logs every file rename at INFO; the progress bars say what is going on.
    logging.set_verbosity(logging.WARNING)

    def log(line: str) -> None:
        print(line, flush=True)

    summaries, curves = [], {}
    start = time.perf_counter()
    for seed in range(args.seeds):
        root = workdir / f"seed-{seed}"
        if args.fresh and root.exists():
            shutil.rmtree(root)
        run = SeedRun(config, seed, root, algo=args.algo, log=log)
        try:
            summary = run.run(split=args.split)
        except (RuntimeError, ValueError, FileNotFoundError) as err:
            print(f"experiments.cpu_demo: error: seed {seed}: {err}", file=sys.stderr)
            return 1
        (root / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        summaries.append(summary)
        curves[seed] = {
            "warm start (sft)": run.sft / "logs" / "metrics.jsonl",
            f"answer agent ({args.algo})": run.rl_answer / "logs" / "metrics.jsonl",
            f"memory manager ({args.algo})": run.rl_manager / "logs" / "metrics.jsonl",
        }
        gain = report.em_gain(summary)
        log(f"[seed {seed}] EM gain memory_r1 - memory_sft: {gain:+.1f} points")

    plot_dir = workdir / "plots"
    plot_dir.mkdir(exist_ok=True)
    figures = [
        plots.reward_curves(curves, plot_dir / "reward_curves.png"),
        plots.em_by_system(summaries, plot_dir / "em_by_system.png"),
        plots.op_mix(summaries, plot_dir / "op_mix.png"),
    ]
    text = report.render(summaries, algo=args.algo, config=config)
    (workdir / "results.md").write_text(text)
    meta = {"config": config.to_dict(), "seeds": [s["seed"] for s in summaries]}
    (workdir / "summary.json").write_text(json.dumps({**meta, "runs": summaries}, indent=1))

    gains = [report.em_gain(s) for s in summaries]
    mean, std = report.mean_std(gains)
    print()
    for s in summaries:
        ems = ", ".join(
            f"{name} {100 * report.overall(s['results'][name]):.1f}" for name in report.SYSTEM_NOTES
        )
        print(f"seed {s['seed']}: EM ({s['split']}) {ems}; {s['timings_s']['total']:.0f} s")
    n = len(gains)
    print(f"EM gain of memory_r1 over memory_sft: {mean:+.1f} ± {std:.1f} points over {n} seed(s)")
    print(f"total wall time: {time.perf_counter() - start:.0f} s")
    print(f"results: {workdir / 'results.md'}")
    print("plots:   " + ", ".join(str(f) for f in figures))
    print(f"runs:    {workdir}/seed-*/ (tensorboard --logdir {workdir})")
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
