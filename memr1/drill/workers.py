"""What runs inside the drill's subprocesses, printing markers the parent acts on.

    python -m memr1.drill.workers train -- TRAIN_CLI_ARGS   the train CLI, printing
        "SAVE-BEGIN k" when a checkpoint save begins, "SAVE-END k" once it is final on disk,
        "RESTORED k" on resume and "LOGGED k" after each metrics.jsonl record
    python -m memr1.drill.workers bank DIR K                 saves tagged banks K, K + 1, ...
        into DIR until killed, printing "SAVE-BEGIN k" / "SAVE-END k"

With DRILL_STALL_S > 0 in the environment, Orbax's last act of every save is slowed by that
many seconds, so that a kill can be timed to land inside a save.
"""

from __future__ import annotations

import os
import sys
import time

from memr1.torchless import without_torch


def stall_finalize(seconds: float, on_final=None) -> None:
    """Slows Orbax's last act of a save (commit marker + rename) so a kill can land inside it;
    `on_final(path)` is called once a step directory is final."""
    from orbax.checkpoint._src.path import atomicity

    finalize = atomicity.AtomicRenameTemporaryPath.finalize

    async def stalled(self, *args, **kwargs):
        if seconds > 0:
            time.sleep(seconds)
        out = await finalize(self, *args, **kwargs)
        if on_final is not None:
            on_final(self.get_final())
        return out

    atomicity.AtomicRenameTemporaryPath.finalize = stalled


def _stall_from_env(on_final=None) -> None:
    stall_finalize(float(os.environ.get("DRILL_STALL_S", "0")), on_final)


def say(line: str) -> None:
    print(line, flush=True)


def train_worker(argv: list[str]) -> None:
    """`python -m memr1.train ARGV` with markers around saves, restores and log records."""
    from absl import app

    import memr1.train.__main__ as cli
    from memr1.train.checkpoint import Checkpointer
    from memr1.train.metrics_log import MetricsWriter

    class Marked(Checkpointer):
        # SAVE-END is said when the step directory is final (`_stall_from_env`), not when
        # `save` returns: under async saving that is before the write.
        def save(self, step, state, data_position, *, force=False):
            say(f"SAVE-BEGIN {step}")
            return super().save(step, state, data_position, force=force)

        def restore_latest(self, abstract_state, shardings=None):
            restored = super().restore_latest(abstract_state, shardings)
            if restored is not None:
                say(f"RESTORED {restored[1]['next_step']}")
            return restored

    write = MetricsWriter.write

    def logged(self, step, metrics, prefix="train"):
        write(self, step, metrics, prefix)
        say(f"LOGGED {step}")

    def final(path):
        if path.name.isdigit():  # a step directory (its items finalise inside it)
            say(f"SAVE-END {path.name}")

    _stall_from_env(final)
    cli.Checkpointer = Marked
    MetricsWriter.write = logged
    app.run(cli.main, argv=["memr1.train", *argv])


def tagged_bank(k: int):
    """A bank whose every array carries k: it loads consistent only if saved whole."""
    import jax.numpy as jnp

    from memr1 import memory as mem

    bank = mem.empty_bank(512, 64, 384, 64)
    return bank.replace(
        ids_M=jnp.arange(512, dtype=jnp.int32) + 1000 * k,
        emb_ME=jnp.full((512, 384), k, jnp.float32),
        next_id=jnp.int32(k),
    )


def bank_worker(directory: str, start: int) -> None:
    """Saves tagged banks start, start + 1, ... into `directory` until killed."""
    from memr1 import memory as mem

    _stall_from_env()
    for k in range(start, start + 10_000):
        say(f"SAVE-BEGIN {k}")
        mem.save_bank(directory, tagged_bank(k))
        say(f"SAVE-END {k}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["train"]:
        rest = argv[1:]
        train_worker(rest[1:] if rest[:1] == ["--"] else rest)
        return 0
    if argv[:1] == ["bank"] and len(argv) == 3:
        bank_worker(argv[1], int(argv[2]))
        return 0
    print("usage: python -m memr1.drill.workers train -- ARGS | bank DIR K", file=sys.stderr)
    return 2


if __name__ == "__main__":
    without_torch()
    sys.exit(main(sys.argv[1:]))
