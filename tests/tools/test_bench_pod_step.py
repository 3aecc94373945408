"""tools/bench/bench_pod_step.py at tiny sizes: its JSON report has every field, the update's
compiled FLOPs are n_micro times those of the micro-batch program the trainer compiles (plus,
with the block-skipping kernel, its calls in that program priced from the block mask), the real
FLOPs are 6N (update) or 2N (sampler) per real token, and the ratios are their quotients."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tests.tool import load_tool

# Compiles the sampler and the GRPO step (tiny model, one device): a minute on 2 cores.
pytestmark = pytest.mark.slow

ARGS = [
    "--layouts", "both", "--size", "tiny", "--layers", "1", "--devices", "1", "--states", "2",
    "--max-new-tokens", "48", "--prompt-lengths", "20:40", "--reply-lengths", "5:30",
    "--attention", "both",
]  # fmt: skip


def test_the_report_is_computed_from_the_compiled_programs(tmp_path):
    bench = load_tool("bench_pod_step")
    out = tmp_path / "report.json"
    assert bench.main([*ARGS, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    for key in ("date", "machine", "devices", "size", "layers", "n_blocks", "n_head", "settings"):
        assert key in report, key
    rows = {(r["stage"], r.get("widths"), r.get("attention")): r for r in report["rows"]}
    assert set(rows) == {("rollout", None, None), ("update", "rows", "einsum"),
                         ("update", "packed", "einsum"), ("update", "packed", "flash")}  # fmt: skip
    for r in rows.values():
        assert r["compiled_over_real"] == pytest.approx(r["compiled_flops"] / r["real_flops"])
        assert r["xla_memory"]["peak"] > 0 and r["estimate_bytes"] > 0
        assert r["estimate_over_xla"] == pytest.approx(
            r["estimate_bytes"] / r["xla_memory"]["peak"]
        )

    # Re-derive the packed update's figures: the same packing, the trainer's own step.
    args = bench.parse_args(ARGS)
    config = bench.recipe_config(args)
    costs = load_tool("pod_step_costs")
    rng = np.random.default_rng(args.seed)
    prompts = costs.draw_lengths(rng, 2, (20, 40), config.agents.max_prompt_tokens)
    replies = costs.draw_lengths(rng, 16, (5, 30), 48)
    whole, packed = rows[("update", "rows", "einsum")], rows[("update", "packed", "einsum")]
    # One row a group: the prompt once, no reply padded to another's length.
    assert packed["rows"] == 2 and whole["rows"] == 16
    assert packed["compiled_flops"] < whole["compiled_flops"]
    assert packed["pad_frac"] < whole["pad_frac"]
    (batch,) = costs.update_batch(prompts, replies, 8, 48, "packed")
    assert batch["tokens"].shape[1] == packed["prompt_width"] + packed["reply_width"]
    real_tokens = int(prompts.sum() + replies.sum())  # a group's prompt once
    assert packed["real_tokens"] == whole["real_tokens"] == real_tokens
    assert packed["real_tokens"] == int(batch["valid"].sum())
    # tiny: 4096 x 192 tied embedding = the unembedding; one block of the rest.
    blocks, head = report["n_blocks"], report["n_head"]
    assert head == 4096 * 192 and 0 < blocks < 192 * 192 * 16
    expect = 6 * blocks * real_tokens + 6 * head * int(replies.sum())
    assert packed["real_flops"] == pytest.approx(expect)
    assert packed["reference_real_flops"] == pytest.approx(expect / 3)
    assert packed["reference_over_real"] == pytest.approx(
        packed["reference_flops"] / packed["reference_real_flops"]
    )
    expect = 2 * blocks * real_tokens + 2 * head * int(replies.sum())
    assert rows[("rollout", None, None)]["real_flops"] == pytest.approx(expect)

    from memr1.models.config import get_size
    from memr1.rl.grpo import GRPOConfig
    from memr1.train import mesh, state, steps

    cfg = get_size("tiny", n_layers=1, dtype=config.model.dtype, remat=True, attention="einsum")
    setup, _ = state.create_train_state(
        mesh.build_mesh(1, 1, 1, model_cfgs=[cfg]),
        cfg,
        state.OptimConfig.from_config(config),
        materialize=False,
    )
    grpo_cfg = GRPOConfig.from_config(config)
    assert grpo_cfg.packed and grpo_cfg.width_classes == 2  # the recipe's: one group a class
    flops = []
    for part in costs.update_batch(prompts, replies, 8, 48, "packed", 2):
        one = dataclasses.replace(
            grpo_cfg, n_micro=1, width_classes=1, logprob_chunk=part["old_logp"].shape[1]
        )
        compiled = (
            steps.make_grpo_step(setup, one)
            .lower(setup.abstract_state, costs.abstract_batch(setup, part, 1))
            .compile()
        )
        flops.append(float(compiled.cost_analysis()["flops"]))
    assert packed["micro_batch_flops"] == pytest.approx(flops)
    per = grpo_cfg.n_micro // 2
    assert packed["compiled_flops"] == pytest.approx(per * sum(flops))
    assert packed["kernel_flops"] == [0.0, 0.0]

    # The block-skipping kernel: XLA's FLOPs without the dense scores, plus each class's kernel
    # calls (a forward, its recompute under remat, dq and dk/dv in the one block) priced from
    # the class's block mask.
    flash = rows[("update", "packed", "flash")]
    assert flash["real_flops"] == packed["real_flops"]
    assert all(f < e for f, e in zip(flash["micro_batch_flops"], flops, strict=True))
    calls = {"flash_forward": 2, "flash_dq": 1, "flash_dkv": 1}
    assert flash["kernel_calls"] == [calls, calls]
    from memr1.models.kernels import costs as kernel_costs

    for part, got in zip(costs.update_batch(prompts, replies, 8, 48, "packed", 2),
                         flash["kernel_flops"], strict=True):  # fmt: skip
        per_call = kernel_costs.kernel_flops(part["segments"], heads=6, head_dim=32, block=128)
        assert got == pytest.approx(sum(n * per_call[k] for k, n in calls.items()))
    want = per * sum(flash["micro_batch_flops"]) + sum(flash["kernel_flops"])
    assert flash["compiled_flops"] == pytest.approx(want)


def test_the_figures_at_depth_are_those_of_the_deeper_program():
    """`at_depth` from programs of 1 and 2 blocks gives what the 3-block program compiles to:
    every block is the same program, kernel calls included, so FLOPs are linear in the
    blocks."""
    bench, costs = load_tool("bench_pod_step"), load_tool("pod_step_costs")
    from memr1.rl.grpo import GRPOConfig

    args = bench.parse_args(ARGS)
    config = bench.recipe_config(args)
    rng = np.random.default_rng(args.seed)
    prompts = costs.draw_lengths(rng, 2, (20, 40))
    replies = costs.draw_lengths(rng, 16, (5, 30), 48)
    parts = costs.update_batch(prompts, replies, 8, 48, "packed", 2)
    grpo_cfg = GRPOConfig.from_config(config)
    rows = {}
    for layers in (1, 2, 3):
        cfg, setup = bench.abstract_setup(args, config, layers)
        n = costs.flops_params(setup.abstract_state.params, cfg)
        rows[layers] = costs.update_stage(
            setup, grpo_cfg, n, parts, group=8, devices=1, memory=False, attention="flash"
        )
    assert rows[3]["compiled_flops"] > rows[2]["compiled_flops"] > rows[1]["compiled_flops"]
    costs.at_depth(rows[2], rows[1], layers=2, depth=3)
    got, want = rows[2], rows[3]
    assert got["compiled_flops_at_depth"] == pytest.approx(want["compiled_flops"], rel=1e-6)
    assert got["real_flops_at_depth"] == pytest.approx(want["real_flops"], rel=1e-9)
    for key in ("compiled_over_real", "compiled_over_positions", "reference_over_real"):
        assert got[f"{key}_at_depth"] == pytest.approx(want[key], rel=1e-6), key
    assert got["compiled_over_real_at_depth"] != pytest.approx(got["compiled_over_real"])
    # The bench's own report at 2 blocks: the same figures at tiny's 4.
    costs.at_depth(rows[2], rows[1], layers=2, depth=4)
    argv = [*ARGS[:5], "2", *ARGS[6:-2], "--layouts", "packed", "--no-sampler", "--no-memory"]
    (row,) = bench.run(bench.parse_args(argv))["rows"]
    assert row["depth"] == 4
    for key in ("compiled_over_real", "compiled_over_positions", "reference_over_real"):
        assert row[f"{key}_at_depth"] == pytest.approx(rows[2][f"{key}_at_depth"]), key


def test_a_run_that_compiles_nothing_is_refused():
    bench = load_tool("bench_pod_step")
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(["--layouts", "none", "--no-sampler"])
    assert exc.value.code == 2
