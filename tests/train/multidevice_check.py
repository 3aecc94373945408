"""Run as a script by test_multidevice.py: SFT and GRPO on 8 fake CPU devices (2×2×2 mesh).

XLA reads `--xla_force_host_platform_device_count` once, when the backend starts, so this runs
in its own process with the flag set before JAX is imported. It exits non-zero (an assertion)
on any mismatch and prints one JSON line of measurements on success.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import json

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from memr1.train import mesh, sft, state, steps
from tests.train import tiny

CFG = tiny.CFG.replace(n_layers=2)
OPTIM = state.OptimConfig(lr=1e-3, warmup_steps=0)
GRPO_CFG = tiny.grpo_config(n_micro=2, kl_beta=0.05)


def max_grad_diff(a, b) -> float:
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in pairs)


def check_sharded(s: state.TrainState) -> None:
    """Parameters and Adam moments live in shards, by their logical names."""
    embed = s.params["embed"]  # (vocab 64, embed 32) over (tensor, fsdp)
    assert embed.sharding.spec == P("tensor", "fsdp"), embed.sharding
    assert embed.addressable_shards[0].data.shape == (32, 16)
    wq = s.params["layers"][1]["attn"]["wq"]  # (embed 32, heads 4, head_dim 8)
    assert wq.sharding.spec == P("fsdp", "tensor", None), wq.sharding
    assert wq.addressable_shards[0].data.shape == (16, 2, 8)
    down = s.opt_state[1][0].nu["layers"][0]["mlp"]["down"]  # Adam's second moment (mlp, embed)
    assert down.addressable_shards[0].data.shape == (24, 16)
    assert len(embed.sharding.device_set) == 8


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    one = mesh.build_mesh(1, 1, 1, devices=jax.devices()[:1])
    eight = mesh.build_mesh(2, 2, 2, model_cfgs=[CFG])
    setup1, s1 = state.create_train_state(one, CFG, OPTIM, seed=0)
    setup8, s8 = state.create_train_state(eight, CFG, OPTIM, seed=0)
    check_sharded(s8)
    # Random initialisation gives the same numbers however the parameters are sharded.
    assert tiny.leaves_equal(s1.params, s8.params), "sharded init differs from unsharded init"
    ref1, ref8 = state.make_reference(setup1, s1.params), state.make_reference(setup8, s8.params)
    # The PPO critic's trunk starts as a copy of the policy's weights, made in the same shards.
    critic = dict(critic_cfg=CFG, critic_optim=tiny.optim(critic=True))
    _, c8 = state.create_train_state(eight, CFG, OPTIM, seed=0, **critic)
    trunk = c8.critic_params["trunk"]
    assert trunk["embed"].sharding.spec == P("tensor", "fsdp"), trunk["embed"].sharding
    assert trunk["embed"].addressable_shards[0].data.shape == (32, 16)
    assert len(trunk["embed"].sharding.device_set) == 8
    assert tiny.leaves_equal(trunk, c8.params), "the critic's trunk is not the policy's"
    del c8
    out = {}

    sft_cfg = tiny.sft_config(n_micro=2)
    batch = tiny.sft_batch()
    loss1, g1, _ = sft.make_sft_step(setup1, sft_cfg, grads_only=True)(s1, batch)
    loss8, g8, _ = sft.make_sft_step(setup8, sft_cfg, grads_only=True)(s8, batch)
    assert abs(float(loss1) - float(loss8)) < 1e-5, (float(loss1), float(loss8))
    out["sft_grad_max_diff"] = max_grad_diff(g1, g8)
    assert out["sft_grad_max_diff"] < 1e-5, out
    assert jax.tree.leaves(g8)[0].sharding.spec == P("tensor", "fsdp")

    batch = tiny.grpo_batch()
    b1 = tiny.with_reference(setup1, GRPO_CFG, batch, ref1)
    b8 = tiny.with_reference(setup8, GRPO_CFG, batch, ref8)
    loss1, g1, _ = steps.make_grpo_step(setup1, GRPO_CFG, grads_only=True)(s1, b1)
    loss8, g8, _ = steps.make_grpo_step(setup8, GRPO_CFG, grads_only=True)(s8, b8)
    assert abs(float(loss1) - float(loss8)) < 1e-5, (float(loss1), float(loss8))
    out["grpo_grad_max_diff"] = max_grad_diff(g1, g8)
    assert out["grpo_grad_max_diff"] < 1e-5, out

    # Two full updates on each mesh: the second loss is computed with updated weights.
    step1, step8 = (
        tiny.with_reference_step(su, GRPO_CFG, steps.make_grpo_step(su, GRPO_CFG))
        for su in (setup1, setup8)
    )
    losses = {}
    for name, step, s, ref in (("one", step1, s1, ref1), ("eight", step8, s8, ref8)):
        for i in range(2):
            s, metrics = step(s, tiny.grpo_batch(step=i), ref)
            assert float(metrics["update_refused"]) == 0.0
        losses[name] = float(metrics["loss"])
        if name == "eight":
            check_sharded(s)  # the donated, updated state keeps its shardings
    assert abs(losses["one"] - losses["eight"]) < 1e-5, losses
    out["grpo_second_loss"] = losses

    try:
        mesh.build_mesh(1, 1, 8, model_cfgs=[CFG])
        raise AssertionError("a tensor axis of 8 over 4 heads was accepted")
    except ValueError as err:
        assert "tensor=8 does not divide n_heads=4" in str(err), err
    rows4 = {k: v[:4] for k, v in tiny.sft_batch().items()}
    try:
        sft.make_sft_step(setup8, sft_cfg).trace(s8, rows4)
        raise AssertionError("4 rows in 2 micro-batches over 4 batch shards were accepted")
    except ValueError as err:
        assert "need a multiple of 8" in str(err), err
    print("MULTIDEVICE_OK " + json.dumps(out))


if __name__ == "__main__":
    main()
