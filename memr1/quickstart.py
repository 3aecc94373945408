"""The smallest end-to-end run of the whole pipeline, on a laptop CPU with nothing downloaded.

  python -m memr1.quickstart [--workdir work/quickstart] [--steps 4]

Each stage is the command a user would run (as a subprocess, exactly as documented):
generate a tiny synthloco benchmark -> train a byte-level BPE tokenizer -> build Memory-R1
training tuples -> a few GRPO steps of the Answer Agent on a randomly initialised tiny backbone
-> a few GRPO steps of the Memory Manager with that Answer Agent frozen -> evaluate locomo_rag and
memory_r1 on the held-out conversation. With random weights and a handful of steps the scores are
near zero: this run checks that every stage works end to end and shows where its outputs go. The
learning demo (SFT warm start on imperfect teachers, then RL) is `python -m experiments.cpu_demo`
(`make demo`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(args: list[str], env: dict) -> None:
    print("+", " ".join(args), flush=True)
    subprocess.run([sys.executable, *args], cwd=ROOT, env=env, check=True)


TOKENIZER_CODE = (
    "import sys; from memr1.torchless import without_torch; without_torch(); "
    "from memr1.data.locomo import load_locomo; "
    "from memr1.models.tokenizer_train import train_bpe_tokenizer; "
    "c = load_locomo(sys.argv[1]); "
    "train_bpe_tokenizer([t.text for x in c for t in x.iter_turns()], sys.argv[2], "
    "vocab_size=600)"
)
OUTPUTS = (
    "synth",
    "tokenizer",
    "tuples",
    "answer/logs",
    "manager/logs",
    "eval-locomo_rag/results.md",
    "eval-memory_r1/results.md",
)


def commands(w: Path, steps: int, seed: int) -> list[list[str]]:
    """The quickstart's command lines (arguments of `python`), in order, writing under `w`."""
    data, tok, tuples = w / "synth", w / "tokenizer", w / "tuples"
    synth = ["-m", "memr1.data.synthloco.generate", "--out", str(data), "--preset", "tiny"]
    out = [
        [*synth, "--seed", str(seed)],
        ["-c", TOKENIZER_CODE, str(data / "train.json"), str(tok)],
        [
            "-m",
            "memr1.tuples",
            "--config",
            "configs/memr1.py:dataset=synthloco,runlocal",
            f"--config.data.path={data / 'train.json'}",
            "--out",
            str(tuples),
        ],
    ]
    # Each agent's one budget, in training, the manager stage's reward and evaluation alike.
    budgets = [
        "--config.agents.manager_max_new_tokens=24",
        "--config.agents.answer_max_new_tokens=12",
    ]
    common = [
        *budgets,
        f"--config.tokenizer_dir={tok}",
        f"--config.train.steps={steps}",
        f"--config.seed={seed}",
        f"--tuples={tuples}",
    ]
    train = ["-m", "memr1.train", "--config"]
    out.append([*train, "configs/memr1.py:stage=answer,algo=grpo,runlocal", *common,
                f"--workdir={w / 'answer'}"])  # fmt: skip
    out.append([*train, "configs/memr1.py:stage=manager,algo=grpo,runlocal", *common,
                f"--answer_checkpoint={w / 'answer' / 'checkpoints'}",
                f"--workdir={w / 'manager'}"])  # fmt: skip
    for system in ("locomo_rag", "memory_r1"):
        out.append(
            [
                "-m",
                "memr1.evaluate",
                "--config",
                f"configs/memr1.py:system={system},runlocal",
                f"--config.data.path={data / 'test.json'}",
                f"--config.data.gold_ops={data / 'gold_ops.json'}",
                f"--config.tokenizer_dir={tok}",
                "--config.memory.retriever=exact_numpy",
                *budgets,
                f"--manager_checkpoint={w / 'manager' / 'checkpoints'}",
                f"--answer_checkpoint={w / 'answer' / 'checkpoints'}",
                f"--workdir={w / ('eval-' + system)}",
            ]
        )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=ROOT / "work" / "quickstart")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps per stage")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    w = args.workdir.absolute()
    if w.exists():
        shutil.rmtree(w)
    w.mkdir(parents=True)
    env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
    env["HF_HUB_OFFLINE"] = "1"
    start = time.time()
    for args_ in commands(w, args.steps, args.seed):
        _run(args_, env)
    print(f"\nquickstart finished in {time.time() - start:.0f} s. Outputs:")
    for name in OUTPUTS:
        print(f"  {w / name}")
    print(f"Inspect a bank: python tools/inspect_bank.py {w / 'eval-memory_r1'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
