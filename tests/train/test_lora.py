"""LoRA through qwix on the tiny policy: only the adapters train, the merged model is the adapted
model, and checkpoints keep the adapters and merge them for evaluation."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from memr1.models import masks, transformer
from memr1.train import lora, mesh, sft, state, steps
from memr1.train.checkpoint import Checkpointer, restore_params
from tests.tool import load_tool
from tests.train import tiny

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

LORA = lora.LoraConfig.from_config(tiny.config(lora_rank=4, lora_alpha=8.0))
STEPS = 4


def _flat(params) -> dict:
    return {p: np.asarray(v.get_value()) for p, v in nnx.to_flat_state(params)}


def _lora_state(**critic):
    """(setup, base params, initial state) of a LoRA policy on the tiny model (plus a critic when
    critic_cfg / critic_optim are given)."""
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[tiny.CFG])
    _, base = transformer.init_model(tiny.CFG, seed=0)
    setup, s0 = state.create_train_state(
        m,
        tiny.CFG,
        state.OptimConfig(lr=1e-2, warmup_steps=0),
        params=base,
        module_fn=lora.module_fn(tiny.CFG, LORA),
        trainable=nnx.LoRAParam,
        **critic,
    )
    return setup, base, s0


@pytest.fixture(scope="module")
def trained():
    """(setup, base params, initial state, state after STEPS SFT steps, losses)."""
    setup, base, s0 = _lora_state()
    step = sft.make_sft_step(setup, tiny.sft_config(n_micro=2))
    s, losses = tiny.copy_tree(s0), []
    for _ in range(STEPS):
        s, metrics = step(s, tiny.sft_batch(0))
        losses.append(float(metrics["loss"]))
    return setup, base, s0, s, losses


def test_lora_sft_trains_only_the_adapters_and_lowers_the_loss(trained):
    setup, base, s0, s, losses = trained
    # Rank 4 on every attention and MLP weight of the one block (d=32, h=4, k=2, n=8, f=48).
    expected = (32 * 4 + 4 * 32) + 2 * (32 * 4 + 4 * 16) + (32 * 4 + 4 * 32)  # q, k, v, o
    expected += 2 * (32 * 4 + 4 * 48) + (48 * 4 + 4 * 32)  # gate, up, down
    assert lora.count_adapter_params(s.params) == expected == 1856
    # Adam's moments cover the adapters only.
    mu = s.opt_state[1][0].mu
    assert transformer.count_params(mu) == expected
    assert losses[-1] < losses[0] - 0.05, losses
    before, after = _flat(s0.params), _flat(s.params)
    assert before.keys() == after.keys()
    for path, value in after.items():
        if lora.is_lora_path(path):
            assert not np.array_equal(value, before[path]), f"adapter {path} did not train"
        else:
            assert np.array_equal(value, before[path]), f"base weight {path} changed"
    # The base weights are exactly the ones the state was created from.
    for path, value in _flat(base).items():
        assert np.array_equal(value, after[path]), path
    assert int(s.n_refused) == 0


def _logits(graphdef, params, batch):
    tokens, valid = jnp.asarray(batch["tokens"]), jnp.asarray(batch["valid"])
    positions, mask = masks.positions_from_valid(valid), masks.causal_mask(valid)
    h, _ = transformer.forward(graphdef, params, tokens, positions, mask)
    return transformer.logits_fn(graphdef, params, h)


def test_merged_model_gives_the_adapted_models_logits(trained):
    setup, base, _, s, _ = trained
    plain_graphdef, _ = transformer.abstract_model(tiny.CFG)
    merged = lora.merge(s.params, LORA.scale)
    assert _flat(merged).keys() == _flat(base).keys()
    batch = tiny.sft_batch(1)
    adapted = np.asarray(_logits(setup.graphdef, s.params, batch))
    np.testing.assert_allclose(
        np.asarray(_logits(plain_graphdef, merged, batch)), adapted, atol=2e-5
    )
    # The adapters matter: the base model's logits are far from them, and a merge with the
    # wrong scale (alpha instead of alpha / rank) is too.
    assert np.abs(np.asarray(_logits(plain_graphdef, base, batch)) - adapted).max() > 1e-2
    wrong = lora.merge(s.params, LORA.alpha)
    assert np.abs(np.asarray(_logits(plain_graphdef, wrong, batch)) - adapted).max() > 1e-2


def test_lora_checkpoints_keep_the_adapters_and_merge_for_evaluation(trained, tmp_path):
    setup, base, _, s, _ = trained
    with Checkpointer(tmp_path / "lora", metadata=lora.checkpoint_metadata(LORA)) as ckpt:
        ckpt.save(STEPS, s, {"next_step": STEPS})
    with Checkpointer(tmp_path / "lora") as ckpt:
        restored, position = ckpt.restore_latest(setup.abstract_state)
        assert ckpt.step_metadata(STEPS) == {"lora": LORA.as_metadata()}
    assert position == {"next_step": STEPS}
    assert tiny.leaves_equal(restored, s), "the LoRA train state did not round-trip"
    # Read as a plain model (evaluation, the frozen answerer): the adapters come merged.
    merged = restore_params(tmp_path / "lora", base)
    assert tiny.leaves_equal(merged, lora.merge(s.params, LORA.scale))
    # Adapters without their settings cannot be merged: a clear error, not the bare base.
    with Checkpointer(tmp_path / "bare") as ckpt:
        ckpt.save(1, s, {"next_step": 1})
    with pytest.raises(ValueError, match="no LoRA settings"):
        restore_params(tmp_path / "bare", base)


def test_bad_lora_settings_are_refused():
    assert lora.LoraConfig.from_config(tiny.config()) is None  # lora_rank 0: every weight trains
    assert (LORA.rank, LORA.alpha, LORA.module_path) == (4, 8.0, ".*attn|.*mlp")
    with pytest.raises(ValueError, match="lora_rank"):
        dataclasses.replace(LORA, rank=-1)
    with pytest.raises(ValueError, match="lora_alpha"):
        dataclasses.replace(LORA, alpha=0.0)
    with pytest.raises(ValueError, match="lora_module_path"):
        dataclasses.replace(LORA, module_path="(")
    nothing = lora.module_fn(tiny.CFG, dataclasses.replace(LORA, module_path="nope"))
    with pytest.raises(ValueError, match="matches no module"):
        jax.eval_shape(lambda: nnx.split(nothing())[1])


def test_memory_estimate_counts_optimiser_memory_for_the_adapters_only():
    tool = load_tool("memory_estimate")
    full = tool.estimate("tiny", "1x141GB", tool.Workload())
    low = tool.estimate("tiny", "1x141GB", tool.Workload(lora_rank=8))
    adapters = low["trained_params_per_device"]
    # Rank 8 on the 4 blocks of tiny (d=192, 6 heads, 2 kv heads of 32, d_ff=576).
    per_block = (192 * 8 + 8 * 192) + 2 * (192 * 8 + 8 * 64) + (192 * 8 + 8 * 192)
    per_block += 2 * (192 * 8 + 8 * 576) + (576 * 8 + 8 * 192)
    assert adapters == 4 * per_block
    assert low["params_per_device"] == full["params_per_device"] + adapters
    assert low["grads"] == 4 * adapters and low["grad_accum"] == 4 * adapters
    assert 8 * adapters <= low["adamw"] <= 8 * adapters + 64  # two float32 moments (+ counts)
    assert low["answer_agent"] == full["answer_agent"]  # a merged, plain model
    assert low["total"] < full["total"]


def test_lora_ppo_trains_the_adapters_and_the_whole_critic():
    """PPO with a LoRA policy: the base stays bitwise, the adapters and the (whole) critic learn."""

    setup, base, s0 = _lora_state(
        critic_cfg=tiny.CFG, critic_optim=state.OptimConfig(lr=5e-3, warmup_steps=0)
    )
    # The critic starts from the base weights (no adapters), trained whole.
    assert tiny.leaves_equal(s0.critic_params["trunk"], base)
    assert not lora.has_adapters(s0.critic_params)
    cfg = tiny.ppo_config(n_micro=2, lam=0.9)
    raw = tiny.grpo_batch()
    raw.pop("advantages")
    raw["rewards"] = np.array([1, 0, 1, 1, 0, 0, 1, 0], np.float32)
    batch, _ = steps.make_ppo_prepare(setup, cfg)(s0, raw)
    step = steps.make_ppo_step(setup, cfg)
    s, value_losses = tiny.copy_tree(s0), []
    for _ in range(3):
        s, metrics = step(s, batch)
        assert float(metrics["update_refused"]) == 0
        value_losses.append(float(metrics["value_loss"]))
    assert value_losses[2] < 0.8 * value_losses[0], value_losses
    before, after = _flat(s0.params), _flat(s.params)
    trained = [p for p in after if lora.is_lora_path(p) and not np.array_equal(after[p], before[p])]
    assert trained, "no adapter moved under PPO"
    for path, value in after.items():
        if not lora.is_lora_path(path):
            np.testing.assert_array_equal(value, before[path], err_msg=f"base {path} moved")
    assert not tiny.leaves_equal(s.critic_params, s0.critic_params)
