"""Expected device memory of GRPO training (full-parameter or LoRA), per backbone and device.

  python tools/memory_estimate.py [--rows-per-device 2] [--prompt 4096] [--response 2048]
                                  [--setup 1x141GB --setup 8x80GB-fsdp] [--lora-rank 8]
                                  [--json OUT]

With --lora-rank the parameters include the qwix LoRA adapters (`memr1.train.lora`) and only
they have AdamW moments, gradients and an accumulator; everything else is counted as for full
fine-tuning (the reference is still a full copy, and the adapters' own activations, rank-wide,
are not counted).

Nothing is allocated: parameter and AdamW shapes come from `jax.eval_shape` of the real model
and optimiser, each array is divided over the mesh by the same logical-axis rules the trainer
uses (`memr1.sharding.DEFAULT_RULES`), and the rest is arithmetic on the model's dimensions.

Per device, the estimate is

  resident = params (float32 master) + AdamW moments + bfloat16 compute copy + reference (bf16)
             [+ the frozen Answer Agent in the manager stage, bf16, sharded like the policy]
  update   = gradients + float32 accumulator (gradient accumulation) + activations
  rollout  = decode copy + KV cache of the rollout rows + one layer's prefill attention
  total    = resident + max(update, rollout)

because the rollout and the update alternate and share only the resident state. The decode copy
is the bf16 copy of the weights a rollout samples from (`memr1.sampling.layout.rollout_params`):
whole on every device of the data x fsdp axes, split only over the tensor axis, so each device
decodes its own share of the rows. It lives for one sampler call (`TextPolicy.complete`); in
the manager stage the frozen Answer Agent's copy is made after the policy's is dropped, so one
exists at a time. The rows of the KV cache are divided over data x fsdp, as the sampler splits
them. Activations
assume the trainer's per-block remat: every block's input is kept in bf16, and one block is
recomputed at a time in the backward pass. That block's attention scores are materialised as
[rows, heads, T, T] (an upper bound: `model.attention` chunks it or uses a fused kernel, which
this estimate does not model), at about 12 bytes per score (float32 scores
and softmax output, their gradient, bf16 copies); at thousands of tokens this is the largest
activation. Under FSDP each device also gathers one block's weights (float32, double-buffered).
Not counted: XLA's scratch for the optimiser update, fragmentation and the CUDA context; the
verdict keeps `--margin` (10%) of the device free for them: "yes" below 90%, "tight" up to
100%, "no" above. Every array is assumed sharded as the trainer shards it, including the
backbone as loaded and the frozen Answer Agent.

Check against XLA's own plan (`compiled.memory_analysis()` of the real GRPO step, tiny model
with one block, 2 rows x 1024 tokens, float32, CPU): 195 MiB estimated (activations 190.5 +
gradients 4.6) against 208 MiB of XLA temporaries, which also hold the optimiser's. With
several blocks this holds on XLA:CPU only with `model.scan_layers`: in the unrolled layer loop
XLA:CPU drops remat's optimisation barriers before scheduling and keeps every block's
activations, as if there were no remat (`tools/remat_memory.py`, docs/benchmarks.md). Under
`scan_layers` each layer also costs a stacked copy of its weights and their stacked gradient,
which this estimate leaves out. Whether XLA:GPU needs the scan must be read off a GPU run
(`tools/bench_train.py --gpu` reports XLA's temporaries and the peak).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # configs/, as a script

GIB = 2**30
# Device memory as nvidia-smi reports it (MiB) for the 141 GB H200 and the 80 GB H100.
SETUPS = {
    "1x141GB": {"devices": "1x H200 (141 GB)", "mesh": (1, 1, 1), "capacity": 143_771 * 2**20},
    "2x141GB-fsdp": {"devices": "2x H200", "mesh": (1, 2, 1), "capacity": 143_771 * 2**20},
    "8x80GB-fsdp": {"devices": "8x H100 (80 GB)", "mesh": (1, 8, 1), "capacity": 81_559 * 2**20},
    "4x80GB-fsdp": {"devices": "4x H100 (80 GB)", "mesh": (1, 4, 1), "capacity": 81_559 * 2**20},
}
DEFAULT_SETUPS = ("1x141GB", "8x80GB-fsdp", "4x80GB-fsdp")


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
    grad_accum: bool = True  # n_micro > 1: a float32 gradient accumulator
    stage: str = "manager"  # the manager stage also holds the frozen Answer Agent
    param_dtype: str = "float32"
    compute_dtype: str = "bfloat16"
    lora_rank: int = 0  # > 0: only qwix LoRA adapters of this rank train (memr1.train.lora)


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


def activation_bytes(cfg, mesh: dict[str, int], w: Workload, compute_bytes: int) -> dict:
    """Per-device activation estimate of one training micro-batch with per-block remat."""
    tp, fsdp = mesh["tensor"], mesh["fsdp"]
    b, t, d = w.rows_per_device, w.prompt + w.response, cfg.d_model
    h, f, v = cfg.n_heads // tp, cfg.d_ff // tp, cfg.vocab_size // tp
    saved = cfg.n_layers * b * t * d * compute_bytes
    # One block recomputed and differentiated: ~10 [T, D] tensors (norm outputs, q/k/v/o,
    # residuals and their gradients), 4 [T, F] ones (gate, up, product, gradient), and the
    # [T, T] attention scores at ~12 bytes each.
    block = b * t * (10 * d + 4 * f) * compute_bytes + b * h * t * t * 12
    # Chunked log-probs: float32 [rows, chunk, V] logits, log-softmax and gradient.
    logits = b * w.logprob_chunk * v * 4 * 3
    gather = 0
    if fsdp > 1:
        per_layer = (cfg.n_heads * 2 + cfg.n_kv_heads * 2) * cfg.head_dim * d + 3 * d * cfg.d_ff
        gather = 2 * per_layer // tp * 4
    return {
        "saved_block_inputs": saved,
        "block_recompute": block,
        "logits_chunk": logits,
        "fsdp_gather": gather,
        "total": saved + block + logits + gather,
    }


def rollout_bytes(
    cfg, mesh: dict[str, int], w: Workload, compute_bytes: int, params, weight_bytes: int
) -> dict:
    """Per-device decode copy of `params` (`weight_bytes` an element), KV cache of the decode
    rows and the largest prefill temporary."""
    tp, rows_axes = mesh["tensor"], mesh["data"] * mesh["fsdp"]
    # The decode copy: split over the tensor axis only (`memr1.sampling.layout.decode_spec`).
    decode_bytes, _ = shard_bytes({"data": 1, "fsdp": 1, "tensor": tp}, params)
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
      setup: a key of `SETUPS` (mesh data x fsdp x tensor and device capacity).
      layers: count only that many blocks (default: the size's own).
    Returns:
      A dict of byte counts (see the module docstring for how they add up), `total`,
      `capacity`, `fits` ("yes" / "tight" / "no") and any mesh divisibility problems.
    """
    spec = SETUPS[setup]
    mesh = dict(zip(("data", "fsdp", "tensor"), spec["mesh"], strict=True))
    cfg, params, trainable, opt = abstract_state(size, w.param_dtype, w.lora_rank, layers)
    p_bytes, problems = shard_bytes(mesh, params)
    t_bytes, _ = shard_bytes(mesh, trainable)
    o_bytes, _ = shard_bytes(mesh, opt)
    p_item = 4 if w.param_dtype == "float32" else 2
    c_item = 4 if w.compute_dtype == "float32" else 2
    elems = p_bytes // p_item  # parameter elements held by this device
    t_elems = t_bytes // p_item  # of which trained (all of them without LoRA)
    # The compute copy exists only when the storage and compute dtypes differ.
    compute_copy = elems * c_item if w.param_dtype != w.compute_dtype else 0
    # Frozen copies (reference, Answer Agent) and the decode copy are kept in the compute dtype,
    # or the storage dtype where it is narrower (`memr1.sampling.layout.decode_dtype`).
    f_item = min(p_item, c_item)
    reference = elems * f_item if w.kl_beta > 0 else 0
    # The frozen Answer Agent is a plain model (a LoRA checkpoint is merged when loaded).
    plain = elems - (t_elems if w.lora_rank else 0)
    partner = plain * f_item if w.stage == "manager" else 0
    grads = t_elems * p_item
    accum = t_elems * 4 if w.grad_accum else 0  # accumulated in float32 whatever the dtype
    act = activation_bytes(cfg, mesh, w, c_item)
    roll = rollout_bytes(cfg, mesh, w, c_item, params, f_item)
    resident = p_bytes + o_bytes + compute_copy + reference + partner
    update = grads + accum + act["total"]
    total = resident + max(update, roll["total"])
    capacity = spec["capacity"]
    fits = "yes" if total <= (1 - margin) * capacity else ("tight" if total <= capacity else "no")
    return {
        "size": size,
        "setup": setup,
        "devices": spec["devices"],
        "mesh": spec["mesh"],
        "params_per_device": elems,
        "trained_params_per_device": t_elems,
        "params": p_bytes,
        "adamw": o_bytes,
        "compute_copy": compute_copy,
        "reference": reference,
        "answer_agent": partner,
        "grads": grads,
        "grad_accum": accum,
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
    cols = ("size", "setup", "params", "adamw", "bf16", "ref", "agent", "grads", "accum", "act")
    cols += ("decode", "rollout", "total", "device", "fits")
    lines = [cols]
    for r in rows:
        gib = lambda n: f"{n / GIB:.1f}"
        lines.append(
            (
                r["size"],
                r["setup"],
                gib(r["params"]),
                gib(r["adamw"]),
                gib(r["compute_copy"]),
                gib(r["reference"]),
                gib(r["answer_agent"]),
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
        f"{w.stage} stage" + (f", LoRA rank {w.lora_rank}" if w.lora_rank else "")
    )
    print(format_table(rows))
    print(
        "total = params + adamw + bf16 + ref + agent + max(grads + accum + act, rollout); "
        "rollout = decode + KV cache + prefill"
    )
    if args.json:
        from memr1.atomic import write_json_atomic

        write_json_atomic(args.json, rows, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
