"""tools/memory_estimate.py counts what is resident (the PPO critic, the multi-host answerer
replica, no compute copy of the trained weights) and agrees with XLA's own plan of a compiled
GRPO update (tools/bench/memory_vs_xla.py) within 15%."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from memr1.models import transformer
from memr1.models.config import get_size
from tests.fake_devices import ROOT, xla_flags
from tests.tool import load_tool


def test_the_ppo_critic_costs_about_16_bytes_a_parameter():
    tool = load_tool("memory_estimate")
    # Dense attention scores: the update outweighs the rollout in both, so the critic's
    # gradients show in the total rather than under max(update, rollout).
    grpo = tool.estimate("tiny", "1x141GB", tool.Workload(algo="grpo", attention="einsum"))
    ppo = tool.estimate("tiny", "1x141GB", tool.Workload(algo="ppo", attention="einsum"))
    assert grpo["update"] > grpo["rollout"]["total"]
    n = transformer.count_params(transformer.abstract_model(get_size("tiny"))[1])
    critic_params = n + 192 + 1  # tiny ties its embeddings: the trunk whole, plus the head
    # Weights and two AdamW moments resident (12 bytes), the gradient and accumulator (8).
    assert ppo["critic"] == pytest.approx(12 * critic_params, abs=64)
    assert ppo["critic_grads"] == 8 * critic_params
    assert grpo["critic"] == grpo["critic_grads"] == 0
    assert ppo["resident"] - grpo["resident"] == ppo["critic"]
    assert ppo["total"] - grpo["total"] >= 16 * critic_params


def test_several_hosts_hold_the_answerer_whole_beside_the_decode_copy():
    tool = load_tool("memory_estimate")
    n = transformer.count_params(transformer.abstract_model(get_size("tiny"))[1])
    one = tool.estimate("tiny", "8x80GB-fsdp", tool.Workload(stage="manager"))
    two = tool.estimate("tiny", "16x80GB-2hosts", tool.Workload(stage="manager"))
    answer = tool.estimate("tiny", "16x80GB-2hosts", tool.Workload(stage="answer"))
    assert one["answer_agent_replica"] == 0 and answer["answer_agent_replica"] == 0
    assert two["answer_agent_replica"] == 2 * n  # bf16, whole on every device, all run long
    assert two["rollout"]["decode_copy"] == 2 * n  # the policy's replica beside it
    assert two["resident"] >= two["answer_agent"] + two["answer_agent_replica"]
    assert "compute_copy" not in one  # the model casts each weight inside its matmul


def test_a_checkpoint_save_holds_its_copy_in_host_memory():
    """`memr1.train.host_memory.host_copy`: a device's shards of the saved state (weights, AdamW
    moments, the critic) go to host memory, nothing stays on the device for the write
    (tests/train/test_checkpoint_memory.py measures it)."""
    tool = load_tool("memory_estimate")
    for algo in ("grpo", "ppo"):
        est = tool.estimate("tiny", "8x80GB-fsdp", tool.Workload(algo=algo))
        assert est["save"] == {"device": 0, "host": est["params"] + est["adamw"] + est["critic"]}
        assert est["total"] == est["resident"] + max(est["update"], est["rollout"]["total"])


def test_a_fused_attention_kernel_keeps_no_scores():
    """Flash on GPU / splash on TPU (what "auto" resolves to for packed rows on an accelerator)
    keep float32 row statistics, not [T, T] scores; on a CPU "auto" materialises them."""
    tool = load_tool("memory_estimate")
    cfg = get_size("qwen2.5-7b")
    w = tool.Workload(rows_per_device=2, prompt=4096, response=2048)  # the block phase peaks
    est = {a: tool.estimate("qwen2.5-7b", "8x80GB-fsdp", tool.dataclasses.replace(w, attention=a))
           for a in ("auto", "flash", "einsum", "chunked")}  # fmt: skip
    b, h, t = 2, cfg.n_heads, 6144
    assert est["einsum"]["activations"]["attention_scores"] == b * h * t * t * 12
    assert est["flash"]["activations"]["attention_scores"] == b * h * t * 8
    assert est["auto"]["activations"] == est["flash"]["activations"]
    assert est["chunked"]["activations"] == est["einsum"]["activations"]
    assert est["einsum"]["activations"]["phase"] == "block"
    assert est["einsum"]["total"] - est["flash"]["total"] >= b * h * t * t * 11
    cpu = tool.estimate("qwen2.5-7b", "8x80GB-fsdp", tool.dataclasses.replace(w, backend="cpu"))
    assert cpu["activations"]["attention_scores"] == b * h * t * t * 12
    with pytest.raises(ValueError, match="attention='sdpa' is not one of"):
        tool.estimate("tiny", "1x141GB", tool.dataclasses.replace(w, attention="sdpa"))


def test_the_engines_pool_replaces_the_dense_cache_and_its_prefill_is_capped():
    """`--kv-tokens` / `--prefill-prompts` (config engine.*): the rollout holds the engine's
    pool of that many tokens a device whatever the rows, and prefills that many prompts."""
    tool = load_tool("memory_estimate")
    cfg = get_size("qwen2.5-7b")
    w = tool.Workload(rollout_prompts=64, group=8, prompt=4096, response=2048)
    dense = tool.estimate("qwen2.5-7b", "8x80GB-fsdp", w)["rollout"]
    paged = tool.dataclasses.replace(w, kv_tokens=131072, prefill_prompts=1)
    engine = tool.estimate("qwen2.5-7b", "8x80GB-fsdp", paged)["rollout"]
    per_token = cfg.n_layers * 2 * cfg.n_kv_heads * cfg.head_dim * 2  # bf16 K and V
    assert per_token == 57344  # Qwen2.5-7B: 28 layers x 2 x 4 kv heads x 128 x 2 bytes
    assert dense["kv_cache"] == 64 * 8 // 8 * 6144 * per_token  # 64 rows a device, whole budget
    assert engine["kv_cache"] == 131072 * per_token
    assert dense["prefill_attention"] == 8 * cfg.n_heads * 4096**2 * 6  # 8 prompts a device
    assert engine["prefill_attention"] == cfg.n_heads * 4096**2 * 6
    assert engine["decode_copy"] == dense["decode_copy"]


def test_tpu_setups_are_listed_with_their_chips():
    tool = load_tool("memory_estimate")
    for name, capacity in (("v5e-16", 16 * 10**9), ("v5p-16", 95 * 10**9)):
        est = tool.estimate("tiny", name, tool.Workload())
        assert est["capacity"] == capacity and est["hosts"] > 1


# The slow tests' four tool commands, run one after another in one process of 8 fake CPU
# devices (each tool's main sets the count before JAX starts): one Python and JAX start instead of
# four. The file took 105 CPU s cold with four processes, 98 s with one (before the update's
# figures at depth, 85 and 62).
RUN_TOOLS = """
import json, sys
from memr1.torchless import without_torch
without_torch()
sys.path[:0] = ["tools", "tools/bench"]
failed = 0
for tool, argv in json.loads(sys.argv[1]):
    code = __import__(tool).main(argv)
    if code != 0:
        print(f"{tool} {argv}: exit {code}", file=sys.stderr)
        failed = 1
sys.exit(failed)
"""
# The update compiled with einsum attention: XLA plans its buffers as an accelerator would. The
# block-skipping kernel's stand-ins (host callbacks) pin the schedule around them: XLA:CPU's
# buffers there hold 8 of the block's [T, F] tensors at the peak where the estimate counts 4, as
# the einsum programs' plans hold (est/xla 0.69 full, 0.73 minimal at these widths,
# docs/benchmarks.md), a figure of the stand-in, not of the kernel.
POD_STEP = ["--size", "tiny", "--layers", "2", "--states", "16", "--max-new-tokens", "128",
            "--prompt-lengths", "400:700", "--reply-lengths", "40:120", "--no-sampler",
            "--width-classes", "1", "--attention", "einsum"]  # fmt: skip
# The reference sampler's calls, whose dense cache the estimate's rollout part models. The
# frozen answerer's call at 64 prompts (8 a device): at recipe=paper's 512 the dense sampler
# prefills 64 prompts a device at once, where XLA plans 5.1 bytes a prefill score against the
# estimate's 6 (est/xla 1.18); the engine prefills `engine.prefill_prompts` (1) a device.
SAMPLER = ["--stage", "manager", "--layers", "2", "--layouts", "none", "--states", "16",
           "--max-new-tokens", "512", "--answer-max-new-tokens", "256",
           "--answerer-prompts", "64"]  # fmt: skip
COMMANDS = {
    # One compile of the real GRPO step (tiny widths, 2 blocks): ~20 s.
    "xla_peak": ("memory_vs_xla", ["--case", "tiny:2:32:256:64:1"]),
    # tools/bench/bench_pod_step.py's update row of the recipe's own update (one packed row a group,
    # the reply-column head, `model.scan_layers`, the reference outside the step) at tiny
    # widths, under each `model.remat_policy`: ~25 s each. One width class: at these widths
    # XLA:CPU gives the second class's scan its own score buffers (+17% of the peak under
    # minimal remat, docs/benchmarks.md), which it shares at 7B widths.
    "full": ("bench_pod_step", [*POD_STEP, "--remat-policy", "full"]),
    "minimal": ("bench_pod_step", [*POD_STEP, "--remat-policy", "minimal"]),
    # The manager stage's two reference-sampler calls at Qwen2.5-7B widths (2 blocks, compiled
    # in float32: XLA:CPU's bf16 programs add float32 copies of the weights that an
    # accelerator never makes): the policy's rollout (the recipe's 64 prompts x G 8 a call) and
    # the frozen answerer's reward call (64 prompts, greedy). ~30 s.
    "sampler": ("bench_pod_step", SAMPLER),
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    """The JSON report of each of COMMANDS, by name."""
    out = tmp_path_factory.mktemp("tools")
    runs = [(tool, [*argv, "--json", str(out / f"{name}.json")])
            for name, (tool, argv) in COMMANDS.items()]  # fmt: skip
    # The run's XLA flags without a device count: each tool sets its own.
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), XLA_FLAGS=xla_flags())
    cmd = [sys.executable, "-c", RUN_TOOLS, json.dumps(runs)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {name: json.loads((out / f"{name}.json").read_text()) for name in COMMANDS}


@pytest.mark.slow
def test_the_estimate_is_within_15_percent_of_xlas_peak(reports):
    (row,) = reports["xla_peak"]["rows"]
    assert row["xla"]["peak"] > 0
    assert 0.85 <= row["estimate_over_xla"] <= 1.15, row


@pytest.fixture(scope="module")
def packed_updates(reports) -> dict[str, dict]:
    """The update row of each `model.remat_policy`."""
    rows = {}
    for policy in ("full", "minimal"):
        (rows[policy],) = [r for r in reports[policy]["rows"] if r["stage"] == "update"]
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["full", "minimal"])
def test_the_estimate_is_within_15_percent_of_the_recipes_packed_update(packed_updates, policy):
    update = packed_updates[policy]
    assert update["widths"] == "packed" and update["xla_memory"]["peak"] > 0
    assert 0.85 <= update["estimate_over_xla"] <= 1.15, update


@pytest.mark.slow
def test_minimal_remat_trades_memory_for_the_recomputed_matmuls(packed_updates):
    """The same step keeps its weight matmuls' outputs: fewer compiled FLOPs, a higher peak."""
    full, minimal = packed_updates["full"], packed_updates["minimal"]
    assert minimal["compiled_flops"] < 0.97 * full["compiled_flops"], (full, minimal)
    assert minimal["xla_memory"]["peak"] > full["xla_memory"]["peak"]


@pytest.mark.slow
def test_the_estimate_is_within_15_percent_of_the_recipes_sampler_calls(reports):
    """The manager stage's policy rollout and frozen-answerer reward call (COMMANDS)."""
    rows = {r["stage"]: r for r in reports["sampler"]["rows"]}
    assert set(rows) == {"rollout", "reward"}
    for row in rows.values():
        assert 0.85 <= row["estimate_over_xla"] <= 1.15, row


def test_a_negative_count_is_a_named_usage_error(capsys):
    tool = load_tool("memory_estimate")
    for flag, field in (("--kv-tokens", "kv_tokens"), ("--group", "group")):
        with pytest.raises(SystemExit) as exit_info:
            tool.main([flag, "-1", "--size", "tiny", "--setup", "1x141GB"])
        assert exit_info.value.code == 2
        assert f"Workload.{field} must be >= 0, got -1" in capsys.readouterr().err
