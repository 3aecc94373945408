"""configs/memr1.py: arg parsing, locking, and loud failures on mistyped keys and values."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def memr1_config(monkeypatch):
    # Configs live outside the package, at the repository root, as config_flags expects.
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("configs.memr1")


def test_defaults(memr1_config):
    config = memr1_config.get_config()
    assert config.model.size == "tiny" and config.model.dtype == "float32"
    assert (config.algo, config.stage, config.data.kind) == ("grpo", "manager", "synthloco")
    assert config.hf_dir is None
    assert config.agents.answer_max_new_tokens == 256


def test_overrides(memr1_config):
    config = memr1_config.get_config("backbone=qwen2.5-7b, algo=ppo,stage=answer,dataset=locomo")
    assert config.model.size == "qwen2.5-7b" and config.model.dtype == "bfloat16"
    assert (config.algo, config.stage, config.data.kind) == ("ppo", "answer", "locomo")


def test_runlocal_shrinks(memr1_config):
    for arg in ("runlocal", "backbone=llama3.1-8b,runlocal=true"):
        config = memr1_config.get_config(arg)
        assert config.model.size == "tiny"
        assert (config.mesh.data, config.mesh.fsdp, config.mesh.tensor) == (1, 1, 1)
        assert config.agents.answer_max_new_tokens == 32
    assert memr1_config.get_config("runlocal=false").mesh.fsdp == -1


@pytest.mark.parametrize(
    "arg, answer, manager",
    [("", 256, 512), ("runlocal", 32, 48), ("backbone=qwen2.5-7b,recipe=paper", 2048, 2048)],
)
def test_one_budget_per_agent(memr1_config, arg, answer, manager):
    """Each agent's replies stop at one budget wherever it samples: its stage's rollouts, the
    manager stage's reward (the frozen Answer Agent), and evaluation's agents."""
    from memr1.env.answer import AnswerConfig
    from memr1.env.ingest import IngestConfig
    from memr1.env.policy import SamplingConfig

    got = {}
    for stage in ("answer", "manager"):
        config = memr1_config.get_config(f"{arg},stage={stage}".lstrip(","))
        got[stage] = SamplingConfig.from_config(config, "rollout").max_new_tokens
        assert AnswerConfig.from_config(config).sampling.max_new_tokens == answer
        assert IngestConfig.from_config(config).manager_sampling.max_new_tokens == manager
        assert "max_new_tokens" not in config.train
    assert got == {"answer": answer, "manager": manager}


def test_locked(memr1_config):
    config = memr1_config.get_config()
    with pytest.raises(AttributeError):
        config.agents.temprature = 0.5  # a typo must not create a new field
    with pytest.raises(AttributeError):
        config.new_section = 1
    with pytest.raises(TypeError):
        config.agents.answer_max_new_tokens = "many"
    config.agents.temperature = 0.5  # existing fields stay writable
    config.hf_dir = "/ckpt/qwen"  # the placeholder takes a string
    assert config.hf_dir == "/ckpt/qwen"


@pytest.mark.parametrize(
    "arg, message",
    [
        ("backbon=tiny", r"unknown config arg key 'backbon'.*\['algo', 'backbone',"),
        ("algo=dpo", r"algo='dpo' is not one of \['grpo', 'ppo', 'sft'\]"),
        ("backbone=qwen3", "backbone='qwen3' is not one of"),
        ("stage", "needs a value"),
        ("runlocal=maybe", "takes true/false"),
    ],
)
def test_bad_args_fail_loudly(memr1_config, arg, message):
    with pytest.raises(ValueError, match=message):
        memr1_config.get_config(arg)


def test_sweep_args_are_valid(memr1_config):
    args = memr1_config.sweep()
    assert len(args) == len(set(args)) == 2 * len(memr1_config.SWEEP_BACKBONES)
    for arg in args:
        assert memr1_config.get_config(arg).model.size != "tiny"


def test_the_paper_recipe_and_its_micro_batches(memr1_config):
    from memr1.train.mesh import resolve_micro_batches

    config = memr1_config.get_config("backbone=qwen2.5-7b,stage=answer,recipe=paper")
    t = config.train
    assert (t.lr, t.critic_lr, t.batch_size, t.temperature) == (1e-6, 1e-5, 128, 1.0)
    # Both agents' one budget: the rollouts', validation's, the reward's and evaluation's.
    assert (config.agents.answer_max_new_tokens, config.agents.manager_max_new_tokens) == (
        2048,
        2048,
    )
    assert config.model.remat and config.agents.max_prompt_tokens == 4096
    assert config.model.scan_layers  # one compiled block: remat bounds memory on XLA:CPU too
    assert (t.rollout_batch_size, memr1_config.get_config().train.rollout_batch_size) == (64, 0)
    # The engine's slots (batch × G over 8 devices) and pool, sized by the rollout benchmark.
    assert (config.agents.batch_size, config.engine.kv_tokens) == (512, 131072)
    # The recipe's GRPO update packs one row a group (train.shared_prompt); on one device here
    # a micro-batch is one packed group.
    from memr1.rl.grpo import GRPOConfig

    resolve_micro_batches(config)
    assert t.n_micro == 128
    assert GRPOConfig.from_config(config).pack_group == t.group_size == 8
    config = memr1_config.get_config("recipe=paper")
    config.train.n_micro = 4
    with pytest.raises(ValueError, match="set one of them"):
        resolve_micro_batches(config)
    config = memr1_config.get_config("recipe=paper")
    config.train.batch_size = 3
    config.train.shared_prompt = False
    resolve_micro_batches(config)
    assert config.train.n_micro == 24


def test_every_model_key_reaches_the_trained_model(memr1_config):
    """The model section's keys either load the backbone (size, dtypes) or are set on the
    trained model's `ModelConfig` (`memr1.train.prepare.training_model_settings`), so no key of
    the section is silently ignored; `remat_policy` is "full" unless a run chooses "minimal"."""
    from memr1.models.config import get_size
    from memr1.train.prepare import training_model_settings

    config = memr1_config.get_config("recipe=paper")
    config.unlock()
    config.model.remat_policy = "minimal"
    settings = training_model_settings(config)
    assert set(settings) | {"size", "dtype", "param_dtype"} == set(config.model)
    cfg = get_size("tiny").replace(**settings)
    assert (cfg.remat, cfg.remat_policy, cfg.scan_layers) == (True, "minimal", True)
    assert memr1_config.get_config("recipe=paper").model.remat_policy == "full"
    config.model.remat_policy = "dots"
    with pytest.raises(ValueError, match="remat_policy='dots'"):
        get_size("tiny").replace(**training_model_settings(config))
