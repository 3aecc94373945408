"""The three phases of tools/gpu_check.py (its docstring says what each measures and why):
the train state, the rollout through `TextPolicy.complete_ids`, the rollout packed as GRPO's
update reads it and scored by the update's log-prob function, and the compiled GRPO step."""

from __future__ import annotations

import time

import numpy as np

PAD_ID, EOS_ID, TEMPERATURE = 0, 1, 1.0


class IdTokenizer:
    """Token ids as text: the check has no tokenizer files (it measures tokens, not text)."""

    chat_template = None

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(str(int(i)) for i in ids)


def build_state(shape: dict):
    """(model config, train setup, train state, parameter count): random bf16 weights and
    AdamW moments on a mesh of every device (FSDP), the recipe's model settings."""
    import jax

    from memr1.models.config import get_size
    from memr1.models.transformer import count_params
    from memr1.train import mesh, state

    cfg = get_size(shape["size"], param_dtype="bfloat16", dtype="bfloat16", remat=True,
                   remat_policy="full", scan_layers=True)  # fmt: skip
    m = mesh.build_mesh(1, -1, 1, model_cfgs=[cfg])
    setup, st = state.create_train_state(m, cfg, state.OptimConfig(lr=1e-6, warmup_steps=0))
    jax.block_until_ready(st)
    return cfg, setup, st, count_params(st.params)


def run_rollout(shape: dict, cfg, setup, st) -> tuple[dict, list]:
    """(figures, the timed call's completions per prompt)."""
    import jax

    from memr1.env.policy import SamplingConfig, TextPolicy
    from memr1.sampling.engine import EngineSettings

    rng = np.random.default_rng(0)
    n, plen = shape["prompts"], shape["prompt_len"]
    lengths = rng.integers(plen * 3 // 4, plen + 1, size=n)
    prompts = [(rng.integers(2, cfg.vocab_size, size=k).astype(np.int32), False) for k in lengths]
    # One prefill a prompt and one round size: the engine compiles two programs for the run.
    engine = EngineSettings(prefill_prompts=1, shrink_tail=False)
    policy = TextPolicy(cfg, setup.graphdef, st.params, IdTokenizer(), eos_ids=(EOS_ID,),
                        pad_id=PAD_ID, batch_size=n, max_prompt_tokens=plen,
                        engine=engine)  # fmt: skip
    sampling = SamplingConfig(temperature=TEMPERATURE, max_new_tokens=shape["new_tokens"])
    call = lambda seed: policy.complete_ids(
        prompts, sampling, key=jax.random.key(seed), num_samples=shape["group"]
    )
    t0 = time.perf_counter()
    call(0)  # compiles the engine's prefill and decode round
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    groups = call(1)
    call_s = time.perf_counter() - t0
    replies = [c for g in groups for c in g]
    new = sum(len(c.ids) for c in replies)
    programs = policy.engine.compiled_programs
    return {
        "prompts": n,
        "group": shape["group"],
        "rows": len(replies),
        "prompt_tokens": int(lengths.sum()),
        "prompt_len_range": [int(lengths.min()), int(lengths.max())],
        "max_new_tokens": shape["new_tokens"],
        "new_tokens": new,
        "finished_frac": float(np.mean([c.finished for c in replies])),
        "first_call_s": first_s,
        "call_s": call_s,
        "compile_s": first_s - call_s,
        "new_tok_per_s": new / call_s,
        "sampler_programs": programs(),
        "slot_occupancy": policy.last_run.slot_occupancy if policy.last_run else None,
    }, groups


def grpo_config(group: int):
    from memr1.rl.grpo import GRPOConfig

    return GRPOConfig(clip_eps=0.2, kl_beta=0.0, kl_estimator="k3", temperature=TEMPERATURE,
                      n_micro=1, pack_group=group, dual_clip=3.0)  # fmt: skip


def packed_batch(shape: dict, groups: list, setup) -> tuple[dict, dict]:
    """(the host packed batch, on the mesh) of the rollout as the GRPO loop builds it: sample 0
    of each group rewarded 1, the others 0, so every group carries an advantage."""
    from memr1.train import batches
    from memr1.train.update import shard_batch

    g = shape["group"]
    rewards = np.zeros((len(groups), g), np.float32)
    rewards[:, 0] = 1.0
    rows, _ = batches.rollout_rows(groups, rewards, {}, response_width=shape["new_tokens"],
                                   pad_id=PAD_ID, group=g)  # fmt: skip
    packed = batches.pack_step_groups(rows, g)
    return packed, shard_batch(setup, packed)


def run_gap(shape: dict, setup, st, packed: dict, batch: dict) -> dict:
    """|trainer - sampler| log-probs of the rollout's reply tokens on the packed path."""
    from memr1.train import steps

    fn = steps.make_grpo_reference(setup, grpo_config(shape["group"]))
    t0 = time.perf_counter()
    compiled = fn.lower(st.params, batch).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    logp = np.asarray(compiled(st.params, batch), np.float32)
    run_s = time.perf_counter() - t0
    mask = packed["response_mask"]
    diff = (logp - packed["sampler_logp"])[mask]
    if not np.all(np.isfinite(diff)):
        raise FloatingPointError("the trainer's log-probs of the rollout are not finite")
    rows, width = packed["tokens"].shape
    return {
        "path": "packed (memr1.rl.packing, packed_logprobs)",
        "rows": rows,
        "width": width,
        "reply_width": mask.shape[1],
        "tokens": int(mask.sum()),
        "max_abs": float(np.abs(diff).max()),
        "mean_abs": float(np.abs(diff).mean()),
        "mean": float(diff.mean()),
        "compile_s": compile_s,
        "run_s": run_s,
    }


def _flops(compiled) -> float | None:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return float(cost["flops"]) if cost and "flops" in cost else None


def matmul_flops(cfg, n_params: int, real: int, replies: int) -> float:
    """6 x the weight-matmul FLOPs a step runs a token: every weight but the embedding table on
    each real token, the LM head (V x D) on the reply tokens only (`packed_logprobs` gathers
    their predictors before the head); no attention, no recompute."""
    head = cfg.vocab_size * cfg.d_model
    trunk = n_params - head * (1 if cfg.tie_embeddings else 2)
    return 6.0 * (trunk * real + head * replies)


def run_update(shape: dict, setup, st, n_params: int, packed: dict, batch: dict, peak) -> dict:
    """One GRPO step compiled once and timed; MFU over the real tokens."""
    import jax

    from memr1.train import steps

    step = steps.make_grpo_step(setup, grpo_config(shape["group"]))
    t0 = time.perf_counter()
    compiled = step.lower(st, batch).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    t0 = time.perf_counter()
    st, metrics = compiled(st, batch)  # donates the state
    first = {k: float(v) for k, v in jax.device_get(metrics).items()}
    first_s = time.perf_counter() - t0
    times = []
    for _ in range(shape["steps"]):
        t0 = time.perf_counter()
        st, metrics = compiled(st, batch)
        jax.block_until_ready((st, metrics))
        times.append(time.perf_counter() - t0)
    step_s = float(np.median(times))
    real = int(packed["valid"].sum())
    model_flops = 6.0 * n_params * real
    matmul = matmul_flops(setup.model_cfg, n_params, real, int(packed["response_mask"].sum()))
    xla = _flops(compiled)
    peak_flops = peak * 1e12 * jax.device_count() if peak else None
    return {
        "rows": int(packed["tokens"].shape[0]),
        "width": int(packed["tokens"].shape[1]),
        "real_tokens": real,
        "padded_tokens": int(packed["valid"].size),
        "compile_s": compile_s,
        "first_step_s": first_s,
        "step_s": step_s,
        "step_times_s": times,
        "tok_per_s": real / step_s,
        "model_tflops": model_flops / step_s / 1e12,
        "peak_tflops": peak,
        "mfu": model_flops / step_s / peak_flops if peak_flops else None,
        "matmul_mfu": matmul / step_s / peak_flops if peak_flops else None,
        "matmul_over_6n_real": matmul / model_flops,
        "xla_flops": xla,
        "xla_tflops": xla / step_s / 1e12 if xla else None,
        "xla_over_6n_real": xla / model_flops if xla else None,
        "xla_temp_bytes": getattr(mem, "temp_size_in_bytes", None),
        "first_step": first,
    }
