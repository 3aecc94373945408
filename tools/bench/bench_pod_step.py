"""One RL step of each stage at the paper's settings, compiled on fake CPU devices: per-device
FLOPs against the real tokens' and XLA's memory against `tools/memory_estimate.py`.

  python tools/bench/bench_pod_step.py [--stage answer] [--size qwen2.5-7b] [--layers 2]
                                 [--layouts packed] [--prompt-lengths 1800:3000]
                                 [--reply-lengths 50:300] [--json OUT]

Settings are configs/memr1.py's `recipe=paper` (128 states of G = 8 per step, prompts up to 4,096
tokens, 2,048 new tokens for either agent, `train.rollout_batch_size` prompts a policy sampler call
and `agents.batch_size` a frozen-answerer call, one row a device a micro-batch, every device on the
FSDP axis, remat, shared-prompt GRPO with KL β = 0.001), on `--devices` fake CPU devices, with the
size's real widths and `--layers` blocks. Nothing is materialised: every program is lowered from
`jax.ShapeDtypeStruct`s with the trainer's shardings and compiled. Prompt and reply lengths are
drawn per row, uniformly in the given ranges (assumptions, not measurements: the Answer Agent reads
~60 memories and replies in ~50-300 tokens); replies are cut at the budget.

Stages and what "real" counts (N_blocks = the parameters of the compiled blocks, N_head = the
unembedding's V x D, which only tokens whose logits are needed pay; the embedding lookup is a
gather, 0 FLOPs):
  rollout  the policy's sampler calls of the step: 2 N_blocks a real prompt token (prefilled
           once per prompt) or generated token, plus 2 N_head a generated token.
  reward   manager stage only: the frozen answerer's calls (one question a sampled bank,
           `agents.answer_max_new_tokens`, greedy), counted as the rollout; the answer stage's
           reward is exact match on the host (0 device FLOPs).
  update   the GRPO step: 6 N_blocks a real token, a group's prompt once (the packed update
           runs it once) and every reply token, plus 6 N_head a reply token.
`at_depth` is the update's (and the reference's) ratio at the backbone's real depth (28 blocks
at 7B): the update is compiled again at `--layers` - 1 blocks, a block costs the difference
(every block is the same program), and compiled and real FLOPs grow by that much a block
(`pod_step_costs.at_depth`). At a few blocks the head weighs as much as the blocks; at depth
attention is what is left beside 6N.
`per_pos` sets the compiled FLOPs against the same count over every position the update runs
(padding included; the head's positions: the reply columns when packed, every column in the
row layout): what is left is the program's own overhead (attention, remat's recompute), not
padding.
Compiled FLOPs are `compiled.cost_analysis()["flops"]` of the step's own programs. XLA counts
a loop body once whatever its trip count, so each loop is compiled apart: the sampler program
is compiled whole and its prefill alone, the decode step is their difference and runs (longest
reply of the call - 1) times; the update is compiled for one micro-batch of each width class
(n_micro = 1, log-probs in one chunk), each run `n_micro / width_classes` times a step (its
optimiser update, ~20 FLOPs a parameter, is then counted n_micro times: < 0.1%). The sampler
and the `rows` update run the einsum kernel (chunked's scan would be counted once). The packed
update runs `--attention`: "flash", the block-skipping kernel an accelerator runs (flash on GPU,
splash on TPU: the same blocks and matmuls), compiled as a 0-FLOP stand-in whose calls are
found in the program and priced from the block mask (`memr1.models.kernels.costs`; XLA counts
0 inside a Pallas call), or "einsum" (dense scores in XLA); "both" prints both.
The figures are per device; real FLOPs are the step's over the devices.

Layouts: `packed` (the recipe's, `train.shared_prompt`) feeds the update one row a group, its
prompt once and its G replies back to back (`memr1.rl.packing`), in `train.width_classes`
classes of groups sorted by length, each at the bucketed width of its own longest group
(`--width-classes`; widths printed PxR per class), `micro_rows` groups a device a micro-batch;
`rows` one row a sample (`memr1.train.batches.rollout_rows`' bucketed prompt and reply widths),
the same groups a micro-batch. The KL reference is its own forward-only program once per rollout
(`steps.make_grpo_reference`), printed on its own line against 2 N_blocks a real token + 2 N_head
a reply token. The rollout does not change.

Memory: XLA's peak of a program is its arguments + temporaries + outputs - aliased (donated)
bytes, from `compiled.memory_analysis()`, compiled at the real settings (the whole step's batch,
`n_micro` micro-batches, 128-token log-prob chunks). It is set against the estimate's matching
part: for the update, resident - Answer Agent + update; for a sampler call, the rollout part.
The sampler calls are compiled in float32 (their FLOPs are the same): XLA:CPU computes bf16
matmuls in float32 and keeps a float32 copy of each bf16 weight it reads (the head, the
embedding table, the blocks' weights: up to ~4 GiB here), which an accelerator's bf16 matmuls
never make; the estimate is then taken at 4 bytes an element.
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
DEFAULT_LENGTHS = {  # (prompt, reply) token ranges per stage
    "answer": ((1800, 3000), (50, 300)),
    "manager": ((1000, 3000), (100, 600)),
}


def parse_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    if not sep or not 1 <= int(lo) <= int(hi):
        raise argparse.ArgumentTypeError(f"{text!r}: expected LO:HI with 1 <= LO <= HI")
    return int(lo), int(hi)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--stage", default="answer", choices=("answer", "manager"))
    p.add_argument("--size", default="qwen2.5-7b")
    p.add_argument("--layers", type=int, default=2, help="blocks compiled (2-4)")
    p.add_argument("--devices", type=int, default=8, help="fake CPU devices (FSDP axis)")
    p.add_argument(
        "--layouts", default="packed", choices=("rows", "packed", "both", "none"),
        help="the update's layout: one row a sample, or one packed row a group (the recipe's);\n"
        "none compiles the sampler calls only",
    )  # fmt: skip
    p.add_argument("--attention", default="flash", choices=("flash", "einsum", "both"),
                   help="the packed update's attention kernel")  # fmt: skip
    p.add_argument("--prompt-lengths", type=parse_range, help="LO:HI (default per stage)")
    p.add_argument("--reply-lengths", type=parse_range, help="LO:HI (default per stage)")
    p.add_argument("--states", type=int, help="states a step (default: train.batch_size)")
    p.add_argument("--max-new-tokens", type=int, help="the stage's budget (default: agents')")
    p.add_argument("--answer-max-new-tokens", type=int, help="default: agents'")
    p.add_argument("--answerer-prompts", type=int, help="its call's prompts (agents.batch_size)")
    p.add_argument(
        "--micro-rows", type=int, help="rows a device a micro-batch (default: train.micro_rows)"
    )
    p.add_argument(
        "--remat-policy",
        choices=("full", "minimal"),
        help="default: the recipe's model.remat_policy",
    )
    p.add_argument(
        "--width-classes", type=int,
        help="the packed update's width classes (default: the recipe's train.width_classes)",
    )  # fmt: skip
    p.add_argument("--no-memory", action="store_true", help="skip the memory compiles")
    p.add_argument(
        "--sampler", action=argparse.BooleanOptionalAction, default=True,
        help="compile the sampler calls (--no-sampler: the update only)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--machine", default=MACHINE)
    p.add_argument("--json", type=Path, help="also write the report as JSON")
    args = p.parse_args(argv)
    if args.layouts == "none" and not args.sampler:
        p.error("--layouts none with --no-sampler leaves nothing to compile")
    return args


def recipe_config(args):
    """configs/memr1.py at recipe=paper for the stage, with the tool's overrides."""
    from configs import memr1 as memr1_config
    from memr1.train import mesh

    config = memr1_config.get_config(
        f"backbone={args.size},algo=grpo,stage={args.stage},recipe=paper"
    )
    config.unlock()
    if args.states:
        config.train.batch_size = args.states
    if args.max_new_tokens:
        config.agents[f"{args.stage}_max_new_tokens"] = args.max_new_tokens
    if args.answer_max_new_tokens:
        config.agents.answer_max_new_tokens = args.answer_max_new_tokens
    if args.answerer_prompts:
        config.agents.batch_size = args.answerer_prompts
    if args.micro_rows:
        config.train.micro_rows = args.micro_rows
    if args.remat_policy:
        config.model.remat_policy = args.remat_policy
    if args.width_classes:
        config.train.width_classes = args.width_classes
    mesh.resolve_micro_batches(config)
    config.lock()
    return config


def estimate_bytes(args, config, **workload) -> dict:
    """`tools/memory_estimate.py`'s figures for the compiled setting (`workload` overrides)."""
    import memory_estimate as me

    setup = {8: "8x80GB-fsdp", 4: "4x80GB-fsdp", 2: "2x141GB-fsdp", 1: "1x141GB"}[args.devices]
    w = me.Workload(
        rows_per_device=max(1, config.train.micro_rows),
        rollout_prompts=config.train.rollout_batch_size or config.train.batch_size,
        group=config.train.group_size,
        kl_beta=config.train.kl_beta,
        stage=args.stage,
        backend="cpu",  # XLA:CPU's programs, whose bf16 intermediates are float32
        scan_layers=config.model.scan_layers,
        remat_policy=config.model.remat_policy,
    )
    return me.estimate(args.size, setup, dataclasses.replace(w, **workload), layers=args.layers)


def abstract_setup(args, config, layers: int | None = None):
    """(model config, train setup) at the size's real widths with `layers` (default
    `args.layers`) blocks, on the recipe's mesh; the train state is abstract (nothing is
    materialised)."""
    from memr1.models.config import get_size
    from memr1.train import mesh as mesh_lib
    from memr1.train import state
    from memr1.train.prepare import training_model_settings

    model = config.model
    cfg = get_size(
        args.size,
        n_layers=layers or args.layers,
        dtype=model.dtype,
        param_dtype=model.param_dtype,
        # The recipe's training settings, but the einsum kernel: see the module docstring.
        **{**training_model_settings(config), "attention": "einsum"},
    )
    m = mesh_lib.build_mesh(
        config.mesh.data, config.mesh.fsdp, config.mesh.tensor, model_cfgs=[cfg]
    )
    setup, _ = state.create_train_state(
        m, cfg, state.OptimConfig.from_config(config), materialize=False
    )
    return cfg, setup


def attach_estimate(args, config, row: dict) -> None:
    """`row`'s estimate of the program's memory and its ratio to XLA's figure: for the update,
    resident - Answer Agent + update; for a sampler call (compiled in float32, see `run`), the
    rollout part at 4 bytes an element."""
    if row["stage"] == "update":
        # A block-skipping kernel keeps no [T, T] scores: the estimate counts it as fused.
        est = estimate_bytes(
            args, config, prompt=row["prompt_width"], response=row["reply_width"],
            attention=row.get("attention", "einsum"),
        )  # fmt: skip
        partner = est["answer_agent"] + est["answer_agent_replica"]
        row["estimate_bytes"] = est["resident"] - partner + est["update"]
    else:
        est = estimate_bytes(
            args, config, prompt=row["prompt_width"], response=row["budget"],
            group=row["group"], rollout_prompts=row["prompts_per_call"],
            compute_dtype="float32",
        )  # fmt: skip
        row["estimate_bytes"] = est["rollout"]["total"]
    xla = row["xla_memory"]
    row["estimate_over_xla"] = row["estimate_bytes"] / xla["peak"] if xla else None


def _rows_config(config, group: int):
    """The row layout's GRPO update at the recipe, micro-batches of the same groups a device
    as the packed one's (`micro_rows` groups a device, every sample a row)."""
    from memr1.rl.grpo import GRPOConfig

    rows_cfg = config.copy_and_resolve_references()
    rows_cfg.train.update(shared_prompt=False, width_classes=1)
    cfg = GRPOConfig.from_config(rows_cfg)
    return dataclasses.replace(cfg, n_micro=config.train.n_micro)


def run(args) -> dict:
    import jax
    import pod_step_costs as costs

    from memr1.env.policy import agent_budget
    from memr1.models.config import get_size
    from memr1.rl.grpo import GRPOConfig

    config = recipe_config(args)
    t, a = config.train, config.agents
    cfg, setup = abstract_setup(args, config)
    n = costs.flops_params(setup.abstract_state.params, cfg)
    devices = jax.device_count()
    g, budget = t.group_size, agent_budget(config, args.stage)
    states = t.batch_size * t.oversample
    (p_range, r_range) = DEFAULT_LENGTHS[args.stage]
    p_range, r_range = args.prompt_lengths or p_range, args.reply_lengths or r_range
    rng = np.random.default_rng(args.seed)
    cap = a.max_prompt_tokens
    prompt_len = costs.draw_lengths(rng, states, p_range, cap)
    reply_len = costs.draw_lengths(rng, states * g, r_range, budget)
    rows = []
    if args.sampler:
        rows = costs.sampler_rows(
            args.stage, config, cfg, setup, n, rng, prompt_len, reply_len, budget,
            answer_lengths=DEFAULT_LENGTHS["answer"],
        )  # fmt: skip
    packed_cfg = GRPOConfig.from_config(config)
    layouts = {"both": ("rows", "packed"), "none": ()}.get(args.layouts, (args.layouts,))
    depth = get_size(args.size).n_layers
    shallower = abstract_setup(args, config, args.layers - 1)[1] if args.layers > 1 else None
    kernels = ("einsum", "flash") if args.attention == "both" else (args.attention,)
    runs = [(lay, k) for lay in layouts for k in (kernels if lay == "packed" else ("einsum",))]
    for layout, attention in runs:
        grpo_cfg = packed_cfg if layout == "packed" else _rows_config(config, g)
        parts = costs.update_batch(prompt_len, reply_len, g, budget, layout, grpo_cfg.classes[1])
        kw = dict(group=g, devices=devices, attention=attention)
        row = costs.update_stage(setup, grpo_cfg, n, parts, memory=not args.no_memory, **kw)
        if shallower is not None:  # the same update at layers - 1 blocks: the figures at depth
            less = costs.flops_params(shallower.abstract_state.params, cfg)
            one_less = costs.update_stage(shallower, grpo_cfg, less, parts, memory=False, **kw)
            costs.at_depth(row, one_less, layers=args.layers, depth=depth)
        row["widths"] = layout
        rows.append(row)
    for row in rows:
        attach_estimate(args, config, row)
    return {
        "date": datetime.date.today().isoformat(),
        "machine": args.machine,
        "devices": devices,
        "size": args.size,
        "layers": args.layers,
        "n_blocks": n[0],
        "n_head": n[1],
        "stage": args.stage,
        "settings": {
            "states": states,
            "group": g,
            "max_new_tokens": budget,
            "sampler_prompts_per_call": t.rollout_batch_size or states,
            "answerer_prompts_per_call": a.batch_size,
            "n_micro": t.n_micro,
            "micro_rows": t.micro_rows,
            "kl_beta": t.kl_beta,
            "remat": cfg.remat,
            "remat_policy": cfg.remat_policy,
            "width_classes": t.width_classes,
            "prompt_lengths": list(p_range),
            "reply_lengths": list(r_range),
            "answer_max_new_tokens": a.answer_max_new_tokens,
        },
        "rows": rows,
    }


def format_table(report: dict) -> str:
    head = (
        f"{report['size']} x {report['layers']} blocks (N_blocks {report['n_blocks'] / 1e9:.2f}B, "
        f"N_head {report['n_head'] / 1e9:.2f}B), {report['stage']} stage, "
        f"{report['devices']} devices, micro_rows {report['settings']['micro_rows']} | per "
        "device; ratio = compiled / real, per_pos = compiled / the real FLOPs of the positions "
        "run; attention flash: its Pallas calls priced from the block mask (XLA counts 0 in them)"
    )
    cols = ("stage widths attention widths_PxR compiled real ratio per_pos pad xla_GiB est_GiB "
            "est/xla at_depth").split()  # fmt: skip
    lines = [head, " ".join(f"{c:>11}" for c in cols)]
    for r in report["rows"]:
        shape = (
            "+".join(f"{p}x{w}" for p, w in r["class_widths"])
            if r["stage"] == "update"
            else f"{r['prompt_width']}"
        )
        xla = r["xla_memory"]
        cells = (
            r["stage"],
            r.get("widths", "-"),
            r.get("attention", "-"),
            shape,
            f"{r['compiled_flops']:.3g}",
            f"{r['real_flops']:.3g}",
            f"{r['compiled_over_real']:.2f}",
            f"{r['compiled_over_positions']:.2f}" if "pad_frac" in r else "-",
            f"{r['pad_frac']:.2f}" if "pad_frac" in r else "-",
            f"{xla['peak'] / 2**30:.2f}" if xla else "-",
            f"{r['estimate_bytes'] / 2**30:.2f}",
            f"{r['estimate_over_xla']:.2f}" if r["estimate_over_xla"] else "-",
            f"{r['compiled_over_real_at_depth']:.2f}" if "depth" in r else "-",
        )
        lines.append(" ".join(f"{c:>11}" for c in cells))
        if "reference_flops" in r:  # its own forward-only program, against 2N a real token
            ref = (
                "reference",
                r.get("widths", "-"),
                r["attention"],
                shape,
                f"{r['reference_flops']:.3g}",
                f"{r['reference_real_flops']:.3g}",
                f"{r['reference_over_real']:.2f}",
                *["-"] * 5,
                f"{r['reference_over_real_at_depth']:.2f}" if "depth" in r else "-",
            )
            lines.append(" ".join(f"{c:>11}" for c in ref))  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    flag = f"--xla_force_host_platform_device_count={args.devices}"
    if "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    if jax.device_count() != args.devices:
        print(f"bench_pod_step: {jax.device_count()} devices, expected {args.devices} "
              f"(set XLA_FLAGS={flag} before JAX starts)", file=sys.stderr)  # fmt: skip
        return 2
    report = run(args)
    print(format_table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
