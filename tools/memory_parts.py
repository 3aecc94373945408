"""The pieces `tools/memory_estimate.py` adds up: the state's arrays divided over the mesh by the
trainer's own sharding rules, the PPO critic's, the activations of a micro-batch's backward pass
and the rollout's KV cache (that tool's docstring says what each counts and why)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # memr1/, as a script


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


def saved_matmul_elements(cfg, tp: int, w) -> int:
    """Elements a token and block that remat keeps beside the block's input: with
    `model.remat_policy` "minimal" the outputs of its weight matmuls (q, k, v, the attention
    output's projection, gate, up and down), none with "full"."""
    if w.remat_policy != "minimal":
        return 0
    kv = cfg.n_kv_heads // tp * cfg.head_dim
    return cfg.n_heads // tp * cfg.head_dim + 2 * kv + 2 * cfg.d_model + 2 * cfg.d_ff // tp


# `model.attention` values; the fused ones keep no [T, T] scores (flash kernels).
ATTENTION = ("auto", "einsum", "chunked", "cudnn", "splash", "flash")
FUSED_ATTENTION = ("cudnn", "splash", "flash")


def fused_attention(w) -> bool:
    """Whether the packed update's attention keeps no [T, T] scores: a flash kernel (Pallas
    `flash` on GPU and `splash` on TPU for packed rows, cuDNN's fused one), which "auto"
    resolves to on an accelerator (`memr1.models.attention.resolve`); `einsum` and `chunked`,
    what "auto" runs on a CPU, materialise them."""
    if w.attention not in ATTENTION:
        raise ValueError(f"attention={w.attention!r} is not one of {ATTENTION}")
    return w.attention in FUSED_ATTENTION or (w.attention == "auto" and w.backend != "cpu")


def activation_bytes(cfg, mesh: dict[str, int], w, compute_bytes: int) -> dict:
    """Per-device activations of one training micro-batch with per-block remat, at the peak of
    its backward pass: the saved block inputs plus the larger of two phases that never overlap,
    the unembedding's (first in the backward) and one block's recompute (then, block by block).
    """
    tp, fsdp = mesh["tensor"], mesh["fsdp"]
    b, t, d = w.rows_per_device, w.prompt + w.response, cfg.d_model
    h, f, v = cfg.n_heads // tp, cfg.d_ff // tp, cfg.vocab_size // tp
    inner = 4 if w.backend == "cpu" else compute_bytes  # a block's intermediates
    saved = cfg.n_layers * b * t * d * compute_bytes
    # Saved in the compute dtype, as the block inputs (XLA:CPU too: it computes bf16 matmuls in
    # float32 but stores their rounded outputs).
    dots = cfg.n_layers * b * t * saved_matmul_elements(cfg, tp, w) * compute_bytes
    # One block recomputed and differentiated: ~10 [T, D] tensors (norm outputs, q/k/v/o,
    # residuals and their gradients), 4 [T, F] ones (gate, up, product, gradient), and the
    # [T, T] attention scores at ~12 bytes each (float32 scores, probabilities, their gradient),
    # or under a fused kernel only its float32 row statistics a query and head (the forward's
    # log-sum-exp and the backward's rowsum(dO * O)).
    scores = b * h * t * 8 if fused_attention(w) else b * h * t * t * 12
    block = b * t * (10 * d + 4 * f) * inner + scores
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
    # `model.scan_layers` stacks the blocks' weights inside the step (their FSDP shards, in the
    # storage dtype) for the whole pass, and their gradient is accumulated stacked before it is
    # handed back per layer: two block-weight-sized buffers a device (the gradient only where
    # the block weights train, not under LoRA).
    stacked = 0
    if w.scan_layers:
        per_layer = (cfg.n_heads * 2 + cfg.n_kv_heads * 2) * cfg.head_dim * d + 3 * d * cfg.d_ff
        shard = cfg.n_layers * per_layer // (fsdp * tp) * (4 if w.param_dtype == "float32" else 2)
        stacked = shard * (1 if w.lora_rank else 2)
    return {
        "saved_block_inputs": saved,
        "saved_matmul_outputs": dots,
        "stacked_blocks": stacked,
        "block_recompute": block,
        "attention_scores": scores,
        "fsdp_gather": gather,
        "logits_chunk": logits,
        "head_weight": head,
        "phase": "head" if head_phase >= block_phase else "block",
        "total": saved + dots + stacked + max(head_phase, block_phase),
    }


def rollout_bytes(
    cfg, mesh: dict[str, int], w, compute_bytes: int, params, weight_bytes: int,
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
    # The engine's pool is fixed whatever the rows; the reference sampler's cache holds every
    # row at the prompt bucket plus the whole budget.
    kv = (w.kv_tokens or rows * (w.prompt + w.response)) * kv_per_token
    # Prefill without gradients: float32 scores and bf16 probabilities of one layer.
    prefilled = min(prompts, w.prefill_prompts) if w.prefill_prompts else prompts
    prefill = prefilled * (cfg.n_heads // tp) * w.prompt**2 * 6
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


def partner_bytes(w, params, trainable, plain: int, p_item: int, f_item: int, hosts: int):
    """(sharded, replica) bytes of the manager stage's frozen Answer Agent, 0 for other stages.

    It is a plain model (a LoRA checkpoint is merged when loaded): in the policy's shards
    (`plain` elements a device), and on several hosts also as the process-local replica the
    reward samples with, whole on every device for the whole run
    (`memr1.train.stages.reward_env`)."""
    if w.stage != "manager":
        return 0, 0
    whole = {"data": 1, "fsdp": 1, "tensor": 1}
    plain_whole = shard_bytes(whole, params)[0] // p_item
    if w.lora_rank:
        plain_whole -= shard_bytes(whole, trainable)[0] // p_item
    return plain * f_item, (plain_whole * f_item if hosts > 1 else 0)


def critic_bytes(size: str, w, mesh: dict[str, int], cfg, p_item: int, c_item: int, layers):
    """(weights, AdamW moments, gradients, accumulator, saved activations) of the PPO critic a
    device, all 0 for GRPO: float32 weights and two moments resident, its gradient (and
    accumulator) in the update, and its own saved block inputs (it runs a forward and a
    backward of its trunk beside the policy's in each micro-batch)."""
    if w.algo != "ppo":
        return 0, 0, 0, 0, 0
    c_params, c_opt = critic_state(size, w.param_dtype, layers)
    critic, _ = shard_bytes(mesh, c_params)
    critic_opt, _ = shard_bytes(mesh, c_opt)
    grads = critic // p_item * 4
    accum = grads if w.grad_accum else 0
    per_token = (cfg.d_model + saved_matmul_elements(cfg, mesh["tensor"], w)) * c_item
    act = cfg.n_layers * w.rows_per_device * (w.prompt + w.response) * per_token
    return critic, critic_opt, grads, accum, act
