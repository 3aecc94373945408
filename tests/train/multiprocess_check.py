"""Run as one of two processes by test_multiprocess.py: the multi-host path on one machine.

    python -m tests.train.multiprocess_check OUT_DIR TOKENIZER_DIR

Each process owns 2 fake CPU devices (the launcher sets XLA_FLAGS). The trainer's own call,
`mesh.maybe_initialize_distributed()`, reads JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
JAX_PROCESS_ID from the environment and joins the two into one runtime of 4 devices. The states
are created sharded over a data=2 x fsdp=2 mesh spanning both processes, and the trainer's own
loops run: `loop.run_sft` for two steps, then `loop.run_rl` (GRPO) for two steps of each
Memory-R1 stage (`multiprocess_rl`). Both processes log to the same directories, as the
launch scripts do; process 0 writes the final parameters of each run to OUT_DIR and each process
its RL records, which the test compares with the same runs on one device.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax

from memr1.torchless import without_torch
from memr1.train import loop, mesh, sft, state
from memr1.train.metrics_log import MetricsWriter
from tests.train import multiprocess_rl, tiny

CFG = tiny.CFG.replace(n_layers=2)
OPTIM = multiprocess_rl.OPTIM
SFT_LOOP = tiny.loop_config(steps=2, batch_size=tiny.ROWS)


def sft_pairs() -> list[tuple[list[int], list[int]]]:
    """(prompt, target) token lists: the rows of two `tiny.sft_batch` steps."""
    pairs = []
    for step in range(SFT_LOOP.steps):
        b = tiny.sft_batch(step=step)
        for tokens, valid, target in zip(b["tokens"], b["valid"], b["loss_mask"], strict=True):
            pairs.append((tokens[valid & ~target].tolist(), tokens[target].tolist()))
    return pairs


def run_sft(setup, s0, logdir: Path):
    """`loop.run_sft` over `sft_pairs()`; returns the final train state."""
    step = sft.make_sft_step(setup, tiny.sft_config(n_micro=1))
    with MetricsWriter(logdir, tensorboard=False) as writer:
        return loop.run_sft(
            setup,
            s0,
            step,
            sft_pairs(),
            cfg=SFT_LOOP,
            length=tiny.LENGTH,
            pad_id=0,
            writer=writer,
        )


def main(out_dir: Path, tok_dir: Path) -> None:
    assert mesh.maybe_initialize_distributed(), "the launcher's environment was not recognised"
    assert jax.process_count() == 2 and jax.device_count() == 4, jax.devices()
    assert jax.local_device_count() == 2
    m = mesh.build_mesh(2, 2, 1, model_cfgs=[CFG])
    setup, s0 = state.create_train_state(m, CFG, OPTIM, seed=0)
    final = run_sft(setup, s0, out_dir / "sft")
    multiprocess_rl.save_params(final.params, out_dir / "sft-params.npz")
    multiprocess_rl.run_processes(out_dir, tok_dir, m)


if __name__ == "__main__":
    without_torch()
    main(Path(sys.argv[1]), Path(sys.argv[2]))
