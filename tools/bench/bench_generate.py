"""Generation benchmark: memr1's rollout engine and its reference sampler against HF transformers
`generate` (PyTorch).

  python tools/bench/bench_generate.py [--batches 8,32] [--prompt-len 64] [--new-tokens 128]
                                 [--json OUT]
  python tools/bench/bench_generate.py --gpu [--json OUT]     # Qwen2.5-3B shape, bf16, on a GPU
  python tools/bench/bench_generate.py --gpu --samples 1 --hf-repeats 1 --no-split  # one compile

Both sides run the same random weights (ours are copied into an HF model through the checkpoint
layout table of `memr1.models.hf_io`) and sample at temperature 1 without filters, for exactly
`--new-tokens` tokens (no EOS). For every batch size the table gives new tokens/s over the whole
call (prefill included), ms per decode step ((time for N tokens - time for 1 token) / (N - 1)),
and compile time (first call minus steady state; for HF, its first-call warm-up). The "G x" rows
show the two ways of drawing G samples per prompt: prefilling B/G prompts once and tiling the
cache (what the sampler does), against repeating the prompts before prefill. The engine
(`memr1.sampling.engine`, what every caller samples with) runs the same calls beside the
reference sampler (`memr1.sampling.Sampler`): all rows in as many slots, every row to the end
(no EOS), so the rows compare the two designs' cost per step (paged cache, prompt once per
group, rounds of host visits) where continuous batching has nothing to refill. `--gpu` uses
the Qwen2.5-3B shape with bf16 weights at batch 64, prompt 512, 128 new tokens, and reports peak
device memory, and stops with a named reason when JAX or PyTorch sees no GPU. `--no-split`
skips the 1-token calls (one compile per engine, no per-step or prefill figures) and
`--hf-repeats` caps HF's timed calls (at batch 64 one HF call takes about 13 s on an H200).
Recorded results live in docs/benchmarks.md.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))  # hf_peer, as a script
from hf_peer import hf_twin, max_logit_gap

GPU_DEFAULTS = {"size": "qwen2.5-3b", "batches": "64", "prompt_len": 512, "new_tokens": 128}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--gpu", action="store_true", help="Qwen2.5-3B shape, bf16, batch 64 defaults")
    p.add_argument("--size", default=None, help="memr1 size name (default tiny; --gpu: 3B)")
    p.add_argument("--dtype", default=None, help="param and compute dtype (--gpu: bfloat16)")
    p.add_argument("--batches", default=None, help="comma-separated batch sizes (default 8,32)")
    p.add_argument("--prompt-len", type=int, default=None, help="default 64 (--gpu: 512)")
    p.add_argument("--new-tokens", type=int, default=None, help="default 128")
    p.add_argument("--samples", type=int, default=8, help="G of the tiling rows (1: skip them)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--repeats", type=int, default=3, help="timed calls after the first")
    p.add_argument("--hf-repeats", type=int, default=None, help="HF's timed calls (--repeats)")
    p.add_argument(
        "--no-split",
        action="store_true",
        help="time only the N-token call: one compile, no ms/step or prefill figures",
    )
    p.add_argument("--no-hf", action="store_true", help="skip the transformers baseline")
    p.add_argument(
        "--torch-threads",
        default="1,2",
        help="CPU thread counts to run HF with; the fastest is the baseline (ignored with --gpu)",
    )
    p.add_argument("--machine", default=f"{platform.machine()}, {os.cpu_count()} CPUs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write the full report here")
    args = p.parse_args(argv)
    defaults = GPU_DEFAULTS if args.gpu else {}
    args.size = args.size or defaults.get("size", "tiny")
    args.dtype = args.dtype or ("bfloat16" if args.gpu else "float32")
    args.batches = [int(b) for b in (args.batches or defaults.get("batches", "8,32")).split(",")]
    args.prompt_len = args.prompt_len or defaults.get("prompt_len", 64)
    args.new_tokens = args.new_tokens or defaults.get("new_tokens", 128)
    args.torch_threads = [int(t) for t in args.torch_threads.split(",")]
    args.hf_repeats = args.repeats if args.hf_repeats is None else args.hf_repeats
    if min(args.repeats, args.hf_repeats) < 1:
        p.error("--repeats and --hf-repeats must be at least 1")
    if args.new_tokens < 2:
        p.error("--new-tokens must be at least 2 to time decode steps")
    return args


def timed(fn, repeats: int) -> tuple[float, float]:
    """(first call, best of `repeats` further calls) in seconds; fn must block until done."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return first, best


def summarise(name, batch, new, full, one, extra=None) -> dict:
    """One table row from (first, steady) timings of an N-token and a 1-token call.

    `one` is None when the 1-token call was skipped (`--no-split`): the per-step and prefill
    figures are then None.
    """
    step_s = None if one is None else (full[1] - one[1]) / (new - 1)
    decode = None
    if step_s is not None:
        decode = batch / step_s if step_s > 0 else float("nan")
    row = {
        "engine": name,
        "batch": batch,
        "new_tok_per_s": batch * new / full[1],
        "decode_tok_per_s": decode,
        "ms_per_step": None if step_s is None else 1e3 * step_s,
        "prefill_ms": None if one is None else 1e3 * one[1],
        "call_s": full[1],
        "compile_s": full[0] - full[1],
    }
    row.update(extra or {})
    return row


# ----------------------------------------------------------------------------------------------
# memr1 side.
# ----------------------------------------------------------------------------------------------


def require_gpu(need_torch: bool) -> None:
    """`--gpu`: stops with a named reason unless JAX (and PyTorch, for the peer) sees a GPU."""
    import jax

    platform = jax.devices()[0].platform
    if platform != "gpu":
        raise SystemExit(f"--gpu: JAX runs on {platform}, not on a GPU")
    if need_torch:
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("--gpu: PyTorch sees no CUDA device (the peer needs one)")


def device_peak_bytes() -> int | None:
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def bench_ours(sampler, params, prompts, args, *, samples=1, label="memr1") -> dict:
    """`sampler`: the reference `Sampler` or the `Engine` (the same `generate` arguments)."""
    import jax

    def call(new):
        out = sampler.generate(
            params,
            prompts,
            key=jax.random.key(args.seed),
            max_new_tokens=new,
            num_samples=samples,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
        )
        assert int(out.lengths.min()) == new, "a row stopped early; the timing would be wrong"
        return out

    full = timed(lambda: jax.block_until_ready(call(args.new_tokens).tokens), args.repeats)
    one = None
    if not args.no_split:
        one = timed(lambda: jax.block_until_ready(call(1).tokens), args.repeats)
    extra = {"prompts": len(prompts), "samples": samples, "peak_device_bytes": device_peak_bytes()}
    return summarise(label, len(prompts) * samples, args.new_tokens, full, one, extra)


def sampler_trainer_gap(graphdef, params, sampler, prompts, args, samples: int) -> dict:
    """How far the trainer's log-probs of a rollout's tokens are from the sampler's own.

    One call draws `samples` replies per prompt at the bench's temperature (a GRPO group), and
    `memr1.rl.logprobs.sequence_logprobs` (the update's function) scores [prompt | reply] at
    that temperature. |gap| per sampled token is |log ratio| of a first update whose old
    log-probs are the sampler's: PPO's clip acts on it before the policy has moved.
    """
    import jax
    import jax.numpy as jnp

    from memr1.rl.logprobs import sequence_logprobs

    out = sampler.generate(
        params, prompts, key=jax.random.key(args.seed + 1), max_new_tokens=args.new_tokens,
        num_samples=samples, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
    )  # fmt: skip
    rows = np.repeat(np.asarray(prompts), samples, axis=0)  # rows are prompt-major: b * G + g
    tokens = jnp.concatenate([jnp.asarray(rows), out.tokens], axis=1)
    valid = jnp.concatenate([jnp.ones(rows.shape, bool), out.mask], axis=1)
    score = jax.jit(
        lambda p, t, v: sequence_logprobs(graphdef, p, t, v, temperature=args.temperature)[0]
    )
    gap = jnp.abs(score(params, tokens, valid)[:, rows.shape[1] :] - out.logprobs)
    gap = np.asarray(jnp.where(out.mask, gap, 0.0))
    n = int(np.asarray(out.mask).sum())
    return {
        "samples": samples,
        "rows": int(rows.shape[0]),
        "tokens": n,
        "max": float(gap.max()),
        "mean": float(gap.sum() / max(n, 1)),
    }


# ----------------------------------------------------------------------------------------------
# HF transformers side.
# ----------------------------------------------------------------------------------------------


def bench_hf(model, prompts, args, threads: int | None) -> dict:
    import torch

    label = "hf-transformers"
    if threads is not None:
        # PyTorch's OpenMP pool spins badly on an oversubscribed machine, so each thread count is
        # measured and the caller compares against the fastest.
        torch.set_num_threads(threads)
        label += f" ({threads} thr)"
    device = next(model.parameters()).device
    ids = torch.from_numpy(np.asarray(prompts)).to(device)
    cuda = device.type == "cuda"

    def call(new):
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=args.temperature,
                top_k=args.top_k or 0,
                top_p=args.top_p or 1.0,
                max_new_tokens=new,
                pad_token_id=0,
                eos_token_id=None,
            )
        if cuda:
            torch.cuda.synchronize()
        assert out.shape[1] == ids.shape[1] + new, "HF stopped early; the timing would be wrong"

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    full = timed(lambda: call(args.new_tokens), args.hf_repeats)
    one = None if args.no_split else timed(lambda: call(1), args.hf_repeats)
    peak = torch.cuda.max_memory_allocated() if cuda else None
    extra = {"prompts": len(prompts), "samples": 1, "peak_device_bytes": peak}
    return summarise(label, len(prompts), args.new_tokens, full, one, extra)


# ----------------------------------------------------------------------------------------------
# Main.
# ----------------------------------------------------------------------------------------------


def print_table(report: dict) -> None:
    cols = ["engine", "batch", "prompts", "samples", "new_tok_per_s", "decode_tok_per_s"]
    cols += ["ms_per_step", "prefill_ms", "compile_s", "peak_device_bytes"]
    print(f"\n{report['model']} | prompt {report['prompt_len']} | {report['new_tokens']} new")
    print(" | ".join(f"{c:>20}" if c == "engine" else f"{c:>16}" for c in cols))
    for row in report["rows"]:
        cells = []
        for c in cols:
            v = row.get(c)
            if isinstance(v, float):
                cells.append(f"{v:16.1f}" if abs(v) >= 10 else f"{v:16.3f}")
            elif c == "peak_device_bytes" or v is None:
                cells.append(f"{v / 2**30:13.2f}GiB" if v else f"{'n/a':>16}")
            else:
                cells.append(f"{v!s:>20}" if c == "engine" else f"{v!s:>16}")
        print(" | ".join(cells))
    for batch, ratio in report["speedup_vs_hf"].items():
        print(f"batch {batch}: memr1 sampler / fastest HF, new tokens/s = {ratio:.1f}x")
    for batch, ratio in report.get("engine_speedup_vs_hf", {}).items():
        print(f"batch {batch}: memr1 engine / fastest HF, new tokens/s = {ratio:.1f}x")
    for batch, ratio in report.get("engine_vs_sampler", {}).items():
        print(f"batch {batch}: memr1 engine / sampler, new tokens/s = {ratio:.2f}x")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.gpu:
        # Leave room beside JAX's preallocated pool for the PyTorch baseline.
        os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.6")
    import jax

    from memr1.models import transformer
    from memr1.models.config import get_size
    from memr1.sampling import Sampler
    from memr1.sampling.engine import Engine

    if args.gpu:
        require_gpu(need_torch=not args.no_hf)
    cfg = get_size(args.size, param_dtype=args.dtype, dtype=args.dtype)
    # Initialised under jit, directly on the device (a 3B model eagerly op by op is slow).
    graphdef, _ = transformer.abstract_model(cfg)
    params = jax.jit(lambda: transformer.init_model(cfg, args.seed)[1])()
    sampler = Sampler(cfg, graphdef)
    engine = Engine(cfg, graphdef)
    rng = np.random.default_rng(args.seed)
    report = {
        "date": datetime.date.today().isoformat(),
        "machine": args.machine,
        "device": str(jax.devices()[0]),
        "model": f"{args.size} ({args.dtype}, {transformer.count_params(params) / 1e6:.1f}M)",
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rows": [],
        "speedup_vs_hf": {},
        "engine_speedup_vs_hf": {},
        "engine_vs_sampler": {},
    }
    hf_model = None
    if not args.no_hf:
        hf_model = hf_twin(cfg, params, "cuda" if args.gpu else "cpu")
    for batch in args.batches:
        prompts = rng.integers(1, cfg.vocab_size, size=(batch, args.prompt_len), dtype=np.int32)
        ours = bench_ours(sampler, params, prompts, args, label="memr1 sampler")
        eng = bench_ours(engine, params, prompts, args, label="memr1 engine")
        report["rows"] += [ours, eng]
        report["engine_vs_sampler"][batch] = eng["new_tok_per_s"] / ours["new_tok_per_s"]
        if hf_model is not None:
            gap = max_logit_gap(cfg, graphdef, params, hf_model, prompts)
            theirs = [
                {**bench_hf(hf_model, prompts, args, t), "max_logit_gap": gap}
                for t in ([None] if args.gpu else args.torch_threads)
            ]
            report["rows"] += theirs
            best = max(row["new_tok_per_s"] for row in theirs)
            report["speedup_vs_hf"][batch] = ours["new_tok_per_s"] / best
            report["engine_speedup_vs_hf"][batch] = eng["new_tok_per_s"] / best
        g = args.samples
        if g > 1 and batch % g == 0 and batch == max(args.batches):
            few = prompts[: batch // g]
            tiled = bench_ours(sampler, params, few, args, samples=g, label=f"memr1 G={g} tiled")
            repeated = np.repeat(few, g, axis=0)
            before = bench_ours(sampler, params, repeated, args, label=f"memr1 G={g} repeated")
            grouped = bench_ours(engine, params, few, args, samples=g, label=f"engine G={g}")
            report["rows"] += [tiled, before, grouped]
        print(json.dumps(report["rows"][-1], default=float), flush=True)
    # The sampler against the trainer on a rollout of G > 1 samples a prompt, at the largest
    # batch's rows: G = --samples, or 2 where the timed rows are G = 1.
    g = max(args.samples, 2)
    batch = max(args.batches)
    few = rng.integers(
        1, cfg.vocab_size, size=(max(1, batch // g), args.prompt_len), dtype=np.int32
    )
    report["logprob_gap"] = sampler_trainer_gap(graphdef, params, sampler, few, args, g)
    print(f"sampler vs trainer log-probs: {report['logprob_gap']}", flush=True)
    print_table(report)
    if args.json:
        from memr1.atomic import write_json_atomic

        write_json_atomic(args.json, report, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
