"""Run as a script by test_resume_memory.py: the train command resumes within the memory of a
fresh run, and its KL reference is the start weights, not the resumed ones.

A subprocess because `memr1.train.__main__` defines absl flags (as test_train_cli does).
1. SFT (runlocal, tiny model) with the real `train()`: bytes of `jax.live_arrays()` at the
   moment the loop has its state (`loop.resume` returned), on a fresh run and on a run resumed
   from its checkpoint. Before the fix the resumed run held a fresh state beside the restored
   one (28.7 vs 57.4 MiB).
2. GRPO (answer stage, β > 0), resumed from a checkpoint whose weights differ from the start
   weights: the reference `train()` hands the update equals the start weights' compute-dtype
   copy, and no fresh train state was built; under LoRA `prepare_models` makes the same
   reference (adapters included) with and without a fresh state.
Prints one JSON line of measurements on success; an assertion fails otherwise.
"""

from __future__ import annotations

import gc
import json
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np

import memr1.train.__main__ as cli
from configs import memr1 as memr1_config
from memr1.models.tokenizer_train import train_bpe_tokenizer
from memr1.torchless import without_torch
from memr1.train import state
from memr1.train.checkpoint import Checkpointer


class Stop(Exception):
    """Ends a run at the point the check has seen what it needs."""


def live_bytes() -> int:
    gc.collect()
    return sum(x.nbytes for x in jax.live_arrays())


def config(arg: str, tok: Path, **train):
    out = memr1_config.get_config(arg)
    out.tokenizer_dir = str(tok)
    out.train.update(train)
    return out


def run_kw(**kw):
    base = dict(hf_dir=None, tuples=None, sft_data=None, init_checkpoint=None)
    return {**base, "answer_checkpoint": None, **kw}


def sft_live_bytes(tmp: Path, tok: Path, data: Path) -> dict:
    """Live bytes when the SFT loop starts its steps, fresh and after a resume."""
    seen = []
    real_resume = cli.loop.resume

    def resume(*args):
        out = real_resume(*args)
        seen.append(live_bytes())
        return out

    cli.loop.resume = resume
    try:
        kw = dict(steps=2, sft_length=32, batch_size=2, checkpoint_every=2)
        work = tmp / "sft"
        cli.train(config("runlocal,algo=sft,stage=answer", tok, **kw), workdir=work,
                  **run_kw(sft_data=str(data)))  # fmt: skip
        assert cli.has_checkpoint(work / "checkpoints")
        kw["steps"] = 4
        final = cli.train(config("runlocal,algo=sft,stage=answer", tok, **kw), workdir=work,
                          **run_kw(sft_data=str(data)))  # fmt: skip
        assert int(final.step) == 4, int(final.step)
    finally:
        cli.loop.resume = real_resume
    fresh, resumed = seen
    return {"fresh_live_bytes": fresh, "resumed_live_bytes": resumed}


def reference_after_resume(tmp: Path, tok: Path) -> dict:
    """A GRPO run resumed from a checkpoint of other weights keeps the start weights' reference."""
    cfg = config("runlocal,algo=grpo,stage=answer", tok, kl_beta=0.01, steps=4)
    fresh = cli.prepare_models(cfg, hf_dir=None)
    expected = jax.tree.map(np.asarray, state.make_reference(fresh.setup, fresh.state.params))
    moved = fresh.state.replace(params=jax.tree.map(lambda x: x + 1.0, fresh.state.params))
    work = tmp / "grpo"
    with Checkpointer(work / "checkpoints") as ckpt:
        ckpt.save(2, moved, {"next_step": 2})
    del fresh, moved
    got = {}
    real_prepare, real_update = cli.prepare_models, cli.loop.make_rl_update

    def prepare(*args, **kw):
        models = real_prepare(*args, **kw)
        got["built_state"] = models.state is not None
        return models

    def make_rl_update(setup, algo, *, ref_params, **kw):
        got["ref"] = jax.tree.map(np.asarray, ref_params)
        raise Stop

    cli.prepare_models, cli.loop.make_rl_update = prepare, make_rl_update
    cli.rl_states = lambda *a, **k: (["a state"], None)  # no tuples: the run stops first
    try:
        cli.train(cfg, workdir=work, **run_kw(tuples="unused"))
    except Stop:
        pass
    finally:
        cli.prepare_models, cli.loop.make_rl_update = real_prepare, real_update
    assert got["built_state"] is False, "a resumed run built a fresh train state"
    pairs = zip(jax.tree.leaves(expected), jax.tree.leaves(got["ref"]), strict=True)
    diff = max(float(np.abs(a - b).max()) for a, b in pairs)
    assert diff == 0.0, f"the reference is not the start weights (max |diff| {diff})"
    # Under LoRA the reference holds the adapters too (B = 0): built without a train state,
    # it equals the one a fresh run makes from its state.
    lcfg = config("runlocal,algo=grpo,stage=answer", tok, kl_beta=0.01, lora_rank=4)
    want = jax.tree.map(np.asarray, cli.prepare_models(lcfg, hf_dir=None).reference)
    resumed = cli.prepare_models(lcfg, hf_dir=None, resuming=True)
    assert resumed.state is None
    pairs = zip(jax.tree.leaves(want), jax.tree.leaves(resumed.reference), strict=True)
    lora_diff = max(float(np.abs(a - np.asarray(b)).max()) for a, b in pairs)
    assert lora_diff == 0.0, f"the LoRA reference differs after a resume ({lora_diff})"
    return {"reference_max_diff": diff, "lora_reference_max_diff": lora_diff}


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        chat = lambda i: [{"role": "user", "content": f"Where is item {i}?"}]
        rows = [{"messages": chat(i), "target": f"shelf {i}"} for i in range(8)]
        tok = tmp / "tok"
        train_bpe_tokenizer([r["messages"][0]["content"] for r in rows], tok, vocab_size=280)
        data = tmp / "sft.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        report = sft_live_bytes(tmp, tok, data)
        print(f"live bytes: {report}", file=sys.stderr)
        assert report["resumed_live_bytes"] == report["fresh_live_bytes"], report
        report.update(reference_after_resume(tmp, tok))
    print("RESUME_MEMORY_OK " + json.dumps(report))


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
