"""Expected device memory of GRPO or PPO training (full-parameter or LoRA), per backbone and device.

  python tools/memory_estimate.py [--rows-per-device 2] [--prompt 4096] [--response 2048]
                                  [--setup 1x141GB --setup v5p-16] [--algo ppo] [--lora-rank 8]
                                  [--json OUT]

With --lora-rank the parameters include the qwix LoRA adapters (`memr1.train.lora`) and only
they have AdamW moments, gradients and an accumulator; everything else is counted as for full
fine-tuning (the reference is still a full copy, and the adapters' own activations, rank-wide,
are not counted).

Nothing is allocated: parameter and AdamW shapes come from `jax.eval_shape` of the real model
and optimiser, each array is divided over the mesh by the same logical-axis rules the trainer
uses (`memr1.sharding.DEFAULT_RULES`), and the rest is arithmetic on the model's dimensions.

Per device, the estimate is

  resident = params (float32 master) + AdamW moments + reference (bf16)
             [+ PPO: the critic's float32 weights and AdamW moments]
             [+ manager stage: the frozen Answer Agent, bf16, sharded like the policy, and on
                several hosts also its process-local replica, whole on every device]
  update   = gradients (+ the critic's) + max(float32 accumulators + activations,
                                              optimiser temporaries)
  rollout  = decode copy + KV cache (the rollout engine's page pool, or the reference
             sampler's dense rows) + one layer's prefill attention
  save     = 0 (an asynchronous checkpoint save's copy of the state is in host memory)
  total    = resident + max(update, rollout) + save

because the rollout and the update alternate and share only the resident state. A checkpoint
save (`memr1.train.host_memory.host_copy`) moves the state's arrays straight into the devices'
host memory space before the writer starts, so the steps that run while it writes reuse the
state's own buffers (they donate it) and the device holds nothing for it; each host holds its
devices' shards of the saved state (the row's `save["host"]`, a device's weights, AdamW moments,
critic and its moments; column "ckpt-host") until the write ends. No compute-dtype copy of the
trained weights exists: the model casts each weight inside its matmul
(`memr1.train.state`). The decode copy is the bf16 copy of the weights a rollout samples from
(`memr1.sampling.layout.rollout_params`): whole on every device of the data x fsdp axes, split
only over the tensor axis, so each device decodes its own share of the rows. On one host it
lives for one sampler call, and in the manager stage the frozen Answer Agent samples from its
own sharded copy after the policy's is dropped, so one decode copy exists at a time. On several
hosts (`SETUPS[...]["hosts"]`) a process samples from process-local replicas
(`memr1.train.multihost`): the policy's, made per rollout, and the answerer's, made once for the
run (`memr1.train.stages.reward_env`), each whole on every device, so the answerer's replica
is resident beside the policy's decode copy. The rows of the KV cache are divided over
data x fsdp, as the sampler splits them. With `--kv-tokens` (config `engine.kv_tokens`, what
`recipe=paper` sets) the cache is the rollout engine's pool of that many tokens a device
(`memr1.sampling.engine`), whatever the rows; without it, the reference sampler's dense
`[rows, prompt + response]` cache (an upper bound of the engine's pool at `kv_tokens` 0).
`--prefill-prompts` (`engine.prefill_prompts`) caps the prompts a device prefills at once.

The PPO critic (`memr1.rl.critic.ValueModel`: the policy's trunk without its LM head) trains
beside the policy: float32 weights, two moments, its gradient and accumulator, ~20 bytes a
parameter (16 without accumulation), and its own saved block inputs.

Activations, at the peak of the backward pass of one micro-batch with per-block remat: every
block's input kept in the compute dtype (and with `model.remat_policy` "minimal" the outputs of
its weight matmuls: q, k, v, the attention output's projection, gate, up and down, ~3D + 2F +
2KN elements a token), plus the larger of two phases that never overlap.
The unembedding's, first in the backward: one log-prob chunk's float32 [rows, chunk, V] logits,
log-softmax and gradient, and the head's weight as a compute-dtype cast and a whole float32
gradient (summed over the rows before it is reduce-scattered), plus under FSDP the float32
weight gathered whole: ~10 bytes x V x D a device, 5 GiB at Qwen-7B widths, whatever the layer
count. Then one block at a time: its recompute and backward (~10 [T, D] and 4 [T, F] tensors,
and the [rows, heads, T, T] attention scores at ~12 bytes each: float32 scores and
probabilities and their gradient, an upper bound where `model.attention` chunks them; a fused
kernel, what "auto" runs on an accelerator (flash on GPU and splash on TPU for packed rows,
`--attention`), keeps none, only ~8 bytes of row statistics a query and head), and under FSDP
its float32 weights gathered, double-buffered. With `model.scan_layers` (the recipe's) the
blocks' weight shards are also stacked inside the step for the whole pass, and
their gradient accumulated stacked: two block-weight-sized buffers. The guarded optimiser update
then computes new weights and both new moments before choosing them or the old ones: three
float32 trained-size temporaries, after the activations are gone. Not counted: fragmentation
and the CUDA context; the verdict keeps `--margin` (10%) of the device free for them: "yes"
below 90%, "tight" up to 100%, "no" above. Every array is assumed sharded as the trainer shards
it, including the backbone as loaded and the frozen Answer Agent.

The packed GRPO update (`train.shared_prompt`, the recipe's: one row a group,
`memr1.rl.packing`) is a whole row of its packed width: `rows_per_device` packed groups,
`prompt` + `response` = the row's width, `response` its reply columns, where the head runs in
[rows, chunk, V] chunks. The KL reference's log-probs are their own forward-only program
(`steps.make_grpo_reference`, once per rollout), so only its bf16 weights are resident here,
not its activations.

Check against XLA's own plan (arguments + outputs + temporaries - aliased, on fake CPU
devices, `backend="cpu"`: XLA:CPU computes bf16 in float32): `tools/bench/memory_vs_xla.py` (rows
run whole) and `tools/bench/bench_pod_step.py` (the recipe's packed step, and its sampler calls
compiled in float32), within 15% at tiny and Qwen widths with a few blocks
(docs/benchmarks.md). Not modelled: an unrolled layer loop on XLA:CPU (`model.scan_layers`
off), where XLA drops remat's optimisation barriers and keeps every block's activations
(`tools/bench/remat_memory.py`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from memr1.torchless import without_torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # configs/, as a script


def _parts():
    """tools/memory_parts.py as a module (tools/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "memory_parts", Path(__file__).with_name("memory_parts.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


parts = _parts()

GIB = 2**30
# Device memory per chip: GPUs as nvidia-smi reports it (MiB), TPUs as Google's spec sheets give
# it (v5e 16 GB, v5p 95 GB of HBM a chip). `hosts`: processes of the run (one a host); with
# more than one, every process samples with a process-local replica of the weights
# (`memr1.train.multihost`), whole on each of its devices.
SETUPS = {
    "1x141GB": {"devices": "1x H200 (141 GB)", "mesh": (1, 1, 1), "hosts": 1,
                "capacity": 143_771 * 2**20},
    "1x80GB": {"devices": "1x H100 (80 GB)", "mesh": (1, 1, 1), "hosts": 1,
               "capacity": 81_559 * 2**20},
    "2x141GB-fsdp": {"devices": "2x H200", "mesh": (1, 2, 1), "hosts": 1,
                     "capacity": 143_771 * 2**20},
    "8x80GB-fsdp": {"devices": "8x H100 (80 GB)", "mesh": (1, 8, 1), "hosts": 1,
                    "capacity": 81_559 * 2**20},
    "4x80GB-fsdp": {"devices": "4x H100 (80 GB)", "mesh": (1, 4, 1), "hosts": 1,
                    "capacity": 81_559 * 2**20},
    "16x80GB-2hosts": {"devices": "2 hosts x 8 H100", "mesh": (1, 16, 1), "hosts": 2,
                       "capacity": 81_559 * 2**20},
    "v5e-8": {"devices": "TPU v5e, 8 chips, 1 host", "mesh": (1, 8, 1), "hosts": 1,
              "capacity": 16 * 10**9},
    "v5e-16": {"devices": "TPU v5e, 16 chips, 4 hosts", "mesh": (1, 16, 1), "hosts": 4,
               "capacity": 16 * 10**9},
    "v5e-64": {"devices": "TPU v5e, 64 chips, 16 hosts", "mesh": (1, 64, 1), "hosts": 16,
               "capacity": 16 * 10**9},
    "v5p-8": {"devices": "TPU v5p, 4 chips, 1 host", "mesh": (1, 4, 1), "hosts": 1,
              "capacity": 95 * 10**9},
    "v5p-16": {"devices": "TPU v5p, 8 chips, 2 hosts", "mesh": (1, 8, 1), "hosts": 2,
               "capacity": 95 * 10**9},
    "v5p-32": {"devices": "TPU v5p, 16 chips, 4 hosts", "mesh": (1, 16, 1), "hosts": 4,
               "capacity": 95 * 10**9},
}  # fmt: skip
DEFAULT_SETUPS = ("1x141GB", "8x80GB-fsdp", "4x80GB-fsdp", "16x80GB-2hosts", "v5p-16", "v5e-16")


@dataclasses.dataclass(frozen=True)
class Workload:
    """What one device processes (paper: micro-batch 2 per GPU, prompt 4096 + response 2048)."""

    rows_per_device: int = 2  # training micro-batch rows on one device
    prompt: int = 4096
    response: int = 2048
    rollout_prompts: int = 8  # prompts per sampler call (config agents.batch_size)
    group: int = 8  # G samples per prompt (config train.group_size)
    logprob_chunk: int = 128
    kl_beta: float = 0.001  # > 0 keeps a bf16 reference policy
    grad_accum: bool = True  # the update's micro-batch scan carries a float32 accumulator
    stage: str = "manager"  # the manager stage also holds the frozen Answer Agent
    algo: str = "grpo"  # "ppo" also trains the critic (memr1.rl.critic.ValueModel)
    param_dtype: str = "float32"
    compute_dtype: str = "bfloat16"
    lora_rank: int = 0  # > 0: only qwix LoRA adapters of this rank train (memr1.train.lora)
    # "cpu": XLA:CPU computes bfloat16 ops in float32 (its float normalisation), so a block's
    # intermediates take 4 bytes an element there; "accelerator" keeps them in the compute dtype.
    backend: str = "accelerator"
    # The blocks of the update run as one `lax.scan` (config model.scan_layers, recipe=paper's):
    # their weights and gradient stacked inside the step.
    scan_layers: bool = True
    # What remat keeps of a block (config model.remat_policy): "full" its input, "minimal" also
    # the outputs of its weight matmuls.
    remat_policy: str = "full"
    # The update's attention kernel (config model.attention): "auto" resolves to a fused flash
    # kernel on an accelerator (no [T, T] scores) and to one that materialises them on a CPU.
    attention: str = "auto"
    # The rollout engine's page pool, KV tokens a device (config engine.kv_tokens); 0: the
    # reference sampler's dense cache of the call's rows.
    kv_tokens: int = 0
    # Prompts a device prefills in one program (config engine.prefill_prompts); 0: every prompt
    # of the call at once, as the reference sampler does.
    prefill_prompts: int = 0

    def __post_init__(self):
        for name in ("rows_per_device", "prompt", "response", "rollout_prompts", "group",
                     "logprob_chunk", "lora_rank", "kv_tokens", "prefill_prompts"):  # fmt: skip
            if getattr(self, name) < 0:
                raise ValueError(f"Workload.{name} must be >= 0, got {getattr(self, name)}")


def estimate(
    size: str, setup: str, w: Workload = Workload(), margin: float = 0.1, layers: int | None = None
) -> dict:
    """Per-device bytes of every component, the total and the verdict for one setup.

    Args:
      size: a key of `memr1.models.config.SIZES`.
      setup: a key of `SETUPS` (mesh data x fsdp x tensor, hosts and device capacity).
      layers: count only that many blocks (default: the size's own).
    Returns:
      A dict of byte counts (see the module docstring for how they add up), `total`,
      `capacity`, `fits` ("yes" / "tight" / "no") and any mesh divisibility problems.
    """
    spec = SETUPS[setup]
    mesh = dict(zip(("data", "fsdp", "tensor"), spec["mesh"], strict=True))
    hosts = spec["hosts"]
    cfg, params, trainable, opt = parts.abstract_state(size, w.param_dtype, w.lora_rank, layers)
    p_bytes, problems = parts.shard_bytes(mesh, params)
    t_bytes, _ = parts.shard_bytes(mesh, trainable)
    o_bytes, _ = parts.shard_bytes(mesh, opt)
    p_item, c_item = (4 if d == "float32" else 2 for d in (w.param_dtype, w.compute_dtype))
    elems = p_bytes // p_item  # parameter elements held by this device
    t_elems = t_bytes // p_item  # of which trained (all of them without LoRA)
    # Frozen copies (reference, Answer Agent) and the decode copy are kept in the compute dtype,
    # or the storage dtype where it is narrower (`memr1.sampling.layout.decode_dtype`). No
    # compute-dtype copy of the trained weights exists: each matmul casts its weight.
    f_item = min(p_item, c_item)
    reference = elems * f_item if w.kl_beta > 0 else 0
    partner, partner_replica = parts.partner_bytes(
        w, params, trainable, elems - (t_elems if w.lora_rank else 0), p_item, f_item, hosts
    )
    critic, critic_opt, critic_grads, critic_accum, critic_act = parts.critic_bytes(
        size, w, mesh, cfg, p_item, c_item, layers
    )
    grads = t_elems * p_item
    accum = t_elems * 4 if w.grad_accum else 0  # accumulated in float32 whatever the dtype
    act = parts.activation_bytes(cfg, mesh, w, c_item)
    # The guarded optimiser update computes new weights and both new moments before it picks
    # them or the old ones (`memr1.train.update.guarded_update`): three trained-size temporaries,
    # after the backward pass's activations are gone.
    optimizer = 3 * (t_elems * 4 + critic_grads)
    roll = parts.rollout_bytes(cfg, mesh, w, c_item, params, f_item, hosts)
    resident = p_bytes + o_bytes + reference + partner + partner_replica + critic + critic_opt
    backward = accum + critic_accum + act["total"] + critic_act
    update = grads + critic_grads + max(backward, optimizer)
    # A save's copy of the state goes straight to host memory (`host_memory.host_copy`).
    save = {"device": 0, "host": p_bytes + o_bytes + critic + critic_opt}
    total = resident + max(update, roll["total"]) + save["device"]
    capacity = spec["capacity"]
    fits = "yes" if total <= (1 - margin) * capacity else ("tight" if total <= capacity else "no")
    return {
        "size": size,
        "setup": setup,
        "devices": spec["devices"],
        "mesh": spec["mesh"],
        "hosts": hosts,
        "params_per_device": elems,
        "trained_params_per_device": t_elems,
        "params": p_bytes,
        "adamw": o_bytes,
        "reference": reference,
        "answer_agent": partner,
        "answer_agent_replica": partner_replica,
        "critic": critic + critic_opt,
        "critic_grads": critic_grads + critic_accum,
        "grads": grads,
        "grad_accum": accum,
        "optimizer_temps": optimizer,
        "activations": act,
        "rollout": roll,
        "save": save,
        "resident": resident,
        "update": update,
        "total": total,
        "capacity": capacity,
        "fits": fits,
        "mesh_problems": problems,
        "workload": dataclasses.asdict(w),
    }


def format_table(rows: list[dict]) -> str:
    cols = ("size", "setup", "params", "adamw", "ref", "agent", "agent*", "critic", "grads")
    cols += ("accum", "act", "decode", "rollout", "save", "total", "device", "fits", "ckpt-host")
    lines = [cols]
    for r in rows:
        gib = lambda n: f"{n / GIB:.1f}"
        lines.append(
            (
                r["size"],
                r["setup"],
                gib(r["params"]),
                gib(r["adamw"]),
                gib(r["reference"]),
                gib(r["answer_agent"]),
                gib(r["answer_agent_replica"]),
                gib(r["critic"] + r["critic_grads"]),
                gib(r["grads"]),
                gib(r["grad_accum"]),
                gib(r["activations"]["total"]),
                gib(r["rollout"]["decode_copy"]),
                gib(r["rollout"]["total"]),
                gib(r["save"]["device"]),
                gib(r["total"]),
                gib(r["capacity"]),
                r["fits"] + (" (mesh!)" if r["mesh_problems"] else ""),
                gib(r["save"]["host"]),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    cell = lambda i, c: c.ljust(widths[i]) if i < 2 else c.rjust(widths[i])
    return "\n".join("  ".join(cell(i, c) for i, c in enumerate(line)) for line in lines)


def main(argv: list[str] | None = None) -> int:
    from memr1.models.config import SIZES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size", action="append", choices=list(SIZES), help="default: all")
    p.add_argument("--setup", action="append", choices=list(SETUPS), help="default: all")
    p.add_argument("--rows-per-device", type=int, default=Workload.rows_per_device)
    p.add_argument("--prompt", type=int, default=Workload.prompt)
    p.add_argument("--response", type=int, default=Workload.response)
    p.add_argument("--rollout-prompts", type=int, default=Workload.rollout_prompts)
    p.add_argument("--group", type=int, default=Workload.group)
    p.add_argument("--kl-beta", type=float, default=Workload.kl_beta)
    p.add_argument("--grad-accum", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--param-dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--stage", default="manager", choices=("manager", "answer"))
    p.add_argument("--algo", default="grpo", choices=("grpo", "ppo"))
    p.add_argument("--lora-rank", type=int, default=0, help="train LoRA adapters only (0: off)")
    p.add_argument(
        "--scan-layers", action=argparse.BooleanOptionalAction, default=Workload.scan_layers,
        help="the update's blocks as one lax.scan (model.scan_layers, recipe=paper's)",
    )  # fmt: skip
    p.add_argument(
        "--remat-policy", default=Workload.remat_policy, choices=("full", "minimal"),
        help="what a rematerialised block keeps (model.remat_policy)",
    )  # fmt: skip
    p.add_argument(
        "--attention", default=Workload.attention, choices=parts.ATTENTION,
        help="the update's attention kernel (model.attention; auto: fused on an accelerator)",
    )  # fmt: skip
    p.add_argument("--kv-tokens", type=int, default=0, help="the engine's pool a device (0: dense)")
    p.add_argument("--prefill-prompts", type=int, default=0, help="a device's prefill (0: all)")
    p.add_argument("--margin", type=float, default=0.1, help="share of the device kept free")
    p.add_argument("--json", type=Path, help="also write every row as JSON")
    args = p.parse_args(argv)
    try:  # every Workload field the command line names, by the same name
        fields = {f.name for f in dataclasses.fields(Workload)}
        w = Workload(**{k: v for k, v in vars(args).items() if k in fields})
    except ValueError as err:
        p.error(str(err))
    rows = [
        estimate(size, setup, w, args.margin)
        for size in args.size or list(SIZES)
        for setup in args.setup or DEFAULT_SETUPS
    ]
    cache = f"engine pool {w.kv_tokens} tokens" if w.kv_tokens else "dense cache"
    print(
        f"per device, GiB | {w.rows_per_device} rows x {w.prompt + w.response} tokens per "
        f"micro-batch, rollout {w.rollout_prompts} prompts x G={w.group} ({cache}), "
        f"{w.param_dtype} master, KL beta {w.kl_beta}, grad accumulation {w.grad_accum}, "
        f"{w.stage} stage, {w.algo}" + (f", LoRA rank {w.lora_rank}" if w.lora_rank else "")
    )
    print(format_table(rows))
    print(
        "total = params + adamw + ref + agent + agent* + critic + max(update, rollout) + save; "
        "update = grads + max(accum + act, optimiser temporaries); rollout = decode + KV cache "
        "+ prefill; agent* = the answerer's process-local replica (several hosts); save = a "
        "checkpoint save's device bytes, ckpt-host = its host-memory copy of a device's shards"
    )
    if args.json:
        from memr1.atomic import write_json_atomic

        write_json_atomic(args.json, rows, indent=1)
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
