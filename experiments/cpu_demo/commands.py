"""The demo's command lines: configs/memr1.py resized by the demo's config, and the subprocess
that runs ``python -m memr1.train`` exactly as a user would type it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_collections

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_FILE = REPO_ROOT / "configs" / "memr1.py"


def stage_overrides(
    c: ml_collections.ConfigDict, seed: int, *, stage: str, algo: str | None = None
) -> dict[str, Any]:
    """The fields of configs/memr1.py's runlocal variant that the demo sets, by dotted name.

    Args:
      c: the demo's config (experiments/cpu_demo/config.py).
      stage: "sft" (the warm start), "answer" or "manager" (an RL stage), or "eval".
      algo: the RL stage's algorithm, "grpo" or "ppo".
    """
    o: dict[str, Any] = {
        "seed": int(seed),
        "agents.style": c.style,
        "agents.batch_size": c.eval_batch_size,
        "agents.max_prompt_tokens": c.max_prompt_tokens,
        # Each agent's one budget: its RL stage's rollouts, its validation, the manager
        # stage's reward (the answerer's) and evaluation.
        "agents.manager_max_new_tokens": c.manager.max_new_tokens,
        "agents.answer_max_new_tokens": c.answer.max_new_tokens,
        "memory.capacity": c.memory.capacity,
        "memory.text_bytes": c.memory.text_bytes,
        "memory.retriever": c.memory.retriever,
        "memory.fact_source": c.memory.fact_source,
        "memory.k_per_fact": c.memory.k_per_fact,
        "memory.k_per_speaker": c.memory.k_per_speaker,
        "train.kl_beta": c.kl_beta,
        "train.keep": c.keep,
        "train.warmup_steps": c.warmup_steps,
    }

    def schedule(s: ml_collections.ConfigDict) -> None:
        o.update({"train.steps": s.steps, "train.batch_size": s.batch_size, "train.lr": s.lr})
        o["train.checkpoint_every"] = s.steps

    if stage == "sft":
        schedule(c.sft)
        o["train.warmup_steps"] = c.sft.warmup_steps
        o["train.sft_group_by_length"] = c.sft.group_by_length
        o["train.sft_buckets"] = c.sft.buckets
        o["train.lr_decay"] = c.sft.lr_decay
    elif stage == "answer":
        schedule(c.answer)
        o["train.eval_every"] = c.answer.eval_every
        o["train.group_size"] = c.group_size
        # The rollout pads its prompts to the sampler's batch: B prompts, G samples each.
        o["agents.batch_size"] = c.answer.batch_size
        o["train.rollout_batch_size"] = c.answer.batch_size
        if c.answer.oversample != 1:  # off: no flag, so the records of earlier runs still match
            o["train.oversample"] = c.answer.oversample
    elif stage == "manager":
        schedule(c.manager)
        o["train.eval_every"] = c.manager.eval_every
        o["train.min_overlap"] = c.manager.min_overlap
        o["train.linked_qa"] = c.manager.linked_qa
        o["train.oversample"] = c.manager.oversample
        if c.manager.kl_beta is not None:  # the stage's own KL weight, else config.kl_beta
            o["train.kl_beta"] = c.manager.kl_beta
        o["train.group_size"] = c.group_size
        # The frozen answerer answers the linked questions over the G candidate banks of a
        # state in one call (agents.answer_max_new_tokens bounds its replies, as in evaluation).
        o["agents.batch_size"] = c.group_size
        # The policy's rollouts decode group_size prompts a call, as when agents.batch_size
        # set them (the demo's numbers were measured so).
        o["train.rollout_batch_size"] = c.group_size
    elif stage != "eval":
        raise ValueError(f"stage_overrides: unknown stage {stage!r}")
    if algo == "ppo":
        o["train.critic_lr"] = 10 * (c.answer.lr if stage == "answer" else c.manager.lr)
    return o


def load_config(arg: str, overrides: dict[str, Any]) -> ml_collections.ConfigDict:
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
