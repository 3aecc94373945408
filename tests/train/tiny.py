"""A tiny model and deterministic synthetic batches shared by the training tests.

Dimensions are small but not degenerate: a GQA ratio of 2, tied embeddings with q/k/v biases
(the Qwen layout), remat on, and every dimension the 2×2×2 test mesh splits is even. One block
only: XLA's CPU compile time dominates these tests (the multi-device check uses two). Batches are
a pure function of (seed, step), like the data of a real run that is resumed from a checkpoint.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from configs import memr1 as memr1_config
from memr1.models.config import get_size
from memr1.rl import grpo, ppo
from memr1.train import loop, sft, state

CFG = get_size(
    "tiny",
    vocab_size=64,
    d_model=32,
    n_layers=1,
    n_heads=4,
    head_dim=8,
    d_ff=48,
    max_position=64,
    remat=True,
)
ROWS, LENGTH, PROMPT = 8, 16, 6
CHUNK = 8  # two log-prob chunks per row


def config(arg: str = "runlocal", **train: Any) -> ml_collections.ConfigDict:
    """configs/memr1.py's `arg` variant (the laptop-sized runlocal one by default) with `train`
    set in its train section: the tests build their settings from it as the train CLI does
    (`GRPOConfig.from_config`, `OptimConfig.from_config`, ...)."""
    out = memr1_config.get_config(arg)
    out.train.update(train)
    return out


def grpo_config(*, chunk: int = CHUNK, **train: Any) -> grpo.GRPOConfig:
    """The GRPO update of `config(**train)`, log-probs in `chunk`-token chunks; every row runs
    whole (train.shared_prompt off) unless `train` says otherwise."""
    cfg = grpo.GRPOConfig.from_config(config(**{"shared_prompt": False, **train}))
    return dataclasses.replace(cfg, logprob_chunk=chunk)


def ppo_config(*, chunk: int = CHUNK, **train: Any) -> ppo.PPOConfig:
    """The PPO update of `config("runlocal,algo=ppo", **train)`, in `chunk`-token chunks."""
    cfg = ppo.PPOConfig.from_config(config("runlocal,algo=ppo", **train))
    return dataclasses.replace(cfg, logprob_chunk=chunk)


def optim(*, critic: bool = False, **train: Any) -> state.OptimConfig:
    """The optimiser of the default (paper) config with `train` set: lr 1e-6 (critic 1e-5) and
    10 warmup steps unless `train` says otherwise."""
    return state.OptimConfig.from_config(config("", **train), critic=critic)


def sft_config(*, chunk: int = CHUNK, **train: Any) -> sft.SFTConfig:
    """The SFT update of `config(**train)`, log-probs in `chunk`-token chunks."""
    return dataclasses.replace(sft.SFTConfig.from_config(config(**train)), logprob_chunk=chunk)


def loop_config(*, seed: int = 0, **train: Any) -> loop.LoopConfig:
    """The loop of `config(**train)` with run seed `seed`; rows unpacked (train.shared_prompt
    off) unless `train` says otherwise, as `grpo_config`'s update."""
    cfg = config(**{"shared_prompt": False, **train})
    cfg.seed = seed
    return loop.LoopConfig.from_config(cfg)


def _rng(seed: int, step: int) -> np.random.Generator:
    return np.random.default_rng([seed, step])


def sft_batch(step: int = 0, seed: int = 0) -> dict[str, np.ndarray]:
    """Rows of a left-padded prompt (3..6 tokens) and a right-padded target (3..10 tokens)."""
    rng = _rng(seed, step)
    tokens = np.zeros((ROWS, LENGTH), np.int32)
    valid = np.zeros((ROWS, LENGTH), bool)
    loss_mask = np.zeros((ROWS, LENGTH), bool)
    for i in range(ROWS):
        p = int(rng.integers(3, PROMPT + 1))
        t = int(rng.integers(3, LENGTH - PROMPT + 1))
        tokens[i, PROMPT - p : PROMPT + t] = rng.integers(1, CFG.vocab_size, p + t)
        valid[i, PROMPT - p : PROMPT + t] = True
        loss_mask[i, PROMPT : PROMPT + t] = True
    return {"tokens": tokens, "valid": valid, "loss_mask": loss_mask}


def grpo_batch(step: int = 0, seed: int = 0, group: int = 4) -> dict[str, np.ndarray]:
    """An SFT-shaped batch relabelled as rollouts, with z-scored advantages per group of rows."""
    b = sft_batch(step, seed)
    rewards = _rng(seed + 1, step).integers(0, 2, ROWS).astype(np.float32)
    rewards[0], rewards[1] = 1.0, 0.0  # the first group always carries signal
    groups = rewards.reshape(-1, group)
    adv = (groups - groups.mean(1, keepdims=True)) / (groups.std(1, ddof=1, keepdims=True) + 1e-6)
    return {
        "tokens": b["tokens"],
        "valid": b["valid"],
        "response_mask": b["loss_mask"],
        "advantages": adv.reshape(-1).astype(np.float32),
    }


def with_reference(setup, cfg, batch, reference) -> dict:
    """`batch` with the KL reference's log-probs `ref_logp`, scored by the forward-only program
    the loop runs once per rollout (`steps.make_grpo_reference`); `batch` itself if β = 0."""
    from memr1.train import steps

    if cfg.kl_beta == 0.0:
        return batch
    return {**batch, "ref_logp": steps.make_grpo_reference(setup, cfg)(reference, batch)}


def with_reference_step(setup, cfg, step):
    """`step(state, batch, reference)`: a GRPO update `step(state, batch)` given the reference
    weights, whose log-probs it adds to the batch first (as `loop.make_rl_update` does)."""
    from memr1.train import steps

    ref_fn = steps.make_grpo_reference(setup, cfg)

    def run(state, batch, reference):
        return step(state, {**batch, "ref_logp": ref_fn(reference, batch)})

    return run


def copy_tree(tree):
    """A fresh copy (new buffers, same shardings): steps donate their input state."""
    return jax.tree.map(jnp.copy, tree)


def leaves_equal(a, b) -> bool:
    """Bitwise equality of two pytrees of arrays."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb, strict=True)
    )


# The tokenizer of `tests.models.tiny_hf` has 300 tokens; every dimension still divides 2×2×2.
HF_CFG = CFG.replace(vocab_size=300, remat=False)


def make_hf_base(out_dir, seed: int = 0, max_position: int | None = None):
    """Writes an HF directory (config, safetensors, tokenizer) of a random HF_CFG model
    (positions up to `max_position` when given: real-length prompts)."""
    from pathlib import Path

    from memr1.models import transformer
    from memr1.models.hf_export import export_hf
    from tests.models.tiny_hf import make_tokenizer

    out_dir = Path(out_dir)
    tok_dir = out_dir.parent / f"{out_dir.name}-tokenizer"
    make_tokenizer(tok_dir)
    cfg = HF_CFG if max_position is None else HF_CFG.replace(max_position=max_position)
    _, params = transformer.init_model(cfg, seed=seed)
    return export_hf(cfg, params, out_dir, tok_dir)
