"""tools/bench_pod_step.py at tiny sizes: its JSON report has every field, the update's
compiled FLOPs are n_micro times those of the micro-batch program the trainer compiles, the real
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
]  # fmt: skip


def test_the_report_is_computed_from_the_compiled_programs(tmp_path):
    bench = load_tool("bench_pod_step")
    out = tmp_path / "report.json"
    assert bench.main([*ARGS, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    for key in ("date", "machine", "devices", "size", "layers", "n_blocks", "n_head", "settings"):
        assert key in report, key
    rows = {(r["stage"], r.get("widths")): r for r in report["rows"]}
    assert set(rows) == {("rollout", None), ("update", "rows"), ("update", "packed")}
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
    whole, packed = rows[("update", "rows")], rows[("update", "packed")]
    # One row a group: the prompt once, no reply padded to another's length.
    assert packed["rows"] == 2 and whole["rows"] == 16
    assert packed["compiled_flops"] < whole["compiled_flops"]
    assert packed["pad_frac"] < whole["pad_frac"]
    batch = costs.update_batch(prompts, replies, 8, 48, "packed")
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
    assert rows[("rollout", None)]["real_flops"] == pytest.approx(expect)

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
    assert grpo_cfg.packed
    one = dataclasses.replace(grpo_cfg, n_micro=1, logprob_chunk=batch["old_logp"].shape[1])
    rows_mb = 2 // grpo_cfg.n_micro
    compiled = (
        steps.make_grpo_step(setup, one)
        .lower(setup.abstract_state, costs.abstract_batch(setup, batch, rows_mb))
        .compile()
    )
    flops = float(compiled.cost_analysis()["flops"])
    assert packed["micro_batch_flops"] == pytest.approx(flops)
    assert packed["compiled_flops"] == pytest.approx(grpo_cfg.n_micro * flops)


def test_a_run_that_compiles_nothing_is_refused():
    bench = load_tool("bench_pod_step")
    with pytest.raises(SystemExit) as exc:
        bench.parse_args(["--layouts", "none", "--no-sampler"])
    assert exc.value.code == 2
