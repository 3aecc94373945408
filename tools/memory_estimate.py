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
  rollout  = decode copy + KV cache of the rollout rows + one layer's prefill attention
  total    = resident + max(update, rollout)

because the rollout and the update alternate and share only the resident state. No compute-dtype
copy of the trained weights exists: the model casts each weight inside its matmul
(`memr1.train.state`). The decode copy is the bf16 copy of the weights a rollout samples from
(`memr1.sampling.layout.rollout_params`): whole on every device of the data x fsdp axes, split
only over the tensor axis, so each device decodes its own share of the rows. On one host it
lives for one sampler call, and in the manager stage the frozen Answer Agent samples from its
own sharded copy after the policy's is dropped, so one decode copy exists at a time. On several
hosts (`SETUPS[...]["hosts"]`) a process samples from process-local replicas
(`memr1.train.multihost`): the policy's, made per rollout, and the answerer's, made once for the
run (`memr1.train.__main__.reward_env`), each whole on every device, so the answerer's replica
is resident beside the policy's decode copy. The rows of the KV cache are divided over
data x fsdp, as the sampler splits them.

The PPO critic (`memr1.rl.critic.ValueModel`: the policy's trunk without its LM head) trains
beside the policy: float32 weights, two moments, its gradient and accumulator, ~20 bytes a
parameter (16 without accumulation), and its own saved block inputs.

Activations, at the peak of the backward pass of one micro-batch with per-block remat: every
block's input kept in the compute dtype, plus the larger of two phases that never overlap.
The unembedding's, first in the backward: one log-prob chunk's float32 [rows, chunk, V] logits,
log-softmax and gradient, and the head's weight as a compute-dtype cast and a whole float32
gradient (summed over the rows before it is reduce-scattered), plus under FSDP the float32
weight gathered whole: ~10 bytes x V x D a device, 5 GiB at Qwen-7B widths, whatever the layer
count. Then one block at a time: its recompute and backward (~10 [T, D] and 4 [T, F] tensors,
and the [rows, heads, T, T] attention scores at ~12 bytes each: float32 scores and
probabilities and their gradient; an upper bound where `model.attention` chunks or fuses it),
and under FSDP its float32 weights gathered, double-buffered. The guarded optimiser update
then computes new weights and both new moments before choosing them or the old ones: three
float32 trained-size temporaries, after the activations are gone. Not counted: fragmentation
and the CUDA context; the verdict keeps `--margin` (10%) of the device free for them: "yes"
below 90%, "tight" up to 100%, "no" above. Every array is assumed sharded as the trainer shards
it, including the backbone as loaded and the frozen Answer Agent.

Check against XLA's own plan: `tools/memory_vs_xla.py` compiles the real GRPO step on fake CPU
devices (rows run whole, `model.scan_layers`, `backend="cpu"`: XLA:CPU computes bf16 in float32)
and sets its peak (arguments + outputs + temporaries - aliased) against this estimate: within
15% at tiny and Qwen widths with a few blocks (docs/benchmarks.md). Not modelled: the
shared-prompt update (`train.shared_prompt`, whose prompt runs once per group through a KV
cache), and XLA:CPU's unrolled layer loop, where it drops remat's optimisation barriers and
keeps every block's activations (`tools/remat_memory.py`); `tools/bench_pod_step.py` compiles
those and shows the gap.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # configs/, as a script

GIB = 2**30
# Device memory per chip: GPUs as nvidia-smi reports it (MiB), TPUs as Google's spec sheets give
# it (v5e 16 GB, v5p 95 GB of HBM a chip). `hosts`: processes of the run (one a host); with
# more than one, every process samples with a process-local replica of the weights
# (`memr1.train.multihost`), whole on each of its devices.
SETUPS = {
    "1x141GB": {"devices": "1x H200 (141 GB)", "mesh": (1, 1, 1), "hosts": 1,
                "capacity": 143_771 * 2**20},
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


def shard_bytes(mesh: dict[str, int], tree) -> tuple[int, list[str]]:
    """Bytes of `tree` (abstract, with logical axis names) held by one device, and problems.

    A dimension a mesh axis does not divide is counted rounded up and reported (the trainer's
    `check_divisible` would refuse such a mesh).
    """
    import jax
    from flax import nnx
    from jax.sharding import PartitionSpec

    from memr1.sharding import DEFAULT_RULES, logical_to_spec

    specs = nnx.get_partition_spec(tree)
    spec_leaves = jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, PartitionSpec))
    total, problems = 0, []
    for leaf, names in zip(jax.tree.leaves(tree), spec_leaves, strict=True):
        spec = logical_to_spec(tuple(names), DEFAULT_RULES)
        elems = 1
        for i, dim in enumerate(leaf.shape):
            axes = spec[i] if i < len(spec) else None
            axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
            div = math.prod(mesh[a] for a in axes)
            if dim % div:
                problems.append(f"{tuple(leaf.shape)} dim {i} over {axes}")
            elems *= -(-dim // div)
        total += elems * leaf.dtype.itemsize
    return total, problems


def abstract_state(size: str, param_dtype: str, lora_rank: int = 0, layers: int | None = None):
    """(ModelConfig, abstract params, abstract trainable params, abstract AdamW state) from
    jax.eval_shape; with `lora_rank` the params include the LoRA adapters, which alone train;
    `layers` keeps only that many blocks (to compare with a compiled step of as many)."""
    import jax
    from flax import nnx

    from configs import memr1 as memr1_config
    from memr1.models.config import get_size
    from memr1.models.transformer import abstract_model
    from memr1.train import lora
    from memr1.train.state import OptimConfig, make_optimizer

    # The trainer's settings: LoRA on the config's modules (train.lora_module_path), and its
    # AdamW (whose state's shapes do not depend on the learning rate).
    config = memr1_config.get_config()
    config.train.update(lora_rank=lora_rank, lora_alpha=2.0 * lora_rank)
    cfg = get_size(size, param_dtype=param_dtype)
    if layers is not None:
        cfg = cfg.replace(n_layers=layers)
    if lora_rank:
        module_fn = lora.module_fn(cfg, lora.LoraConfig.from_config(config))
        _, params = nnx.split(nnx.eval_shape(module_fn))
        trainable = nnx.state(params, nnx.LoRAParam)
    else:
        _, params = abstract_model(cfg)
        trainable = params
    opt = jax.eval_shape(make_optimizer(OptimConfig.from_config(config)).init, trainable)
    return cfg, params, trainable, opt


def critic_state(size: str, param_dtype: str, layers: int | None = None):
    """(abstract params, abstract AdamW state) of the PPO critic: the policy's trunk without its
    LM head plus a scalar head (`memr1.rl.critic.ValueModel`), with the critic's AdamW."""
    import jax
    from flax import nnx

    from configs import memr1 as memr1_config
    from memr1.models.config import get_size
    from memr1.rl.critic import ValueModel
    from memr1.train.state import OptimConfig, make_optimizer

    cfg = get_size(size, param_dtype=param_dtype)
    if layers is not None:
        cfg = cfg.replace(n_layers=layers)
    _, params = nnx.split(nnx.eval_shape(lambda: ValueModel(cfg, nnx.Rngs(params=0))))
    optim = OptimConfig.from_config(memr1_config.get_config(), critic=True)
    return params, jax.eval_shape(make_optimizer(optim).init, params)


def activation_bytes(cfg, mesh: dict[str, int], w: Workload, compute_bytes: int) -> dict:
    """Per-device activations of one training micro-batch with per-block remat, at the peak of
    its backward pass: the saved block inputs plus the larger of two phases that never overlap,
    the unembedding's (first in the backward) and one block's recompute (then, block by block).
    """
    tp, fsdp = mesh["tensor"], mesh["fsdp"]
    b, t, d = w.rows_per_device, w.prompt + w.response, cfg.d_model
    h, f, v = cfg.n_heads // tp, cfg.d_ff // tp, cfg.vocab_size // tp
    inner = 4 if w.backend == "cpu" else compute_bytes  # a block's intermediates
    saved = cfg.n_layers * b * t * d * compute_bytes
    # One block recomputed and differentiated: ~10 [T, D] tensors (norm outputs, q/k/v/o,
    # residuals and their gradients), 4 [T, F] ones (gate, up, product, gradient), and the
    # [T, T] attention scores at ~12 bytes each (float32 scores, probabilities, their gradient).
    block = b * t * (10 * d + 4 * f) * inner + b * h * t * t * 12
    gather = 0
    if fsdp > 1:  # the block's float32 weights gathered whole, double-buffered
        per_layer = (cfg.n_heads * 2 + cfg.n_kv_heads * 2) * cfg.head_dim * d + 3 * d * cfg.d_ff
        gather = 2 * per_layer // tp * 4
    # The unembedding: float32 [rows, chunk, V] logits, log-softmax and gradient of one chunk,
    # and the head's weight: its compute-dtype cast and its whole float32 gradient (summed over
    # the rows before it is reduce-scattered), plus, under FSDP, the float32 weight gathered
    # whole; XLA's own buffers at Qwen widths show exactly these (docs/benchmarks.md).
    logits = b * w.logprob_chunk * v * 4 * 3
    head = v * d * (compute_bytes + 4 + (4 if fsdp > 1 else 0))
    head_phase, block_phase = logits + head, block + gather
    return {
        "saved_block_inputs": saved,
        "block_recompute": block,
        "fsdp_gather": gather,
        "logits_chunk": logits,
        "head_weight": head,
        "phase": "head" if head_phase >= block_phase else "block",
        "total": saved + max(head_phase, block_phase),
    }


def rollout_bytes(
    cfg, mesh: dict[str, int], w: Workload, compute_bytes: int, params, weight_bytes: int,
    hosts: int = 1,
) -> dict:  # fmt: skip
    """Per-device decode copy of `params` (`weight_bytes` an element), KV cache of the decode
    rows and the largest prefill temporary. On several hosts the decode copy is the
    process-local replica (`memr1.train.multihost.rollout_replica`): whole on every device."""
    tp, rows_axes = mesh["tensor"], mesh["data"] * mesh["fsdp"]
    # The decode copy: split over the tensor axis only (`memr1.sampling.layout.decode_spec`),
    # or over nothing on several hosts (the replica's mesh is 1 x local devices x 1).
    split = {"data": 1, "fsdp": 1, "tensor": tp if hosts == 1 else 1}
    decode_bytes, _ = shard_bytes(split, params)
    decode = decode_bytes // params_itemsize(params) * weight_bytes
    prompts = -(-w.rollout_prompts // rows_axes)
    rows = -(-w.rollout_prompts * w.group // rows_axes)
    kv_per_token = cfg.n_layers * 2 * (cfg.n_kv_heads // tp) * cfg.head_dim * compute_bytes
    kv = rows * (w.prompt + w.response) * kv_per_token
    # Prefill without gradients: float32 scores and bf16 probabilities of one layer.
    prefill = prompts * (cfg.n_heads // tp) * w.prompt**2 * 6
    return {
        "decode_copy": decode,
        "kv_cache": kv,
        "prefill_attention": prefill,
        "total": decode + kv + prefill,
    }


def params_itemsize(params) -> int:
    """Bytes per element of a parameter tree stored in one dtype."""
    import jax

    (size,) = {leaf.dtype.itemsize for leaf in jax.tree.leaves(params)}
    return size


def estimate(
    size: str,
    setup: str,
    w: Workload = Workload(),
    margin: float = 0.1,
    layers: int | None = None,
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
    cfg, params, trainable, opt = abstract_state(size, w.param_dtype, w.lora_rank, layers)
    p_bytes, problems = shard_bytes(mesh, params)
    t_bytes, _ = shard_bytes(mesh, trainable)
    o_bytes, _ = shard_bytes(mesh, opt)
    p_item = 4 if w.param_dtype == "float32" else 2
    c_item = 4 if w.compute_dtype == "float32" else 2
    elems = p_bytes // p_item  # parameter elements held by this device
    t_elems = t_bytes // p_item  # of which trained (all of them without LoRA)
    # Frozen copies (reference, Answer Agent) and the decode copy are kept in the compute dtype,
    # or the storage dtype where it is narrower (`memr1.sampling.layout.decode_dtype`). No
    # compute-dtype copy of the trained weights exists: each matmul casts its weight.
    f_item = min(p_item, c_item)
    reference = elems * f_item if w.kl_beta > 0 else 0
    # The frozen Answer Agent is a plain model (a LoRA checkpoint is merged when loaded): in
    # the policy's shards, and on several hosts also as the process-local replica the reward
    # samples with, whole on every device for the whole run (`memr1.train.__main__.reward_env`).
    plain = elems - (t_elems if w.lora_rank else 0)
    manager = w.stage == "manager"
    partner = plain * f_item if manager else 0
    plain_whole = shard_bytes({"data": 1, "fsdp": 1, "tensor": 1}, params)[0] // p_item
    if w.lora_rank:
        plain_whole -= shard_bytes({"data": 1, "fsdp": 1, "tensor": 1}, trainable)[0] // p_item
    partner_replica = plain_whole * f_item if manager and hosts > 1 else 0
    # The PPO critic: float32 weights and two AdamW moments resident, its gradient (and
    # accumulator) in the update, and its own saved block inputs (it runs a forward and a
    # backward of its trunk beside the policy's in each micro-batch).
    critic = critic_opt = critic_grads = critic_accum = critic_act = 0
    if w.algo == "ppo":
        c_params, c_opt = critic_state(size, w.param_dtype, layers)
        critic, _ = shard_bytes(mesh, c_params)
        critic_opt, _ = shard_bytes(mesh, c_opt)
        critic_grads = critic // p_item * 4
        critic_accum = critic_grads if w.grad_accum else 0
        critic_act = cfg.n_layers * w.rows_per_device * (w.prompt + w.response) * cfg.d_model
        critic_act *= c_item
    grads = t_elems * p_item
    accum = t_elems * 4 if w.grad_accum else 0  # accumulated in float32 whatever the dtype
    act = activation_bytes(cfg, mesh, w, c_item)
    # The guarded optimiser update computes new weights and both new moments before it picks
    # them or the old ones (`memr1.train.update.guarded_update`): three trained-size temporaries,
    # after the backward pass's activations are gone.
    optimizer = 3 * (t_elems * 4 + critic_grads)
    roll = rollout_bytes(cfg, mesh, w, c_item, params, f_item, hosts)
    resident = p_bytes + o_bytes + reference + partner + partner_replica + critic + critic_opt
    backward = accum + critic_accum + act["total"] + critic_act
    update = grads + critic_grads + max(backward, optimizer)
    total = resident + max(update, roll["total"])
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
    cols += ("accum", "act", "decode", "rollout", "total", "device", "fits")
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
                gib(r["total"]),
                gib(r["capacity"]),
                r["fits"] + (" (mesh!)" if r["mesh_problems"] else ""),
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
    p.add_argument("--margin", type=float, default=0.1, help="share of the device kept free")
    p.add_argument("--json", type=Path, help="also write every row as JSON")
    args = p.parse_args(argv)
    w = Workload(
        rows_per_device=args.rows_per_device,
        prompt=args.prompt,
        response=args.response,
        rollout_prompts=args.rollout_prompts,
        group=args.group,
        kl_beta=args.kl_beta,
        grad_accum=args.grad_accum,
        param_dtype=args.param_dtype,
        stage=args.stage,
        algo=args.algo,
        lora_rank=args.lora_rank,
    )
    rows = [
        estimate(size, setup, w, args.margin)
        for size in args.size or list(SIZES)
        for setup in args.setup or DEFAULT_SETUPS
    ]
    print(
        f"per device, GiB | {w.rows_per_device} rows x {w.prompt + w.response} tokens per "
        f"micro-batch, rollout {w.rollout_prompts} prompts x G={w.group}, "
        f"{w.param_dtype} master, KL beta {w.kl_beta}, grad accumulation {w.grad_accum}, "
        f"{w.stage} stage, {w.algo}" + (f", LoRA rank {w.lora_rank}" if w.lora_rank else "")
    )
    print(format_table(rows))
    print(
        "total = params + adamw + ref + agent + agent* + critic + max(update, rollout); "
        "update = grads + max(accum + act, optimiser temporaries); rollout = decode + KV cache "
        "+ prefill; agent* = the answerer's process-local replica (several hosts)"
    )
    if args.json:
        from memr1.atomic import write_json_atomic

        write_json_atomic(args.json, rows, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
