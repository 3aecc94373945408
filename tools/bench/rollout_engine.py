"""The rollout engine at pod scale: memory, slot occupancy and decode bytes a token, at
Qwen2.5-3B/7B/14B widths, from its own scheduler and XLA's compiled decode round.

  python tools/bench/rollout_engine.py [--sizes qwen2.5-3b,qwen2.5-7b,qwen2.5-14b]
      [--stage answer] [--slots 64] [--layers 2] [--setup 8x80GB-fsdp] [--no-compile]
      [--json OUT]

Workload: configs/memr1.py `recipe=paper` for the size and `--stage` (train.batch_size 128
states a step, G = train.group_size 8, prompts up to agents.max_prompt_tokens 4,096 tokens,
replies up to the stage's budget 2,048, the `engine` section's pages, rounds, prefills and pool,
and train.rollout_batch_size × G rows decoded at once over `--devices` 8: 64 slots a device)
unless `--slots` overrides the slots a device. Prompt lengths are drawn uniformly in
`--prompt-lengths` (1,800-3,000, the assumption of docs/benchmarks.md's pod step). Reply
lengths follow real rollouts: the CPU demo's logged replies (experiments/cpu_demo,
2026-12-07, seed 0: answer stage mean 15.3 tokens and per-step longest / mean 2.18 over 128
rows; manager stage 28.8 and 1.81 over 64) are matched by a gamma distribution of that shape
(k = 8 answer, 12 manager: its expected longest / mean over as many rows), rescaled to the mean
of `--reply-mean` (175 answer, 350 manager: the middle of docs/benchmarks.md's 50-300 and
100-600) and cut at the budget.

What is measured, per backbone (a device's figures):
- schedule: the engine's own scheduler (`memr1.sampling.simulate`, which runs its host loop on
  the drawn lengths) gives rounds, decode steps, the share of slot-steps on finished rows
  (goal <= 15%), pages held against the KV tokens they hold, and the peak pages.
- memory: the KV the pages hold against the live KV (pages held × page size over the tokens
  in them: each resident prompt once, each reply; averaged over the run's steps; goal
  <= 1.25x), the configured pool (engine.kv_tokens) per slot against the live tokens a row,
  and rows that fit an 80 GB device beside the training state (`tools/memory_estimate.py` at
  `--setup`, manager stage: resident state + the decode copy + one prefill of
  `engine.prefill_prompts` prompts, in 90% of the device; 7B goal >= 128) at the peak pages a
  slot held, against the reference sampler's dense cache (prompt bucket + budget - 1 slots a
  row, the prompt copied G times).
- decode bytes a generated token: the round program compiled for the 8 fake CPU devices at the
  size's widths with `--layers` and `--layers` - 1 blocks, float32 (XLA:CPU computes bf16 in
  float32; every byte figure, the roofline's included, is then 4 bytes an element, so ratios
  hold for bf16), from `compiled.cost_analysis()["bytes accessed"]` (XLA counts a loop body
  once: the round's bytes are one decode step's), with the page pool's gathers and scatter
  charged for the pages they touch instead of the whole pool (`compiled_step_bytes`); a
  block's bytes are the difference of the two compiles, extrapolated to the size's depth. At
  the most common round shape with all slots (the reply table width the scheduler chooses),
  bytes per step / slots against the roofline: the weights / slots + the KV a live row attends
  (its prompt and its reply so far, the simulation's mean; goal <= 1.5x). Two paths
  (engine.attention): "xla" gathers each resident prompt's pages once a step for all of its
  rows, reads every entry of the tables (null pages too: the prompt table is the run's
  power-of-two bucket) and materialises the gathered pages; "pallas" (the GPU default) walks
  only live pages (`memr1.sampling.paged_kernel`): its round is compiled with the attention's
  parts as no-ops (XLA counts a Pallas call as 0 bytes; on this CPU it would count the
  interpreter's loops), and the kernel's bytes are counted from the page tables: the pages a
  step holds (each resident prompt once, each reply, page-rounded, the simulation's mean over
  the run's live row-steps), the queries and the partial softmaxes it writes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np

from memr1.torchless import without_torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

# The demo's logged replies: (mean tokens, gamma shape matching its longest / mean over a step).
DEMO_REPLIES = {"answer": (15.3, 8.0), "manager": (28.8, 12.0)}
REPLY_MEAN = {"answer": 175.0, "manager": 350.0}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", default="qwen2.5-3b,qwen2.5-7b,qwen2.5-14b")
    p.add_argument("--stage", default="answer", choices=sorted(DEMO_REPLIES))
    p.add_argument("--slots", type=int, default=None, help="decode slots a device")
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--setup", default="8x80GB-fsdp")
    p.add_argument("--prompt-lengths", default="1800:3000")
    p.add_argument("--reply-mean", type=float, default=None)
    p.add_argument("--no-compile", action="store_true", help="skip the XLA byte counts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--machine", default=f"{platform.machine()}, {os.cpu_count()} CPUs")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    args.reply_mean = args.reply_mean or REPLY_MEAN[args.stage]
    return args


def recipe(args, size: str):
    """(config, G, states, budget, prompt cap, slots a device) of the paper recipe."""
    from configs import memr1 as memr1_config

    config = memr1_config.get_config(f"backbone={size},stage={args.stage},recipe=paper")
    t, a = config.train, config.agents
    budget = a.answer_max_new_tokens if args.stage == "answer" else a.manager_max_new_tokens
    slots = args.slots or -(-t.rollout_batch_size * t.group_size // args.devices)
    return config, t.group_size, t.batch_size, budget, a.max_prompt_tokens, slots


def draw_workload(args, rng, states, group, cap, budget) -> tuple[list, np.ndarray]:
    """Prompt lengths [B] and reply lengths [B, G] of one step's rollout on one process."""
    lo, hi = (int(x) for x in args.prompt_lengths.split(":"))
    prompts = np.minimum(rng.integers(lo, hi + 1, states), cap).tolist()
    _, shape = DEMO_REPLIES[args.stage]
    replies = rng.gamma(shape, args.reply_mean / shape, (states, group))
    return prompts, np.clip(np.round(replies), 1, budget).astype(int)


def kv_bytes_per_token(cfg, itemsize: int) -> int:
    return cfg.n_layers * 2 * cfg.n_kv_heads * cfg.head_dim * itemsize


def schedule(args, engine, prompts, replies, group, budget, slots):
    from memr1.sampling.simulate import simulate

    plan = engine.plan(prompts, num_samples=group, max_new_tokens=budget,
                       slots=slots * args.devices, devices=args.devices)  # fmt: skip
    counts, scheduler = simulate(prompts, replies, plan)
    return plan, counts, scheduler


def fit_rows(args, size: str, row_tokens: float, prefill_prompts: int) -> dict:
    import memory_estimate as me

    from memr1.models.config import get_size

    w = me.Workload(stage="manager", rollout_prompts=prefill_prompts * args.devices)
    est = me.estimate(size, args.setup, w)
    cfg = get_size(size)
    kv = kv_bytes_per_token(cfg, 2)
    room = (1 - 0.1) * est["capacity"] - est["resident"] - est["rollout"]["decode_copy"]
    room -= est["rollout"]["prefill_attention"]
    return {
        "resident_gib": est["resident"] / 2**30,
        "decode_copy_gib": est["rollout"]["decode_copy"] / 2**30,
        "prefill_gib": est["rollout"]["prefill_attention"] / 2**30,
        "kv_room_gib": room / 2**30,
        "kv_bytes_per_token": kv,
        "row_mib": row_tokens * kv / 2**20,
        "rows_fit": int(room // (row_tokens * kv)),
    }


def compiled_step_bytes(args, size: str, layers: int, plan, reply_pages: int, kernel: str):
    """XLA's bytes accessed by one decode round at level 0 (one step: a loop body counts
    once), float32, each page-pool gather and scatter charged for the pages it touches.

    XLA's cost analysis charges a gather its whole operand and a scatter twice its operand
    (checked: a round's bytes grow by exactly 4 pools a layer with the pool), here the whole
    page pool of the layer, where the ops touch only the gathered pages and the written slots;
    those charges are replaced by what they touch. With `kernel` "pallas" the attention's two
    parts are compiled as no-ops (a Pallas call is 0 bytes to XLA, and here it would be its
    interpreter's loops): the caller adds the kernel's own bytes (`paged_partial_bytes`).
    """
    import jax
    import jax.numpy as jnp

    from memr1.models.config import get_size
    from memr1.sampling import paged
    from memr1.sampling.engine import Engine
    from memr1.sampling.layout import decode_spec
    from memr1.sampling.scheduler import Scheduler
    from memr1.train import mesh as mesh_lib
    from memr1.train import state
    from memr1.train.optim import OptimConfig

    cfg = get_size(size, n_layers=layers, dtype="float32", param_dtype="float32", remat=False)
    m = mesh_lib.build_mesh(1, args.devices, 1, model_cfgs=[cfg])
    optim = OptimConfig(lr=1e-6, warmup_steps=0)
    setup, _ = state.create_train_state(m, cfg, optim, materialize=False)

    def decode(x, s):
        sharding = jax.sharding.NamedSharding(s.mesh, decode_spec(s.spec))
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)

    params = jax.tree.map(decode, setup.abstract_state.params, setup.param_shardings)
    engine = Engine(cfg, setup.graphdef)
    real_part = paged.part
    if kernel == "pallas":

        def part(q_KRQN, pages, table, length, kernel):  # the kernel's outputs, nothing read
            kv, r, q, n = q_KRQN.shape
            zeros = jnp.zeros((kv, r, q), jnp.float32)
            return paged.Partial(jnp.zeros((kv, r, q, n), jnp.float32), zeros, zeros)

        paged.part = part
    try:
        lowered = engine.lower_round(params, plan, level=0, reply_pages=reply_pages)
        cost = lowered.compile().cost_analysis()
    finally:
        paged.part = real_part
    xla = float((cost[0] if isinstance(cost, list) else cost)["bytes accessed"])
    slots, prompt_slots = Scheduler([1], plan).level_sizes(0)
    token = 2 * cfg.n_kv_heads * cfg.head_dim * 4  # keys and values of a token in a layer
    pool = plan.pages_per_device * plan.page_size * token
    written = slots * token  # the step's own keys and values
    if kernel == "pallas":
        return {"xla": xla, "counted": xla + layers * (written - 2 * pool)}
    touched = (prompt_slots * plan.prompt_pages + slots * reply_pages) * plan.page_size * token
    return {"xla": xla, "counted": xla + layers * (touched + written - 4 * pool)}


def measure(args, size: str, rng) -> dict:
    from memr1.models import transformer
    from memr1.models.config import get_size
    from memr1.sampling.engine import Engine, EngineSettings

    config, group, states, budget, cap, slots = recipe(args, size)
    cfg = get_size(size)
    graphdef, _ = transformer.abstract_model(get_size(size, n_layers=1))
    settings = EngineSettings.from_config(config)
    engine = Engine(cfg, graphdef, settings=settings)
    prompts, replies = draw_workload(args, rng, states, group, cap, budget)
    plan, counts, sched = schedule(args, engine, prompts, replies, group, budget, slots)
    live_per_row = counts["live_token_steps"] / counts["live_slot_steps"]
    held_per_slot = counts["peak_held_tokens"] / plan.slots_per_device
    dense_row = (1 << (cap - 1).bit_length()) + budget - 1
    row = {
        "size": size,
        "stage": args.stage,
        "slots_per_device": plan.slots_per_device,
        "prompt_slots": plan.prompt_slots,
        "rows_per_device": states * group // args.devices,
        "mean_prompt": float(np.mean(prompts)),
        "mean_reply": float(replies.mean()),
        "max_reply": int(replies.max()),
        "rounds": counts["rounds"],
        "decode_steps": counts["decode_steps"],
        "finished_share": 1 - counts["live_slot_steps"] / counts["slot_steps"],
        "held_over_live": counts["held_token_steps"] / counts["live_token_steps"],
        "peak_held_tokens": counts["peak_held_tokens"],
        "pool_tokens": settings.kv_tokens,
        "preempted": sched.preempted,
        "pool_over_live": settings.kv_tokens / plan.slots_per_device / live_per_row,
        "dense_over_live": dense_row / live_per_row,
        "rounds_by_shape": {f"{s}x{t}": n for (s, t), n in counts["rounds_by_shape"].items()},
    }
    engine_fit = fit_rows(args, size, held_per_slot, settings.prefill_prompts)
    row["memory"] = engine_fit
    row["pool_gib"] = settings.kv_tokens * engine_fit["kv_bytes_per_token"] / 2**30
    row["rows_fit"] = engine_fit["rows_fit"]
    row["rows_fit_dense"] = fit_rows(args, size, dense_row, settings.prefill_prompts)["rows_fit"]
    if not args.no_compile:
        level0 = {t: n for (s, t), n in counts["rounds_by_shape"].items()
                  if s == plan.slots_per_device}  # fmt: skip
        reply_pages = max(level0, key=level0.get)
        weights = transformer.count_params(transformer.abstract_model(cfg)[1]) * 4
        attended = counts["attended_token_steps"] / counts["live_slot_steps"]
        token = kv_bytes_per_token(cfg, 4)
        roofline = weights / plan.slots_per_device + attended * token
        row.update(reply_pages=reply_pages, attended_tokens=attended,
                   roofline_bytes_per_token=roofline)  # fmt: skip
        for kernel in ("xla", "pallas"):
            full = compiled_step_bytes(args, size, args.layers, plan, reply_pages, kernel)
            less = compiled_step_bytes(args, size, args.layers - 1, plan, reply_pages, kernel)
            per_block = full["counted"] - less["counted"]
            at_depth = full["counted"] + (cfg.n_layers - args.layers) * per_block
            per_token = at_depth / plan.slots_per_device
            if kernel == "pallas":
                # The kernel reads the live pages a step holds (each resident prompt once, each
                # reply; page-rounded: the held tokens less the pages handed out ahead count as
                # live here, an upper bound), a row's queries and writes its partial softmax.
                per_token += counts["held_token_steps"] / counts["live_slot_steps"] * token
                per_token += cfg.n_layers * 2 * cfg.n_heads * (2 * cfg.head_dim + 2) * 4
            row[f"{kernel}_step_bytes_per_block"] = per_block
            row[f"{kernel}_bytes_per_token"] = per_token
            row[f"{kernel}_bytes_over_roofline"] = per_token / roofline
    return row


def print_table(report: dict) -> None:
    cols = ("size", "slots_per_device", "finished_share", "held_over_live", "pool_over_live",
            "dense_over_live", "preempted", "rows_fit", "rows_fit_dense",
            "xla_bytes_over_roofline", "pallas_bytes_over_roofline")  # fmt: skip
    print(" | ".join(f"{c:>18}" for c in cols))
    for row in report["rows"]:
        cells = []
        for c in cols:
            v = row.get(c)
            cells.append(f"{v:18.3f}" if isinstance(v, float) else f"{v!s:>18}")
        print(" | ".join(cells))


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={args.devices}"
    ).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    rng = np.random.default_rng(args.seed)
    rows = []
    for size in args.sizes.split(","):
        row = measure(args, size, rng)
        rows.append(row)
        print(json.dumps(row, default=float), flush=True)
    report = {
        "date": datetime.date.today().isoformat(),
        "machine": args.machine,
        "devices": f"{jax.device_count()} x {jax.devices()[0].platform}",
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "rows": rows,
    }
    print_table(report)
    if args.json:
        from memr1.atomic import write_json_atomic

        write_json_atomic(args.json, report, indent=1, default=float)
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
