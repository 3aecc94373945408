"""Run as a script by test_lora_multidevice.py, on 8 fake CPU devices (a 2×2×2 mesh).

1. A LoRA SFT step on the mesh equals the single-device step, the adapters are sharded by the
   logical names they inherit from their weights, and the base weights stay bitwise unchanged.
2. The train command's model setup (`memr1.train.prepare.prepare_models`) places the train
   state and the manager stage's frozen answerer in their NamedShardings on the mesh (the HF
   weights loaded straight into them, a LoRA answer checkpoint merged into them; the answerer
   in the compute dtype) and keeps no reference of its own to the backbone's weights; under PPO
   the critic starts as a copy of the backbone's weights, in its own shards.
Exits non-zero (an assertion) on any mismatch; prints one JSON line of measurements on success.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import json
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from configs.memr1 import get_config
from memr1.models import transformer
from memr1.models.hf_io import load_hf
from memr1.train import lora, mesh, sft, state
from memr1.train.checkpoint import Checkpointer
from memr1.train.prepare import prepare_models
from tests.train import tiny

LORA = lora.LoraConfig.from_config(tiny.config(lora_rank=4, lora_alpha=8.0))
OPTIM = state.OptimConfig(lr=1e-2, warmup_steps=0)


def max_diff(a, b) -> float:
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return max(float(np.abs(np.asarray(x) - np.asarray(y)).max()) for x, y in pairs)


def lora_state(m, base):
    return state.create_train_state(
        m,
        tiny.CFG,
        OPTIM,
        params=base,
        module_fn=lora.module_fn(tiny.CFG, LORA),
        trainable=nnx.LoRAParam,
    )


def check_step(out: dict) -> None:
    one = mesh.build_mesh(1, 1, 1, devices=jax.devices()[:1])
    eight = mesh.build_mesh(2, 2, 2, model_cfgs=[tiny.CFG])
    _, base = transformer.init_model(tiny.CFG, seed=0)
    base_host = jax.device_get(base)  # the states may share (and donate) the base's buffers
    setup1, s1 = lora_state(one, base)
    setup8, s8 = lora_state(eight, base)
    assert tiny.leaves_equal(s1.params, s8.params), "adapter init depends on the sharding"
    attn = s8.params["layers"][0]["attn"]
    assert attn["wq_lora_a"].sharding.spec == P("fsdp", None), attn["wq_lora_a"].sharding
    assert attn["wq_lora_b"].sharding.spec == P(None, "tensor", None), attn["wq_lora_b"].sharding
    assert attn["wo_lora_a"].sharding.spec == P("tensor", None, None), attn["wo_lora_a"].sharding
    assert len(attn["wq_lora_b"].sharding.device_set) == 8

    cfg = tiny.sft_config(n_micro=2)
    batch = tiny.sft_batch()
    loss1, g1, _ = sft.make_sft_step(setup1, cfg, grads_only=True)(s1, batch)
    loss8, g8, _ = sft.make_sft_step(setup8, cfg, grads_only=True)(s8, batch)
    assert abs(float(loss1) - float(loss8)) < 1e-5, (float(loss1), float(loss8))
    out["lora_grad_max_diff"] = max_diff(g1, g8)
    assert out["lora_grad_max_diff"] < 1e-5, out

    finals = {}
    adapters0 = jax.device_get(nnx.state(s1.params, nnx.LoRAParam))
    for name, setup, s in (("one", setup1, s1), ("eight", setup8, s8)):
        step = sft.make_sft_step(setup, cfg)
        s = tiny.copy_tree(s)
        for i in range(2):
            s, metrics = step(s, tiny.sft_batch(i))
            assert float(metrics["update_refused"]) == 0.0
        finals[name] = s
    out["lora_param_max_diff_after_2_steps"] = max_diff(
        finals["one"].params, finals["eight"].params
    )
    assert out["lora_param_max_diff_after_2_steps"] < 1e-5, out
    for s in finals.values():
        assert tiny.leaves_equal(lora.base_part(s.params), base_host), "a base weight changed"
        adapters = nnx.state(s.params, nnx.LoRAParam)
        assert not tiny.leaves_equal(adapters, adapters0), "the adapters did not train"
    wq_b = finals["eight"].params["layers"][0]["attn"]["wq_lora_b"]
    assert wq_b.sharding.spec == P(None, "tensor", None), wq_b.sharding


def assert_placed(tree, shardings, what: str) -> None:
    """Every array of `tree` is NamedSharding-placed over all 8 devices exactly as intended."""
    for leaf, want in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings), strict=True):
        assert isinstance(leaf.sharding, NamedSharding), (what, leaf.sharding)
        assert leaf.sharding == want, (what, leaf.sharding, want)
        assert len(leaf.sharding.device_set) == 8, (what, leaf.sharding)


def manager_config(rank: int):
    config = get_config("runlocal,stage=manager,algo=grpo")
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 2, 2, 2
    config.train.lora_rank = rank
    return config


def check_cli_setup(out: dict, tmp: Path) -> None:
    hf_dir = tiny.make_hf_base(tmp / "base")
    _, _, hf_params = load_hf(hf_dir)

    # Full fine-tuning; the answerer is the backbone's own weights.
    models = prepare_models(manager_config(0), hf_dir=str(hf_dir))
    setup = models.setup
    assert models.backbone.params is None, "the setup kept the backbone's weights"
    assert_placed(models.state.params, setup.state_shardings.params, "policy params")
    assert_placed(models.state.opt_state, setup.state_shardings.opt_state, "optimiser state")
    assert_placed(models.answerer, setup.state_shardings.params, "frozen answerer")
    embed = models.answerer["embed"]
    assert embed.sharding.spec == P("tensor", "fsdp") and embed.addressable_shards[
        0
    ].data.shape == (
        150,
        16,
    )
    assert tiny.leaves_equal(models.answerer, hf_params), "the answerer is not the backbone"
    assert tiny.leaves_equal(models.state.params, hf_params), "the policy is not the backbone"
    # A separate copy: no buffer is shared with the (donated) train state.
    policy_ptrs = {
        x.addressable_shards[0].data.unsafe_buffer_pointer()
        for x in jax.tree.leaves(models.state.params)
    }
    answer_ptrs = {
        x.addressable_shards[0].data.unsafe_buffer_pointer()
        for x in jax.tree.leaves(models.answerer)
    }
    assert not policy_ptrs & answer_ptrs, "the answerer shares buffers with the train state"

    # bfloat16 compute: the answerer, only ever sampled, is kept in it, in the same shards.
    config = manager_config(0)
    config.model.dtype = "bfloat16"
    half = prepare_models(config, hf_dir=str(hf_dir))
    assert_placed(half.answerer, half.setup.state_shardings.params, "bfloat16 answerer")
    dtypes = {x.dtype for x in jax.tree.leaves(half.answerer)}
    assert dtypes == {np.dtype("bfloat16")}, dtypes
    cast = jax.tree.map(lambda x: x.astype("bfloat16"), hf_params)
    assert tiny.leaves_equal(half.answerer, cast), "the answerer is not the backbone, cast"
    assert {x.dtype for x in jax.tree.leaves(half.state.params)} == {np.dtype("float32")}

    # LoRA on; its checkpoint (adapters made non-zero) becomes the next run's frozen answerer.
    lora_models = prepare_models(manager_config(4), hf_dir=str(hf_dir))
    lsetup, ls = lora_models.setup, lora_models.state
    assert_placed(ls.params, lsetup.state_shardings.params, "LoRA policy params")
    assert_placed(ls.opt_state, lsetup.state_shardings.opt_state, "LoRA optimiser state")
    out["trainable_params_lora_rank4"] = lora.count_adapter_params(ls.params)
    assert transformer.count_params(ls.opt_state[1][0].mu) == out["trainable_params_lora_rank4"]
    flat = [
        (p, v.replace(value=v.get_value() + 0.05) if str(p[-1]).endswith("_lora_b") else v)
        for p, v in nnx.to_flat_state(ls.params)
    ]
    ls = ls.replace(params=nnx.from_flat_state(flat))
    with Checkpointer(tmp / "answer", metadata=lora.checkpoint_metadata(lora_models.lora)) as c:
        c.save(1, ls, {"next_step": 1})
    expected = lora.merge(jax.device_get(ls.params), lora_models.lora.scale)
    again = prepare_models(
        manager_config(0), hf_dir=str(hf_dir), answer_checkpoint=str(tmp / "answer")
    )
    assert_placed(again.answerer, again.setup.state_shardings.params, "restored answerer")
    out["merged_answerer_max_diff"] = max_diff(again.answerer, expected)
    assert out["merged_answerer_max_diff"] < 1e-6, out
    assert max_diff(again.answerer, hf_params) > 1e-3, "the answer checkpoint was not merged"
    check_ppo_critic(hf_dir, hf_params)


def check_ppo_critic(hf_dir: Path, hf_params) -> None:
    """PPO with a LoRA policy: the critic's trunk is the backbone's weights (not the adapters),
    placed in the critic's shardings, in buffers the (donated) policy does not share."""
    config = get_config("runlocal,stage=answer,algo=ppo")
    config.mesh.data, config.mesh.fsdp, config.mesh.tensor = 2, 2, 2
    config.train.lora_rank = 4
    models = prepare_models(config, hf_dir=str(hf_dir))
    s, shardings = models.state, models.setup.state_shardings
    assert_placed(s.critic_params, shardings.critic_params, "critic params")
    assert tiny.leaves_equal(s.critic_params["trunk"], hf_params), "the critic is not the backbone"
    assert not lora.has_adapters(s.critic_params)
    ptrs = lambda tree: {
        x.addressable_shards[0].data.unsafe_buffer_pointer() for x in jax.tree.leaves(tree)
    }
    assert not ptrs(s.params) & ptrs(s.critic_params), "the critic shares the policy's buffers"


def main() -> None:
    assert jax.device_count() == 8, jax.devices()
    out: dict = {}
    check_step(out)
    with tempfile.TemporaryDirectory() as tmp:
        check_cli_setup(out, Path(tmp))
    print("LORA_MULTIDEVICE_OK " + json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
