"""The rollout engine against the reference sampler on the CPU demo's own sampling shapes.

  python tools/bench/engine_demo_shapes.py [--repeats 3] [--json OUT]

Before the engine, `TextPolicy` cut a call's prompts into batches of `batch_size`, filled the
last with finished copies, and ran the reference sampler (`memr1.sampling.Sampler`: dense
cache, G copies of each prompt's KV, every row until the batch's longest ends) once a batch.
The engine decodes all of the call's prompts in one run over `batch_size` × G slots. Both run
here on the demo's workloads (experiments/cpu_demo/config.py and `stage_overrides`: the tiny
backbone, compact prompts of up to 512 tokens, G = 8):

  answer   the answer stage's rollout: 16 states × G 8 at a 40-token budget, one call
           (train.rollout_batch_size 16: 128 slots);
  manager  the manager stage's rollout: 8 states × G 8 at a 64-token budget (64 slots);
  reward   its frozen answerer: 64 questions at G 1, a 40-token budget, batches of 8
           (agents.batch_size = G = 8);
  eval     evaluation's manager and answerer calls: 64 prompts at G 1, a 48-token budget,
           batches of 8 (agents.batch_size = eval_batch_size 8);
  eval@64  the same at agents.batch_size 64 (the engine's memory is sized by live tokens, so
           decoding all 64 at once costs no dense cache).

Weights are random, so every workload samples at temperature 1 (greedy decoding of random
weights draws an EOS too rarely to end replies; the demo's greedy replies end at 15-20 tokens
of 40) and replies end where they draw an EOS: `--eos` ids (spread over the vocabulary) end a
reply with probability ~eos/V a token, for replies of ~V/eos tokens. Timings are the best of
`--repeats` calls after one warm-up call (whose time, compilation included, is reported as
`first_s`), the two paths interleaved; CPU seconds are the process's (all threads), a
steadier figure than wall time on a shared machine. The ratio is reference / engine: above 1
the engine is faster.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from memr1.torchless import without_torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

WORKLOADS = {
    # name: (prompts, G, budget, prompts decoded at once)
    "answer": (16, 8, 40, 16),
    "manager": (8, 8, 64, 8),
    "reward": (64, 1, 40, 8),
    "eval": (64, 1, 48, 8),
    # Evaluation's answering with agents.batch_size 64: all of its questions decoded at once.
    "eval@64": (64, 1, 48, 64),
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--prompt-lengths", default="200:500", help="uniform range of prompt tokens")
    p.add_argument("--eos", type=int, default=256, help="EOS ids (of the 4,096): ~16-token replies")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--machine", default=f"{platform.machine()}, {os.cpu_count()} CPUs")
    p.add_argument("--json", type=Path)
    return p.parse_args(argv)


def reference_path(sampler, params, prompts, *, key, batch, **kw):
    """The pre-engine TextPolicy.complete_ids: batches of `batch` prompts, the last filled
    with finished copies (`live_prompts`), one reference-sampler call each."""
    import jax

    lengths = []
    for start in range(0, len(prompts), batch):
        chunk = list(prompts[start : start + batch])
        real = len(chunk)
        chunk += [chunk[0]] * (batch - real)
        out = sampler.generate(
            params, chunk, key=jax.random.fold_in(key, start), live_prompts=real, **kw
        )
        lengths.append(np.asarray(out.lengths)[: real * kw["num_samples"]])
    return np.concatenate(lengths)


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def run(args) -> dict:
    import jax

    from memr1.models import transformer
    from memr1.models.config import get_size
    from memr1.sampling import Sampler
    from memr1.sampling.engine import Engine, EngineSettings

    cfg = get_size("tiny", dtype="float32", param_dtype="float32")  # the demo's model
    graphdef, _ = transformer.abstract_model(cfg)
    params = jax.jit(lambda: transformer.init_model(cfg, args.seed)[1])()
    sampler = Sampler(cfg, graphdef, pad_id=0)
    engine = Engine(cfg, graphdef, pad_id=0, settings=EngineSettings())
    rng = np.random.default_rng(args.seed)
    lo, hi = (int(x) for x in args.prompt_lengths.split(":"))
    eos = np.linspace(1, cfg.vocab_size - 1, args.eos).astype(int).tolist()
    rows = []
    for name in args.workloads.split(","):
        n, g, budget, batch = WORKLOADS[name]
        prompts = [rng.integers(1, cfg.vocab_size, rng.integers(lo, hi + 1)).tolist()
                   for _ in range(n)]  # fmt: skip
        kw = dict(key=jax.random.key(args.seed), max_new_tokens=budget, num_samples=g,
                  temperature=1.0, eos_ids=eos)  # fmt: skip
        paths = {
            "ref": lambda p=prompts, b=batch, kw=kw: reference_path(sampler, params, p, batch=b,
                                                                    **kw),
            "new": lambda p=prompts, s=batch * g, kw=kw: engine.generate(params, p, slots=s, **kw),
        }  # fmt: skip
        first = {label: timed(fn)[1] for label, fn in paths.items()}
        best = {label: [np.inf, np.inf] for label in paths}
        for _ in range(args.repeats):
            for label, fn in paths.items():
                result, wall, cpu = timed(fn)
                best[label] = [min(best[label][0], wall), min(best[label][1], cpu)]
                if label == "new":
                    out = result
                else:
                    ref_lengths = result
        s = out.stats
        row = {
            "workload": name,
            "prompts": n,
            "G": g,
            "budget": budget,
            "slots": s.slots,
            "mean_reply": float(out.lengths.mean()),
            "ref_mean_reply": float(np.mean(ref_lengths)),
            "ref_wall_s": best["ref"][0],
            "new_wall_s": best["new"][0],
            "ref_cpu_s": best["ref"][1],
            "new_cpu_s": best["new"][1],
            "ratio_wall": best["ref"][0] / best["new"][0],
            "ratio_cpu": best["ref"][1] / best["new"][1],
            "ref_first_s": first["ref"],
            "new_first_s": first["new"],
            "rounds": s.rounds,
            "prefills": s.prefills,
            "slot_occupancy": s.slot_occupancy,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {
        "date": datetime.date.today().isoformat(),
        "machine": args.machine,
        "device": str(jax.devices()[0]),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rows": rows,
        "engine_programs": engine.compiled_programs(),
        "sampler_programs": sampler.compiled_programs(),
    }


def print_table(report: dict) -> None:
    cols = ("workload", "slots", "mean_reply", "ref_cpu_s", "new_cpu_s", "ratio_cpu", "ref_wall_s",
            "new_wall_s", "ratio_wall", "ref_first_s", "new_first_s", "slot_occupancy")  # fmt: skip
    print(" | ".join(f"{c:>14}" for c in cols))
    for row in report["rows"]:
        print(" | ".join(f"{row[c]:14.3f}" if isinstance(row[c], float) else f"{row[c]!s:>14}"
                         for c in cols))  # fmt: skip


def main(argv=None) -> int:
    args = parse_args(argv)
    report = run(args)
    print_table(report)
    if args.json:
        from memr1.atomic import write_json_atomic

        write_json_atomic(args.json, report, indent=1, default=float)
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
