"""`tools/memory_estimate.py` against XLA's own plan of the GRPO update, compiled on fake devices.

  python tools/bench/memory_vs_xla.py [--devices 8] [--case tiny:2:32:256:64:1 ...] [--json OUT]

A case is SIZE:LAYERS:ROWS:PROMPT:RESPONSE:N_MICRO: the size's real widths with LAYERS blocks,
ROWS rows of PROMPT + RESPONSE tokens a step over every device (FSDP), N_MICRO micro-batches.
The step is the trainer's own (`memr1.train.steps.make_grpo_step`: float32 master weights,
bfloat16 compute, remat, KL β 0.001 against a bfloat16 reference, every row run whole), lowered
from abstract inputs and compiled, nothing run. `model.scan_layers` is on: without it XLA:CPU
drops remat's barriers and keeps every block's activations (docs/benchmarks.md), which no
accelerator does. XLA's peak is argument + output + temporaries - aliased (donated) bytes of
`compiled.memory_analysis()`; the estimate's matching part is the resident training state
(params, AdamW, reference) plus the update (gradients, accumulator, activations), at
`backend="cpu"` (XLA:CPU computes bfloat16 in float32, so a block's intermediates are 4 bytes).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import sys
from pathlib import Path

import numpy as np

from memr1.torchless import without_torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # configs/, as a script
sys.path.insert(0, str(ROOT / "tools"))  # memory_estimate
sys.path.insert(0, str(ROOT / "tools" / "bench"))  # pod_step_costs

MACHINE = "2-core AMD EPYC x86-64 (AVX-512), 24 GB, no GPU"
DEFAULT_CASES = ("tiny:2:32:256:64:1", "tiny:4:32:256:64:1", "tiny:2:32:512:128:1")
SETUP_OF = {8: "8x80GB-fsdp", 4: "4x80GB-fsdp", 2: "2x141GB-fsdp", 1: "1x141GB"}


@dataclasses.dataclass(frozen=True)
class Case:
    size: str
    layers: int
    rows: int
    prompt: int
    response: int
    n_micro: int

    @classmethod
    def parse(cls, text: str) -> Case:
        parts = text.split(":")
        if len(parts) != 6:
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected SIZE:LAYERS:ROWS:PROMPT:RESPONSE:N_MICRO"
            )
        return cls(parts[0], *map(int, parts[1:]))


def xla_peak(case: Case) -> dict:
    """XLA's memory plan of the GRPO step of `case` (bytes), on every visible device."""
    import jax
    import pod_step_costs as costs

    from memr1.models.config import get_size
    from memr1.rl.grpo import GRPOConfig
    from memr1.train import mesh as mesh_lib
    from memr1.train import state, steps

    cfg = get_size(case.size, n_layers=case.layers, dtype="bfloat16", param_dtype="float32",
                   remat=True, scan_layers=True, attention="einsum")  # fmt: skip
    m = mesh_lib.build_mesh(1, jax.device_count(), 1, model_cfgs=[cfg])
    optim = state.OptimConfig(lr=1e-6, warmup_steps=1)
    setup, _ = state.create_train_state(m, cfg, optim, materialize=False)
    prompts = np.full(case.rows, case.prompt)
    replies = np.full(case.rows, case.response)
    (batch,) = costs.update_batch(prompts, replies, 1, case.response, "bucketed")
    grpo = GRPOConfig(clip_eps=0.2, kl_beta=0.001, kl_estimator="k3", temperature=1.0,
                      n_micro=case.n_micro, pack_group=1, dual_clip=3.0)  # fmt: skip
    step = steps.make_grpo_step(setup, grpo)
    lowered = step.lower(setup.abstract_state, costs.abstract_batch(setup, batch, case.rows))
    out = costs.xla_memory(lowered.compile())
    out["width"] = int(batch["tokens"].shape[1])
    return out


def estimated(case: Case, devices: int, width: int) -> dict:
    """The estimate's update program: resident state (no Answer Agent) + the update."""
    import memory_estimate as me

    w = me.Workload(rows_per_device=case.rows // case.n_micro // devices, prompt=width,
                    response=0, stage="answer", backend="cpu")  # fmt: skip
    est = me.estimate(case.size, SETUP_OF[devices], w, layers=case.layers)
    act = est["activations"]
    parts = {
        "state": est["params"] + est["adamw"] + est["reference"],
        "grads": est["grads"] + est["grad_accum"],
        "activations": act["total"],
        "optimizer_temps": est["optimizer_temps"],
        "phase": act["phase"],
    }
    parts["total"] = est["resident"] + est["update"]
    return parts


def run(cases, devices: int) -> list[dict]:
    rows = []
    for case in cases:
        xla = xla_peak(case)
        est = estimated(case, devices, xla["width"])
        rows.append({**dataclasses.asdict(case), "xla": xla, "estimate": est,
                     "estimate_over_xla": est["total"] / xla["peak"]})  # fmt: skip
        print(format_row(rows[-1]), flush=True)
    return rows


def format_row(r: dict) -> str:
    mib = lambda n: f"{n / 2**20:9.1f}"
    e = r["estimate"]
    return (
        f"{r['size']:>11} {r['layers']:>2}L {r['rows']:>3}x{r['xla']['width']:<5} "
        f"micro {r['n_micro']} | XLA peak {mib(r['xla']['peak'])} MiB (args "
        f"{mib(r['xla']['argument'])}, temp {mib(r['xla']['temp'])}) | estimate "
        f"{mib(e['total'])} (state {mib(e['state'])}, grads {mib(e['grads'])}, act "
        f"{mib(e['activations'])} [{e['phase']}]) | est/xla {r['estimate_over_xla']:.2f}"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--devices", type=int, default=8, choices=sorted(SETUP_OF))
    p.add_argument("--case", action="append", type=Case.parse, help="default: " + " ".join(
        DEFAULT_CASES))  # fmt: skip
    p.add_argument("--machine", default=MACHINE)
    p.add_argument("--json", type=Path)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    flag = f"--xla_force_host_platform_device_count={args.devices}"
    if "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    if jax.device_count() != args.devices:
        print(f"memory_vs_xla: {jax.device_count()} devices, expected {args.devices}",
              file=sys.stderr)  # fmt: skip
        return 2
    cases = args.case or [Case.parse(c) for c in DEFAULT_CASES]
    rows = run(cases, args.devices)
    if args.json:
        report = {"date": datetime.date.today().isoformat(), "machine": args.machine,
                  "devices": args.devices, "rows": rows}  # fmt: skip
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
