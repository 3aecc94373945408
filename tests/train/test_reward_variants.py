"""The manager stage under each answer reward and under Mem0's reading rules: the reward of a
candidate is the configured reward of the frozen answerer's answers over the bank it writes,
and `ManagerRules` decide which of a reply's ops reach that bank."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from memr1.env import manager_reward as mr
from memr1.env.manager_io import ManagerRules
from memr1.env.rollout import manager_messages
from memr1.eval.judge import LocomoJudge
from memr1.eval.reward import AnswerReward
from memr1.train import stages
from tests.eval.fakes import KeywordJudgeBackend
from tests.train import tiny
from tests.train.test_manager_reward import OUTPUTS, STATE, RuleAnswerer, env

MEM0 = ManagerRules(show_date=False, repeated_id="in_order", adds_per_fact=0)


def rewards_of(outputs, reward=None, rules=None):
    e = env(RuleAnswerer())
    e = dataclasses.replace(e, **{k: v for k, v in (("reward", reward), ("rules", rules)) if v})
    return mr.manager_rewards([STATE], [outputs], e, key=jax.random.key(0))


def test_f1_gives_the_manager_partial_credit_and_em_stays_logged():
    got = rewards_of(OUTPUTS, AnswerReward("f1"))
    # Answers over the four banks: "Toby and Buddy" (the UPDATE), "Buddy" (DELETE + ADD: F1
    # 1/2 against "Toby and Buddy"), the malformed reply 0 whatever its bank says, and "Toby"
    # (the unknown id changed nothing: F1 1/2).
    np.testing.assert_allclose(got.rewards, [[1.0, 0.5, 0.0, 0.5]])
    assert got.stats["em"] == 0.25
    assert "judge_unparseable_frac" not in got.stats


def test_the_judge_reward_judges_each_distinct_answer_once():
    backend = KeywordJudgeBackend()  # CORRECT iff every gold word is in the answer
    got = rewards_of(OUTPUTS, AnswerReward("judge", LocomoJudge(backend)))
    np.testing.assert_array_equal(got.rewards, [[1.0, 0.0, 0.0, 0.0]])
    # Four banks, three distinct answers ("Toby" twice: the malformed and the unknown-id reply).
    assert len(backend.prompts) == 3
    assert got.stats["judge_distinct_frac"] == 0.75
    assert got.stats["judge_unparseable_frac"] == 0.0


# The paper-shaped reply that names the dog memory twice: first "no change", then the merge.
NONE_THEN_UPDATE = (
    '{"memory": [{"id": "0", "text": "Andrew has a dog named Toby", "event": "NONE"}, '
    '{"id": "0", "text": "Andrew has two dogs named Toby and Buddy", "event": "UPDATE", '
    '"old_memory": "Andrew has a dog named Toby"}]}'
)
# Two ADDs for one new fact.
TWO_ADDS = (
    '{"memory": [{"id": "0", "text": "Andrew has a dog named Toby", "event": "NONE"}, '
    '{"id": "2", "text": "Andrew chose a dog named Max", "event": "ADD"}, '
    '{"id": "3", "text": "Andrew adopted a dog named Buddy", "event": "ADD"}]}'
)


def test_first_op_wins_keeps_the_memory_and_in_order_lets_the_update_land():
    first = rewards_of([NONE_THEN_UPDATE, OUTPUTS[0]])
    mem0 = rewards_of([NONE_THEN_UPDATE, OUTPUTS[0]], rules=MEM0)
    assert first.rewards[0].tolist() == [0.0, 1.0]  # "Toby": the UPDATE was rejected
    assert mem0.rewards[0].tolist() == [1.0, 1.0]
    assert [op.invalid for op in first.parsed[0][0]] == [None, "duplicate_id"]
    assert [op.kind for op in mem0.parsed[0][0]] == ["NOOP", "UPDATE"]
    # The share of replies the rule is about, whichever rule reads them.
    assert first.stats["duplicate_id_frac"] == mem0.stats["duplicate_id_frac"] == 0.5


def test_one_add_per_fact_drops_the_second_add_and_mem0_keeps_both():
    first = rewards_of([TWO_ADDS])
    mem0 = rewards_of([TWO_ADDS], rules=MEM0)
    assert [op.invalid for op in first.parsed[0][0]] == [None, None, "excess_add"]
    assert [op.kind for op in mem0.parsed[0][0]] == ["NOOP", "ADD", "ADD"]
    assert first.stats["extra_add_frac"] == mem0.stats["extra_add_frac"] == 1.0


def test_the_session_date_is_shown_only_under_show_date():
    for style in ("full", "compact", "paper"):
        shown = manager_messages(STATE, style=style, show_date=True)[-1]["content"]
        hidden = manager_messages(STATE, style=style, show_date=False)[-1]["content"]
        assert "1 May, 2023" in shown and "1 May" not in hidden, style


def test_the_config_builds_the_reward_and_rules_and_refuses_unknowns():
    config = tiny.config()
    assert stages.answer_reward(config).name == "em"  # the paper's, by default
    assert ManagerRules.from_config(config) == ManagerRules()
    config.train.reward = "f1"
    config.agents.update(manager_date=False, repeated_id="in_order", adds_per_fact=0)
    assert stages.answer_reward(config).name == "f1"
    assert ManagerRules.from_config(config) == MEM0
    config.train.reward = "bleu"
    with pytest.raises(ValueError, match=r"train\.reward='bleu'"):
        stages.answer_reward(config)
    config.train.reward = "judge"  # judge.kind is "none"
    with pytest.raises(ValueError, match=r"train\.reward='judge' needs a judge"):
        stages.check_reward_config(config)
    config.agents.repeated_id = "last"
    with pytest.raises(ValueError, match=r"agents\.repeated_id='last'"):
        ManagerRules.from_config(config)


def test_a_local_judge_samples_its_verdicts_from_the_backbone(tmp_path):
    """judge.kind="local": the judge prompts go through the project's sampler (a random tiny
    model here, whose replies hold no verdict: each is counted unparseable and scored 0)."""
    from memr1.env import load
    from memr1.models.tokenizer_train import train_bpe_tokenizer

    train_bpe_tokenizer(
        ["Question: Gold answer: Generated answer: label"] * 20, tmp_path, vocab_size=300
    )
    backbone = load.load_backbone(hf_dir=None, size="tiny", tokenizer_dir=str(tmp_path))
    complete = load.local_judge(backbone, batch_size=2)
    seen = []

    def counting(prompts):
        seen.extend(prompts)
        replies = complete(prompts)
        assert all(isinstance(r, str) for r in replies)
        return replies

    config = tiny.config()
    config.train.reward = "judge"
    config.judge.kind = "local"
    reward = stages.answer_reward(config, local_judge=counting)
    got = reward(["City?", "City?", "Dog?"], ["Rome", "Rome", "Rex"], ["Rome", "Rome", "Max"])
    assert len(seen) == 2 and "Generated answer: Max" in seen[1]
    assert got.stats["judge_distinct_frac"] == pytest.approx(2 / 3)
    assert got.stats["judge_unparseable_frac"] == 1.0 and got.scores.tolist() == [0.0] * 3
    with pytest.raises(ValueError, match="local model"):
        stages.answer_reward(config)  # no local model given
