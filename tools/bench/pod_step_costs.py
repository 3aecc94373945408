"""The programs `tools/bench/bench_pod_step.py` compiles and what it counts in them: drawn lengths,
the parameters whose FLOPs a token pays, the sampler's prefill and decode costs, the update's
micro-batch step over a packed batch, and XLA's memory figures (see that tool's docstring for
what "real" counts and why each loop is compiled apart)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np


def draw_lengths(rng, rows: int, lo_hi: tuple[int, int], cap: int | None = None) -> np.ndarray:
    out = rng.integers(lo_hi[0], lo_hi[1] + 1, rows)
    return np.minimum(out, cap) if cap else out


def flops_params(params, cfg) -> tuple[int, int]:
    """(N_blocks, N_head): the parameters of the blocks (and final norm), and the unembedding's
    V x D (the lm_head, or the tied embedding); the embedding lookup is a gather, 0 FLOPs."""
    import jax

    total = sum(math.prod(x.shape) for x in jax.tree.leaves(params))
    tables = sum(
        math.prod(x.shape)
        for k in ("embed", "lm_head")
        if k in params
        for x in jax.tree.leaves(params[k])
    )
    return total - tables, cfg.vocab_size * cfg.d_model


def xla_memory(compiled) -> dict:
    m = compiled.memory_analysis()
    out = {
        k: int(getattr(m, f"{k}_size_in_bytes")) for k in ("argument", "temp", "output", "alias")
    }
    out["peak"] = out["argument"] + out["temp"] + out["output"] - out["alias"]
    return out


def flops_of(compiled) -> float:
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return float(cost["flops"])


# -- rollout and reward: sampler calls ---------------------------------------------------------


def sampler_costs(cfg, graphdef, params_abs, prompts: list[np.ndarray], *, group, budget, greedy):
    """(F_prefill, F_step, XLA memory) of one sampler call: the whole program and its prefill
    compiled; a decode step is their difference."""
    import jax

    from memr1.models import transformer
    from memr1.sampling import sampler as sampler_lib
    from memr1.sampling.layout import row_sharding
    from memr1.sampling.output import splitter

    sampler = sampler_lib.Sampler(cfg, graphdef, pad_id=0)
    kw = dict(key=jax.random.key(0), max_new_tokens=budget, num_samples=group, eos_ids=[1])
    whole = sampler.lower(params_abs, prompts, temperature=0.0 if greedy else 1.0, **kw).compile()
    width = sampler.bucket(max(len(p) for p in prompts))
    tokens, valid = sampler_lib.left_pad(prompts, width, 0)
    split = splitter(row_sharding(params_abs, len(prompts)))
    s = width + budget - 1

    def prefill(params, tok, val):
        gd = transformer.without_remat(graphdef, params)
        return sampler._prefill(gd, params, split(tok), split(val), group, s, split)

    pre = jax.jit(prefill).lower(params_abs, tokens, valid).compile()
    f_pre, f_whole = flops_of(pre), flops_of(whole)
    return f_pre, f_whole - f_pre, xla_memory(whole), width


def sampler_rows(stage, config, cfg, setup, n, rng, prompt_len, reply_len, budget, *,
                 answer_lengths) -> list:  # fmt: skip
    """`sampler_stage` rows of a step's sampler calls: the policy's rollout and, in the manager
    stage, the frozen answerer's reward calls (one question a sampled bank, `answer_lengths`
    LO:HI prompt and reply lengths drawn from `rng`)."""
    import jax

    from memr1.models.transformer import with_config

    t, a = config.train, config.agents
    g, devices, states, cap = t.group_size, jax.device_count(), len(prompt_len), a.max_prompt_tokens
    # The sampler calls are compiled in float32: XLA:CPU computes bf16 matmuls in float32 and
    # keeps a float32 copy of every bf16 weight the program reads (up to ~4 GiB at 7B widths
    # with 2 blocks: the head, the embedding table, the block weights), which an accelerator's
    # native bf16 matmuls never make. In float32 XLA's plan holds the sampler's own buffers, set
    # against the estimate at 4 bytes an element (bench_pod_step's `attach_estimate`); FLOPs
    # do not depend on it.
    cfg32 = cfg.replace(dtype="float32")
    params_abs = decode_params(setup, cfg32)
    graphdef32 = with_config(setup.graphdef, params_abs, dtype="float32")
    rows = [
        sampler_stage(
            "rollout", cfg32, graphdef32, params_abs, n, prompt_len, reply_len,
            call=t.rollout_batch_size or states, group=g, budget=budget, greedy=False,
            devices=devices,
        )
    ]  # fmt: skip
    if stage == "manager":
        # One question a sampled bank: answer-stage prompts and replies, cut at the answerer's.
        ap, ar = answer_lengths
        q_prompt = draw_lengths(rng, states * g, ap, cap)
        q_reply = draw_lengths(rng, states * g, ar, a.answer_max_new_tokens)
        rows.append(
            sampler_stage(
                "reward", cfg32, graphdef32, params_abs, n, q_prompt, q_reply,
                call=a.batch_size, group=1, budget=a.answer_max_new_tokens, greedy=True,
                devices=devices,
            )
        )  # fmt: skip
    return rows


def decode_params(setup, cfg):
    """The abstract decode copy: compute dtype, replicated over data x fsdp
    (`memr1.sampling.layout`)."""
    import jax
    from jax.sharding import NamedSharding

    from memr1.sampling.layout import decode_dtype, decode_spec

    dtype = decode_dtype(cfg)

    def one(x, s):
        return jax.ShapeDtypeStruct(
            x.shape, dtype, sharding=NamedSharding(s.mesh, decode_spec(s.spec))
        )

    return jax.tree.map(one, setup.abstract_state.params, setup.param_shardings)


def sampler_stage(name, cfg, graphdef, params_abs, n, prompt_len, reply_len, *, call, group,
                  budget, greedy, devices) -> dict:  # fmt: skip
    """One stage of sampler calls: `call` prompts a call, `group` samples a prompt. A short last
    call is filled with copies of its first prompt, as `memr1.env.policy.TextPolicy` fills it
    (they decode as long as that prompt's replies: compiled, not real)."""
    calls = -(-len(prompt_len) // call)
    compiled = {}
    total, real = 0.0, 0.0
    memory = None
    for c in range(calls):
        p = prompt_len[c * call : (c + 1) * call]
        r = reply_len[c * call * group : (c + 1) * call * group]
        # 2 N_blocks a prefilled or generated token, 2 N_head a generated token's logits.
        real += 2.0 * n[0] * (p.sum() + r.sum()) + 2.0 * n[1] * r.sum()
        p = np.concatenate([p, np.repeat(p[:1], call - len(p))])
        width = _pow2(max(p))
        if width not in compiled:
            prompts = [np.full(int(x), 2, np.int32) for x in p]
            compiled[width] = sampler_costs(
                cfg, graphdef, params_abs, prompts, group=group, budget=budget, greedy=greedy
            )
        f_pre, f_step, mem, _ = compiled[width]
        memory = memory or mem
        total += f_pre + (int(r.max()) - 1) * f_step
    real /= devices
    f_pre, f_step, _, width = next(iter(compiled.values()))
    return {
        "stage": name,
        "calls": calls,
        "prompts_per_call": call,
        "group": group,
        "budget": budget,
        "prompt_width": width,
        "compiled_flops": total,
        "real_flops": real,
        "compiled_over_real": total / real,
        "prefill_flops": f_pre,
        "decode_step_flops": f_step,
        "xla_memory": memory,
    }


def _pow2(n: int) -> int:
    from memr1.sampling.sampler import default_bucket

    return default_bucket(int(n))


# -- update ------------------------------------------------------------------------------------


def update_batch(
    prompt_len, reply_len, group: int, budget: int, layout: str, classes: int = 1
) -> tuple[dict, ...]:
    """The step's GRPO batch (host arrays) as the loop feeds the update, as a tuple of its
    width classes: `rows` (every sample a row, `batches.rollout_rows`' bucketed widths; one
    class) or `packed` (then one row a group in `classes` width classes,
    `batches.pack_step_classes`), each with a `ref_logp` of the loss's shape (the reference
    program's output)."""
    from memr1.env.policy import Completion
    from memr1.train import batches

    groups = []
    for b, p in enumerate(prompt_len):
        prompt = np.full(int(p), 2, np.int32)
        rows = reply_len[b * group : (b + 1) * group]
        groups.append(
            [
                Completion("", prompt, np.full(int(r), 3, np.int32), np.zeros(int(r)), True)
                for r in rows
            ]
        )
    rewards = np.tile(np.arange(group) % 2, (len(groups), 1)).astype(np.float32)
    batch, _ = batches.rollout_rows(
        groups, rewards, {}, response_width=budget, pad_id=0, group=group
    )
    fields = ("tokens", "valid", "prompt_mask", "response_mask", "advantages", "old_logp")
    parts = ({k: batch[k] for k in fields},)
    if layout == "packed":
        parts = batches.pack_step_classes(parts[0], group, classes)
    for part in parts:
        part["ref_logp"] = np.zeros(part["old_logp"].shape, np.float32)
    return parts


def abstract_batch(setup, batch: dict, rows: int) -> dict:
    import jax

    from memr1.train.update import batch_sharding

    sh = batch_sharding(setup)
    return {
        k: jax.ShapeDtypeStruct((rows, *np.shape(v)[1:]), np.asarray(v).dtype, sharding=sh)
        for k, v in batch.items()
    }


def update_counts(batch: dict, group: int) -> dict:
    """Real tokens (a group's prompt once), reply tokens, positions run by the blocks and by
    the head, and the widths, of a `rows` or `packed` batch (one width class)."""
    valid = batch["valid"]
    rows, width = valid.shape
    if "segments" in batch:  # packed: the head runs on the reply columns only
        reply_width = batch["response_mask"].shape[1]
        replies = int(batch["response_mask"].sum())
        return dict(real_tokens=int(valid.sum()), reply_tokens=replies, positions=rows * width,
                    head_positions=rows * reply_width, prompt_width=width - reply_width,
                    reply_width=reply_width)  # fmt: skip
    p = batch["prompt_mask"].shape[1]
    replies = int(valid[:, p:].sum())
    return dict(real_tokens=int(valid[::group, :p].sum()) + replies, reply_tokens=replies,
                positions=rows * width, head_positions=rows * width, prompt_width=p,
                reply_width=width - p)  # fmt: skip


def parts_counts(parts, group: int) -> dict:
    """`update_counts` summed over a batch's width classes; the widths are the widest class's
    (what the peak of memory follows), `class_widths` every class's [prompt, reply]."""
    counts = [update_counts(part, group) for part in parts]
    out = {k: sum(c[k] for c in counts) for k in counts[0] if not k.endswith("_width")}
    widest = max(counts, key=lambda c: c["prompt_width"] + c["reply_width"])
    out.update(prompt_width=widest["prompt_width"], reply_width=widest["reply_width"])
    out["class_widths"] = [[c["prompt_width"], c["reply_width"]] for c in counts]
    return out


def with_model(setup, **changes):
    """`setup` with its model config changed (its graph definition and config): e.g. the layer
    loop unrolled (`scan_layers=False`: XLA's cost analysis counts a loop body once whatever
    its trip count, so FLOPs are read off the unrolled program, which does the same arithmetic;
    memory off the setup's own) or another attention kernel."""
    from memr1.models import transformer

    if all(getattr(setup.model_cfg, k) == v for k, v in changes.items()):
        return setup
    graphdef = transformer.with_config(setup.graphdef, setup.abstract_state.params, **changes)
    cfg = setup.model_cfg.replace(**changes)
    return dataclasses.replace(setup, model_cfg=cfg, graphdef=graphdef)


def _micro_flops(setup, grpo_cfg, part, per: int, ref) -> dict:
    """XLA's FLOPs of one micro-batch program of a width class, update and reference (log-probs
    in one chunk: a scan's body would be counted once), and the block-skipping kernel's calls
    in each (`kernels.costs.kernel_calls`: stand-ins, 0 FLOPs to XLA; none with einsum)."""
    from memr1.models.kernels import costs as kernel_costs
    from memr1.train import steps

    rows = part["tokens"].shape[0] // per
    one = dataclasses.replace(
        grpo_cfg, n_micro=1, width_classes=1, logprob_chunk=part["old_logp"].shape[1]
    )
    step = steps.make_grpo_step(setup, one)
    mb = step.lower(setup.abstract_state, abstract_batch(setup, part, rows)).compile()
    fields = {k: part[k] for k in one.logprob_fields()}
    ref_fn = steps.make_grpo_reference(setup, one)
    rmb = ref_fn.lower(ref, abstract_batch(setup, fields, rows)).compile()
    return {
        "update": flops_of(mb),
        "reference": flops_of(rmb),
        "update_calls": kernel_costs.kernel_calls(mb.as_text()),
        "reference_calls": kernel_costs.kernel_calls(rmb.as_text()),
    }


def update_stage(setup, grpo_cfg, n, parts, *, group, devices, memory: bool,
                 attention: str = "einsum") -> dict:  # fmt: skip
    """The update's micro-batch program of each width class (x its n_micro / K), the
    reference's forward-only program (both unrolled, for their FLOPs), and (with `memory`)
    XLA's plan of the whole step as `setup` compiles it; `grpo_cfg` packed or not as `parts`
    (`update_batch`'s) are. `attention` "flash" compiles the packed passes with the
    block-skipping kernel as a stand-in and adds its FLOPs from the block mask
    (`memr1.models.kernels.costs`); "einsum" computes the dense scores in XLA."""
    import jax

    from memr1.models.kernels import launch
    from memr1.models.kernels.costs import step_kernel_flops
    from memr1.train import steps

    full_setup = with_model(setup, attention=attention)
    setup = with_model(full_setup, scan_layers=False)
    ref = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, setup.model_cfg.jnp_dtype, sharding=x.sharding),
        setup.abstract_state.params,
    )
    per = grpo_cfg.n_micro // len(parts)

    def standin():
        return launch.pallas_mode("standin" if attention == "flash" else "native")

    with standin():
        flops = [_micro_flops(setup, grpo_cfg, part, per, ref) for part in parts]

    def kernel_flops(calls: str) -> list[float]:
        return [
            step_kernel_flops(p, f[calls], setup.model_cfg, devices) for p, f in zip(parts, flops)
        ]

    kernel, ref_kernel = kernel_flops("update_calls"), kernel_flops("reference_calls")
    compiled = per * sum(f["update"] for f in flops) + sum(kernel)
    c = parts_counts(parts, group)
    # 6 N_blocks a token (a group's prompt once), 6 N_head a reply token's logits.
    real = (6.0 * n[0] * c["real_tokens"] + 6.0 * n[1] * c["reply_tokens"]) / devices
    dense = (6.0 * n[0] * c["positions"] + 6.0 * n[1] * c["head_positions"]) / devices
    valid = sum(int(p["valid"].sum()) for p in parts)
    out = {
        "stage": "update",
        "attention": attention,
        "rows": sum(p["tokens"].shape[0] for p in parts),
        **c,
        "n_micro": grpo_cfg.n_micro,
        "width_classes": len(parts),
        "pad_frac": 1.0 - valid / sum(p["valid"].size for p in parts),
        "micro_batch_flops": [f["update"] for f in flops],
        # The Pallas kernels' FLOPs (0 to XLA), from the block mask: per class, a device's.
        "kernel_calls": [f["update_calls"] for f in flops],
        "kernel_flops": kernel,
        "compiled_flops": compiled,
        "real_flops": real,
        "compiled_over_real": compiled / real,
        # The same program over the positions it runs: what it costs a token without padding.
        "positions_flops": dense,
        "compiled_over_positions": compiled / dense,
        "xla_memory": None,
    }
    # The KL reference's forward-only program, once per rollout: against 2N a real token.
    out["reference_flops"] = per * sum(f["reference"] for f in flops) + sum(ref_kernel)
    out["reference_real_flops"] = real / 3.0
    out["reference_over_real"] = out["reference_flops"] / out["reference_real_flops"]
    if memory:
        full = steps.make_grpo_step(full_setup, grpo_cfg)
        abstract = tuple(abstract_batch(setup, p, p["tokens"].shape[0]) for p in parts)
        with standin():
            lowered = full.lower(full_setup.abstract_state, abstract)
        out["xla_memory"] = xla_memory(lowered.compile())
    return out


def at_depth(row: dict, shallower: dict, *, layers: int, depth: int) -> None:
    """Adds to an update `row` (compiled at `layers` blocks) its figures at the backbone's
    `depth`, from the same update compiled at `layers` - 1 blocks (`shallower`). Every block is
    the same program, so compiled FLOPs are linear in the blocks and a block costs the
    difference; so are the real FLOPs (6 N_block a real token a block) and the positions'.
    At a few blocks the head (N_head 0.54B at 7B, a block 0.23B) weighs as much as the blocks
    and its log-prob recompute (the chunk is rematerialised) with it; at the real depth not."""
    extra = depth - layers

    def grow(key: str) -> float:
        return row[key] + extra * (row[key] - shallower[key])

    compiled, real, positions = (grow(k) for k in ("compiled_flops", "real_flops",
                                                    "positions_flops"))  # fmt: skip
    row.update(
        depth=depth,
        compiled_flops_at_depth=compiled,
        real_flops_at_depth=real,
        compiled_over_real_at_depth=compiled / real,
        compiled_over_positions_at_depth=compiled / positions,
        reference_over_real_at_depth=grow("reference_flops") / grow("reference_real_flops"),
    )


# -- the report --------------------------------------------------------------------------------
