"""GRPO update-step benchmark: memr1's jitted step against the same step in PyTorch + transformers.

  python tools/bench/bench_train.py [--size tiny] [--batch 8] [--length 256] [--json OUT]
  python tools/bench/bench_train.py --gpu [--peak-tflops 989] [--json OUT]   # Qwen2.5-3B shape

Both sides start from the same random weights (ours are copied into an HF `Qwen2ForCausalLM`
through the checkpoint layout table of `memr1.models.hf_io`) and take the same batch: B rows of
a full prompt followed by a right-padded response, per-row group advantages (G rows per prompt,
z-scored with `memr1.rl.advantages.grpo_advantages`), and old log-probs that differ from the
policy's by a fixed random offset so that the clipped branch of the surrogate is exercised. The
loss is the token-mean PPO-clipped surrogate plus beta times the k3 KL to a frozen reference (its
forward pass is skipped at beta = 0), then global-norm clipping and AdamW with decoupled decay.

The first step's loss and pre-clip gradient norm of the two sides are compared (same weights,
same batch); a disagreement beyond the tolerance makes the comparison meaningless, so the tool
then exits 1. Tokens/s counts every position of the B x T batch (padding included, as the peer
figures do); MFU is 6 N tokens / step time / peak FLOP/s, which leaves out attention FLOPs, the
remat recompute and the reference pass. `--gpu` uses the Qwen2.5-3B shape with float32 master
weights, bfloat16 compute (torch: autocast), a bfloat16 reference, remat / gradient checkpointing
and batch 8 x 1024, and reports peak device memory of each side; the two sides run one after
the other there (they would not fit on the device together). On a CPU the steps of the two sides
alternate and both are pinned to one thread (`--cpu-threads`), so the load of a shared machine
falls on both alike. The two steps live in tools/bench/bench_train_engines.py. Results:
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

GPU_DEFAULTS = {"size": "qwen2.5-3b", "length": 1024, "dtype": "bfloat16", "peak_tflops": 989.0}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--gpu", action="store_true", help="Qwen2.5-3B shape, bf16 compute, 8 x 1024")
    p.add_argument("--size", default=None, help="memr1 size name (default tiny; --gpu: 3B)")
    p.add_argument("--dtype", default=None, help="compute dtype (default float32; --gpu: bf16)")
    p.add_argument("--batch", type=int, default=8, help="rows (B prompts x G samples)")
    p.add_argument("--group", type=int, default=4, help="G samples per prompt; divides --batch")
    p.add_argument("--length", type=int, default=None, help="tokens per row (256; --gpu: 1024)")
    p.add_argument("--prompt", type=int, default=None, help="prompt tokens per row (length / 2)")
    p.add_argument("--remat", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--kl-beta", type=float, default=0.001, help="0 skips the reference pass")
    p.add_argument("--clip-eps", type=float, default=0.2)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--old-logp-noise", type=float, default=0.2, help="std of old-logp offsets")
    p.add_argument("--logprob-chunk", type=int, default=128)
    p.add_argument("--warmup", type=int, default=2, help="untimed steps (the first compiles)")
    p.add_argument("--steps", type=int, default=5, help="timed steps")
    p.add_argument("--peak-tflops", type=float, default=None, help="for MFU (--gpu: 989, H200)")
    p.add_argument(
        "--cpu-threads",
        type=int,
        default=1,
        help="pin XLA and torch to N CPU threads each (default 1: fair on a shared machine);\n"
        "0 leaves XLA its own pool and tries every count of --torch-threads",
    )
    p.add_argument("--torch-threads", default="1,2", help="with --cpu-threads 0 (not --gpu)")
    p.add_argument(
        "--shared-prompt",
        action="store_true",
        help="the G rows of a group share their prompt (as rollouts do) and memr1 packs each\n"
        "group into one row (train.shared_prompt); the peer runs every row whole",
    )
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch baseline")
    p.add_argument(
        "--interleave",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="alternate the engines step by step (default on CPU; --gpu runs them in turn)",
    )
    p.add_argument("--loss-rtol", type=float, default=None, help="default 1e-4 fp32, 2e-2 bf16")
    p.add_argument("--machine", default=f"{platform.machine()}, {os.cpu_count()} CPUs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write the full report here")
    args = p.parse_args(argv)
    defaults = GPU_DEFAULTS if args.gpu else {}
    args.size = args.size or defaults.get("size", "tiny")
    args.dtype = args.dtype or defaults.get("dtype", "float32")
    args.length = args.length or defaults.get("length", 256)
    args.remat = args.gpu if args.remat is None else args.remat
    args.interleave = not args.gpu if args.interleave is None else args.interleave
    args.peak_tflops = args.peak_tflops or defaults.get("peak_tflops")
    args.torch_threads = [int(t) for t in args.torch_threads.split(",")]
    if args.gpu:
        args.cpu_threads = 0
    if args.cpu_threads:
        args.torch_threads = [args.cpu_threads]
    if args.loss_rtol is None:
        args.loss_rtol = 1e-4 if args.dtype == "float32" else 2e-2
    if args.batch % args.group or args.group < 2:
        p.error(f"--group {args.group} must be >= 2 and divide --batch {args.batch}")
    if args.length < 4 or args.warmup < 1 or args.steps < 1:
        p.error("--length must be >= 4, --warmup and --steps >= 1")
    args.prompt = args.length // 2 if args.prompt is None else args.prompt
    if not 0 < args.prompt < args.length:
        p.error(f"--prompt {args.prompt} must be between 1 and --length - 1")
    return args


def _tool(name: str):
    """tools/bench/<name>.py as a module (tools/bench/ is not a package): bench_generate lends
    its HF twin builder, GPU check and peak-memory reader; bench_train_engines holds the two
    steps."""
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_batch(cfg, args) -> dict[str, np.ndarray]:
    """A GRPO batch without old log-probs: full prompts, right-padded responses, advantages."""
    from memr1.rl.advantages import grpo_advantages

    rng = np.random.default_rng(args.seed)
    b, t, g = args.batch, args.length, args.group
    prompt = args.prompt
    # Every group carries signal, and within a group the longer responses go to the higher
    # advantages. Z-scored advantages sum to zero over a group, so with lengths unrelated to
    # them the token-mean surrogate is near zero (~2e-3) and a relative tolerance on it measures
    # rounding noise (bf16 kernels of different CPUs differ by 2% there). Tied to the advantages
    # it is a sizeable negative number that a wrong sign, clip or mask changes visibly.
    rewards = rng.integers(0, 2, size=(b // g, g)).astype(np.float32)
    rewards[:, :2] = (1.0, 0.0)
    adv, _ = grpo_advantages(rewards, ddof=1)
    adv = np.asarray(adv, np.float32)
    # Responses fill between half and all of their budget, so the loss mask has ragged ends.
    budget = t - prompt
    lengths = np.linspace((budget + 1) // 2, budget, g).round().astype(int)
    rank = np.argsort(np.argsort(adv, axis=1, kind="stable"), axis=1)
    resp = lengths[rank].reshape(-1)
    col = np.arange(t)[None, :]
    valid = col < (prompt + resp)[:, None]
    tokens = np.where(valid, rng.integers(1, cfg.vocab_size, size=(b, t)), 0).astype(np.int32)
    if args.shared_prompt:  # the G samples of a prompt: same prompt columns
        tokens[:, :prompt] = np.repeat(tokens[::g, :prompt], g, axis=0)
    out = {
        "tokens": tokens,
        "valid": valid,
        "response_mask": (col >= prompt) & valid,
        "advantages": adv.reshape(-1),
    }
    if args.shared_prompt:  # packing (rl.packing) finds the replies by this field's width
        out["prompt_mask"] = valid[:, :prompt].copy()
    return out


def old_logprobs(graphdef, params, batch, args) -> np.ndarray:
    """The initial policy's log-probs plus a fixed random offset on response tokens."""
    import jax

    from memr1.rl.logprobs import sequence_logprobs

    fn = jax.jit(lambda p, x, v: sequence_logprobs(graphdef, p, x, v, chunk=args.logprob_chunk)[0])
    logp = np.asarray(fn(params, batch["tokens"], batch["valid"]), np.float32)
    noise = np.random.default_rng(args.seed + 1).normal(0.0, args.old_logp_noise, logp.shape)
    return (logp + noise * batch["response_mask"]).astype(np.float32)


def summarise(engine: str, times: list[float], first: float, args, n_params: int, extra) -> dict:
    step_s = float(np.median(times))
    tokens = args.batch * args.length
    flops = 6.0 * n_params * tokens / step_s
    return {
        "engine": engine,
        "step_s": step_s,
        "step_s_min": float(min(times)),
        "tok_per_s": tokens / step_s,
        "model_tflops": flops / 1e12,
        "mfu": flops / (args.peak_tflops * 1e12) if args.peak_tflops else None,
        "first_step_s": first,
        **extra,
    }


def measure(factories: list, args) -> list[tuple[dict, dict]]:
    """Runs every engine for warm-up + timed steps; returns (row, first-step check) per engine.

    An engine has `name`, `n_params`, `step()` (blocks until done; returns the first-step loss
    figures on its first call) and `finish()` (extra report fields; frees its memory). With
    `args.interleave` the engines alternate step by step, so a load change on a shared machine
    slows them alike; otherwise each is built, run and freed in turn (what a GPU needs when the
    two sides do not fit on it together).
    """
    groups = [factories] if args.interleave else [[f] for f in factories]
    out = []
    for group in groups:
        engines = [make() for make in group]
        times = {id(e): [] for e in engines}
        first, checks = {}, {}
        for i in range(args.warmup + args.steps):
            for e in engines:
                t0 = time.perf_counter()
                check = e.step()
                dt = time.perf_counter() - t0
                if i == 0:
                    first[id(e)], checks[id(e)] = dt, check
                elif i >= args.warmup:
                    times[id(e)].append(dt)
        for e in engines:
            extra = e.finish()
            row = summarise(e.name, times[id(e)], first[id(e)], args, e.n_params, extra)
            print(json.dumps(row, default=float), flush=True)
            out.append((row, checks[id(e)]))
    return out


def compare(ours: dict, theirs: dict, rtol: float) -> dict:
    """|ours - torch| <= rtol |torch| + 1e-6 for the loss and the gradient norm."""
    out = {"rtol": rtol, "ok": True}
    for key in ("loss", "grad_norm"):
        a, b = ours[key], theirs[key]
        ok = abs(a - b) <= rtol * abs(b) + 1e-6
        out[key] = {"memr1": a, "torch": b, "abs_diff": abs(a - b), "ok": ok}
        out["ok"] &= ok
    out["pg_loss"] = {"memr1": ours["pg_loss"], "torch": theirs["pg_loss"]}
    return out


# ----------------------------------------------------------------------------------------------
# Main.
# ----------------------------------------------------------------------------------------------


def print_report(report: dict) -> None:
    print(f"\n{report['model']} | batch {report['batch']} x {report['length']} tokens")
    head = f"{'engine':<30} {'step ms':>9} {'tok/s':>10} {'TFLOP/s':>9} {'MFU':>6} {'peak':>10}"
    print(head)
    for r in report["rows"]:
        mfu = f"{100 * r['mfu']:5.1f}%" if r["mfu"] is not None else f"{'-':>6}"
        peak = r["peak_device_bytes"]
        peak = f"{peak / 2**30:7.2f}GiB" if peak else f"{'n/a':>10}"
        print(
            f"{r['engine']:<30} {1e3 * r['step_s']:9.1f} {r['tok_per_s']:10.0f} "
            f"{r['model_tflops']:9.4f} {mfu} {peak}"
        )
    ours = report["rows"][0]
    temp = ours["xla_memory"]["temp"]
    temp = f"{temp / 2**30:.2f} GiB" if temp is not None else "n/a"
    print(f"memr1: compile {ours['compile_s']:.1f} s, XLA temporaries {temp}")
    c = report.get("loss_check")
    if c:
        for key in ("loss", "grad_norm"):
            v = c[key]
            print(
                f"first-step {key}: memr1 {v['memr1']:.7g}  torch {v['torch']:.7g}  "
                f"|diff| {v['abs_diff']:.2e}  {'ok' if v['ok'] else 'MISMATCH'} (rtol {c['rtol']})"
            )
        print(f"memr1 / fastest PyTorch tokens/s = {report['speedup_vs_torch']:.2f}x")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.gpu:
        # JAX would otherwise reserve 75% of the GPU up front and starve the PyTorch baseline.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    elif args.cpu_threads:
        # XLA:CPU sizes its thread pool once, at start-up, from these flags.
        n = args.cpu_threads
        eigen = "false" if n == 1 else "true"
        flags = f"--xla_cpu_multi_thread_eigen={eigen} intra_op_parallelism_threads={n}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()
    import jax

    from memr1.models.config import get_size
    from memr1.models.transformer import count_params
    from memr1.train import mesh, state

    bg, engines = _tool("bench_generate"), _tool("bench_train_engines")
    if args.gpu:
        bg.require_gpu(need_torch=not args.no_torch)
    cfg = get_size(args.size, param_dtype="float32", dtype=args.dtype, remat=args.remat)
    m = mesh.build_mesh(1, -1, 1, model_cfgs=[cfg])
    optim = state.OptimConfig(lr=args.lr, warmup_steps=0)
    setup, st = state.create_train_state(m, cfg, optim, seed=args.seed)
    ref_dtype = "bfloat16" if args.dtype == "bfloat16" else None
    ref = state.make_reference(setup, st.params, ref_dtype) if args.kl_beta > 0 else None
    n_params = count_params(st.params)
    batch = make_batch(cfg, args)
    batch["old_logp"] = old_logprobs(setup.graphdef, st.params, batch, args)
    report = {
        "date": datetime.date.today().isoformat(),
        "machine": args.machine,
        "device": str(jax.devices()[0]),
        "model": f"{args.size} ({n_params / 1e6:.1f}M params, fp32 master, {args.dtype} compute"
        f"{', remat' if args.remat else ''})",
        "n_params": n_params,
        "batch": args.batch,
        "length": args.length,
        "response_tokens": int(batch["response_mask"].sum()),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rows": [],
    }
    factories = []
    if not args.no_torch:
        device = "cuda" if args.gpu else "cpu"
        for threads in [None] if device == "cuda" else args.torch_threads:
            factories.append(
                lambda threads=threads: engines.TorchEngine(
                    bg, cfg, st.params, ref, batch, args, n_params, device, threads
                )
            )
    # Last: the JAX step donates the state that the PyTorch twins are copied from.
    factories.append(
        lambda: engines.JaxEngine(setup, st, batch, ref, args, n_params, bg.device_peak_bytes)
    )
    results = measure(factories, args)
    ours, our_check = results[-1]
    torch_rows = [row for row, _ in results[:-1]]
    torch_check = results[0][1] if torch_rows else None
    report["rows"] = [ours, *torch_rows]
    report["first_step"] = {"memr1": our_check, "torch": torch_check}
    status = 0
    if torch_rows:
        report["loss_check"] = compare(our_check, torch_check, args.loss_rtol)
        best = max(r["tok_per_s"] for r in torch_rows)
        report["speedup_vs_torch"] = ours["tok_per_s"] / best
        status = 0 if report["loss_check"]["ok"] else 1
    print_report(report)
    if args.json:
        from memr1.atomic import write_json_atomic

        write_json_atomic(args.json, report, indent=1, default=float)
    if status:
        print("error: the two steps disagree on the first step; the timings are not comparable")
    return status


if __name__ == "__main__":
    sys.exit(main())
