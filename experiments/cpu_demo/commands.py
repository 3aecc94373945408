"""The demo's command lines: configs/memr1.py resized by the demo's settings, and the subprocess
that runs ``python -m memr1.train`` exactly as a user would type it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiments.cpu_demo.settings import DemoSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_FILE = REPO_ROOT / "configs" / "memr1.py"


def stage_overrides(s: DemoSettings, seed: int, *, stage: str, algo: str) -> dict[str, Any]:
    """The fields of configs/memr1.py's runlocal variant that the demo resizes, by dotted name."""
    o: dict[str, Any] = {
        "seed": int(seed),
        "agents.style": "compact",
        "agents.batch_size": s.eval_batch,
        "agents.max_prompt_tokens": 512,
        "agents.manager_max_new_tokens": s.manager_max_new,
        "agents.answer_max_new_tokens": s.answer_max_new,
        "memory.capacity": s.capacity,
        "memory.text_bytes": s.text_bytes,
        "memory.retriever": "exact_numpy",
        "memory.fact_source": "observation",
        "memory.k_per_fact": s.k_per_fact,
        "memory.k_per_speaker": s.k_per_speaker,
        "train.kl_beta": s.kl_beta,
        "train.keep": 1,
        "train.warmup_steps": 5,
    }

    def schedule(steps: int, batch: int, lr: float) -> None:
        o.update({"train.steps": steps, "train.batch_size": batch, "train.lr": lr})
        o["train.checkpoint_every"] = steps

    if algo == "copy":
        schedule(s.copy_steps, s.copy_batch, s.copy_lr)
        o["train.warmup_steps"] = 20
        # A word is one to three tokens: 3 tokens a word bounds prompt + reply.
        o["train.sft_length"] = -(-(3 * s.copy_words[1] + 16) // 16) * 16
    elif algo == "sft":
        schedule(s.sft_steps, s.sft_batch, s.sft_lr)
        o["train.warmup_steps"] = 10
    elif stage == "answer":
        schedule(s.answer_steps, s.answer_batch, s.answer_lr)
        o.update({"train.group_size": s.group, "train.max_new_tokens": s.answer_max_new})
        # The rollout pads its prompts to the sampler's batch: B prompts, G samples each.
        o["agents.batch_size"] = s.answer_batch
        if algo == "grpo":
            o["train.oversample"] = s.answer_oversample
    elif stage == "manager":
        schedule(s.manager_steps, s.manager_batch, s.manager_lr)
        o.update({"train.group_size": s.group, "train.max_new_tokens": s.manager_max_new})
        # The frozen answerer answers the linked questions over the G candidate banks of a
        # state in one call (agents.answer_max_new_tokens bounds its replies, as in evaluation).
        o["agents.batch_size"] = s.group
    if algo == "grpo" and stage in ("answer", "manager"):
        o["train.drop_zero_signal"] = s.drop_zero_signal
    if algo == "ppo":
        o["train.critic_lr"] = 10 * (s.answer_lr if stage == "answer" else s.manager_lr)
    return o


def load_config(arg: str, overrides: dict[str, Any]):
    """configs/memr1.py's config for ``arg`` with the overrides set (a typo'd field raises)."""
    try:
        from configs import memr1 as memr1_config
    except ModuleNotFoundError:  # run from outside the repository root
        sys.path.insert(0, str(REPO_ROOT))
        from configs import memr1 as memr1_config
    config = memr1_config.get_config(arg)
    for dotted, value in overrides.items():
        *parents, name = dotted.split(".")
        section = config
        for part in parents:
            section = section[part]
        section[name] = value
    return config


def config_flags(arg: str, overrides: dict[str, Any]) -> list[str]:
    """``--config`` and one ``--config.<field>=<value>`` flag per override."""
    flags = [f"--config={CONFIG_FILE}:{arg}"]
    return flags + [f"--config.{k}={v}" for k, v in overrides.items()]


def run_module(module: str, args: list[str], log: Callable[[str], None]) -> None:
    """Runs ``python -m module args`` from the repository root (its output goes to the console).

    Each stage runs as the very command line a user would type, in its own process: the train
    and evaluate CLIs are absl programs whose flags cannot share one process, and a fresh
    process also hands every stage's memory back when it ends.
    """
    command = [sys.executable, "-m", module, *args]
    log("$ " + " ".join(shlex.quote(a) for a in command))
    done = subprocess.run(command, cwd=REPO_ROOT, env=os.environ.copy(), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"python -m {module} failed with exit code {done.returncode}")
