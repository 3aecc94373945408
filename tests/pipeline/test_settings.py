"""The environment's settings come from the config alone (`from_config`): each field reads its own
key, so changing a key changes the setting, and no dataclass keeps a default that could drift."""

from __future__ import annotations

import pytest

from configs import memr1 as memr1_config
from memr1.env.answer import AnswerConfig
from memr1.env.ingest import IngestConfig
from memr1.env.memory_store import BankSpec
from memr1.env.policy import SamplingConfig
from memr1.env.systems import SystemSpec


def _config():
    """The runlocal config with every key these settings read set to a value of its own."""
    config = memr1_config.get_config("runlocal")
    config.agents.update(temperature=0.3, extract_max_new_tokens=11, manager_max_new_tokens=12)
    config.agents.update(answer_max_new_tokens=13, style="full", distill=False)
    config.memory.update(capacity=21, text_bytes=22, log_capacity=23, overflow="raise")
    config.memory.update(retriever="exact_numpy", fact_source="turn", k_per_fact=4, k_per_speaker=6)
    config.train.temperature = 0.7
    return config


@pytest.mark.parametrize("stage, budget", [("manager", 12), ("answer", 13)])
def test_sampling_reads_the_agents_budget_and_rollouts_their_stages(stage, budget):
    """One budget per agent: the training rollout of a stage samples at train.temperature
    within the stage's agent budget, the one its evaluation and reward read."""
    config = _config()
    config.stage = stage
    got = {}
    for use in ("extract", "manager", "answer", "rollout"):
        sampling = SamplingConfig.from_config(config, use)
        got[use] = (sampling.temperature, sampling.max_new_tokens, sampling.top_k, sampling.top_p)
    assert got == {
        "extract": (0.3, 11, None, None),
        "manager": (0.3, 12, None, None),
        "answer": (0.3, 13, None, None),
        "rollout": (0.7, budget, None, None),
    }
    with pytest.raises(ValueError, match="'judge'"):
        SamplingConfig.from_config(config, "judge")


def test_training_has_no_budget_of_its_own():
    """A rollout budget apart from the agent's (train.max_new_tokens, which once trained at
    2,048 what the reward and evaluation cut at 256) is no longer a setting: overriding it fails
    by name, as any mistyped key does."""
    config = _config()
    with pytest.raises(AttributeError, match="max_new_tokens"):
        config.train.max_new_tokens = 2048


def test_answer_ingest_and_bank_read_their_keys():
    config = _config()
    answer = AnswerConfig.from_config(config)
    assert (answer.k_per_speaker, answer.distill, answer.style) == (6, False, "full")
    assert answer.sampling == SamplingConfig.from_config(config, "answer")
    ingest = IngestConfig.from_config(config)
    assert (ingest.fact_source, ingest.k_per_fact, ingest.style) == ("turn", 4, "full")
    assert ingest.extract_sampling.max_new_tokens == 11
    assert ingest.manager_sampling.max_new_tokens == 12
    assert BankSpec.from_config(config) == BankSpec(21, 22, 23, "raise", "exact_numpy")


@pytest.mark.parametrize(
    ("system", "fact_source", "use_manager", "distill"),
    [("locomo_rag", "turn", False, False), ("mem0", "llm", True, False),
     ("memory_r1", "llm", True, True)],
)  # fmt: skip
def test_a_system_adjusts_the_configured_settings(system, fact_source, use_manager, distill):
    config = memr1_config.get_config(f"system={system},backbone=qwen2.5-7b")
    spec = SystemSpec.from_config(config)
    assert (spec.name, spec.ingest.fact_source) == (system, fact_source)
    assert (spec.ingest.use_manager, spec.answer.distill) == (use_manager, distill)
