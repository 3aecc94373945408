"""Live device bytes while an asynchronous checkpoint save is in flight: the real train command.

  python tools/bench/save_memory.py [--steps 6] [--checkpoint-every 1] [--json OUT]

Runs `memr1.train`'s `train()` (SFT, `runlocal`: the tiny model, one CPU device, checkpoints
written asynchronously as every run writes them) on a few synthetic chat rows and, at the end of
every step (the step's state ready, before its own save starts; the previous step's save may
still be writing), reads `jax.live_arrays()` three ways: every array's bytes (Orbax's per-shard
views of an array are Array objects of their own, so buffers count again), the arrays in device
memory only (`memr1.train.host_memory.host_copy` puts the save's copy in host memory), and the
device buffers each counted once. Prints a table against the train state's bytes and writes
JSON. A physical count, not a timing. Whether a save is in flight at a step's end depends on the
write's speed; the table says so per step (tests/train/test_checkpoint_memory.py holds a write
open and measures the same thing every time).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # memr1/, configs/, as a script

MIB = 2**20


def live_bytes() -> dict[str, int]:
    """Bytes of `jax.live_arrays()`: all, in device memory, and device buffers counted once."""
    import jax

    gc.collect()
    kind = jax.devices()[0].default_memory().kind
    arrays = [x for x in jax.live_arrays() if not x.is_deleted()]
    on_device = [x for x in arrays if x.sharding.memory_kind in (None, kind)]
    buffers = {}
    for x in on_device:
        for shard in x.addressable_shards:
            buffers[shard.data.unsafe_buffer_pointer()] = shard.data.nbytes
    return {
        "all_arrays": sum(x.nbytes for x in arrays),
        "device_arrays": sum(x.nbytes for x in on_device),
        "device_buffers": sum(buffers.values()),
    }


def run(steps: int, every: int) -> dict:
    import jax

    import memr1.train.__main__ as cli
    from configs import memr1 as memr1_config
    from memr1.models.tokenizer_train import train_bpe_tokenizer

    rows, checkpointers, state_bytes = [], [], []
    finish, init = cli.loop._finish_step, cli.Checkpointer.__init__

    def opened(self, *args, **kwargs):
        init(self, *args, **kwargs)
        checkpointers.append(self)

    def measured(step, metrics, lag, writer, bar, cfg, checkpointer, state, *rest):
        jax.block_until_ready(state)
        state_bytes.append(sum(x.nbytes for x in jax.tree.leaves(state)))
        in_flight = checkpointers[-1]._manager.is_saving_in_progress()
        rows.append({"step": step, "save_in_flight": bool(in_flight), **live_bytes()})
        return finish(step, metrics, lag, writer, bar, cfg, checkpointer, state, *rest)

    cli.loop._finish_step, cli.Checkpointer.__init__ = measured, opened
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            chats = [f"Where is item {i}?" for i in range(8)]
            train_bpe_tokenizer(chats, tmp / "tok", vocab_size=280)
            data = tmp / "sft.jsonl"
            data.write_text("".join(
                json.dumps({"messages": [{"role": "user", "content": c}], "target": f"shelf {i}"})
                + "\n" for i, c in enumerate(chats)
            ))  # fmt: skip
            config = memr1_config.get_config("runlocal,algo=sft,stage=answer")
            config.tokenizer_dir = str(tmp / "tok")
            config.train.update(steps=steps, sft_length=32, batch_size=2, checkpoint_every=every)
            cli.train(config, workdir=tmp / "run", hf_dir=None, tuples=None,
                      sft_data=str(data), init_checkpoint=None, answer_checkpoint=None)  # fmt: skip
    finally:
        cli.loop._finish_step, cli.Checkpointer.__init__ = finish, init
    return {"state_bytes": state_bytes[0], "rows": rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--checkpoint-every", type=int, default=1, help="train.checkpoint_every")
    p.add_argument("--machine", default=f"{platform.machine()} {platform.processor()}".strip())
    p.add_argument("--json", type=Path, help="write the report here")
    args = p.parse_args(argv)
    report = {"machine": args.machine, **run(args.steps, args.checkpoint_every)}
    state = report["state_bytes"]
    print(f"SFT runlocal, checkpoint_every={args.checkpoint_every}; train state "
          f"{state / MIB:.1f} MiB; MiB at each step's end")  # fmt: skip
    print(f"{'step':>4} {'save':>9} {'all arrays':>11} {'device':>8} {'buffers':>8} {'x state':>8}")
    for r in report["rows"]:
        flight = "in flight" if r["save_in_flight"] else "-"
        print(f"{r['step']:>4} {flight:>9} {r['all_arrays'] / MIB:>11.1f} "
              f"{r['device_arrays'] / MIB:>8.1f} {r['device_buffers'] / MIB:>8.1f} "
              f"{r['device_buffers'] / state:>8.2f}")  # fmt: skip
    if args.json:
        from memr1.atomic import write_json_atomic

        write_json_atomic(args.json, report, indent=1)
    return 0


if __name__ == "__main__":
    from memr1.torchless import without_torch

    without_torch()
    sys.exit(main())
