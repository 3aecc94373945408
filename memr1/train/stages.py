"""What an RL stage trains on: its states from the tuples and the rollout that samples and scores
them with the run's answer reward (`train.reward`: the Answer Agent's own answer in the answer
stage, the frozen Answer Agent's answers over each candidate bank in the manager stage)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from absl import logging

from memr1.env import load, rollout
from memr1.env.answer import AnswerConfig
from memr1.env.collision import collision_states
from memr1.env.manager_io import ManagerRules
from memr1.env.manager_reward import RewardEnv
from memr1.env.memory_store import BankSpec
from memr1.env.policy import SamplingConfig
from memr1.eval.judge import LocomoJudge
from memr1.eval.judge_backends import backend_from_config
from memr1.eval.reward import AnswerReward, check_reward
from memr1.sampling.engine import EngineSettings
from memr1.train import multihost
from memr1.train.prepare import Models


def check_reward_config(config) -> str:
    """Refuses an unknown `train.reward`, and the judge reward without a judge, by name."""
    name = check_reward(config.train.reward)
    if name == "judge" and config.judge.kind == "none":
        raise ValueError(
            "config train.reward='judge' needs a judge: set judge.kind='openai' (with "
            "judge.base_url and judge.model) or judge.kind='local'"
        )
    return name


def answer_reward(config, local_judge=None) -> AnswerReward:
    """The run's answer reward (`memr1.eval.reward`); for "judge" the `judge` section's judge,
    `local_judge` (`prompts -> replies`) serving judge.kind="local"."""
    name = check_reward_config(config)
    if name != "judge":
        return AnswerReward(name)
    return AnswerReward(name, LocomoJudge(backend_from_config(config.judge, local=local_judge)))


def reward_env(config, models: Models, reward: AnswerReward | None = None) -> RewardEnv:
    """The manager stage's reward: the frozen Answer Agent reading banks as evaluation does,
    its answers scored by `reward` (the config's when not given), the manager's replies read
    under the config's rules."""
    from memr1.embed import Encoder

    answerer = load.make_policy(
        models.answer_backbone,
        # Each process answers over its own states' banks, on its own devices.
        multihost.local_replica(models.answerer),
        batch_size=config.agents.batch_size,
        max_prompt_tokens=config.agents.max_prompt_tokens,
        name="frozen answerer",
        engine=EngineSettings.from_config(config),
    )
    return RewardEnv(
        answerer=answerer,
        embed=Encoder.from_dir().encode,
        answer=AnswerConfig.from_config(config),
        bank=BankSpec.from_config(config),
        reward=reward or answer_reward(config),
        rules=ManagerRules.from_config(config),
    )


def rl_states(
    config, models: Models, policy, tuples, *, reward: AnswerReward | None = None, env=None
) -> tuple[list, Callable]:
    """The stage's RL states from `tuples` and `rollout(params, states, key)` that samples and
    scores them with `reward`: the answer stage's own answers, or the frozen Answer Agent's
    over each candidate bank (answering as evaluation does, `memr1.env.manager_reward`) for the
    manager stage (`env`, built here when not given; `reward`: the config's when not given)."""
    reward = reward or answer_reward(config)
    from memr1.tuples.io import read_tuples

    t = config.train

    def rows(batch_states):
        # The rollout's own batch (train.rollout_batch_size), not evaluation's agents.batch_size.
        return policy.with_batch_size(t.rollout_batch_size or len(batch_states))

    kw = dict(
        group_size=t.group_size,
        sampling=SamplingConfig.from_config(config, "rollout"),
        style=config.agents.style,
    )
    if config.stage == "answer":
        states = [rollout.answer_state_from_tuple(x) for x in read_tuples(tuples, "answer")]

        def do_rollout(params, batch_states, key):
            distill = config.agents.distill
            return rollout.answer_rollout(
                rows(batch_states), params, batch_states, key=key, distill=distill,
                reward=reward, **kw,
            )  # fmt: skip

        return states, do_rollout
    records = manager_records(
        read_tuples(tuples, "manager"),
        linked_qa=t.linked_qa,
        min_overlap=t.min_overlap,
        only_turns_with_qa=t.only_turns_with_qa,
        source=tuples,
    )
    states = [rollout.manager_state_from_tuple(x) for x in records]
    env = env or reward_env(config, models, reward)

    def do_rollout(params, batch_states, key):
        return rollout.manager_rollout(
            rows(batch_states), params, batch_states, key=key, env=env, **kw
        )

    return states, do_rollout


def manager_records(
    records: list,
    *,
    linked_qa: str,
    min_overlap: float,
    only_turns_with_qa: bool = True,
    source: object = "tuples",
) -> list:
    """The manager stage's states as tuples: each with the questions its reward reads
    (`linked_questions`), only the turns with any (``only_turns_with_qa``), and with
    ``min_overlap`` > 0 only those whose fact collides with its top shown memory.

    Raises:
      ValueError: no turn of ``source`` collides at ``min_overlap``, or it is outside [0, 1].
    """
    records = linked_questions(records, linked_qa)
    if only_turns_with_qa:
        records = [r for r in records if r.has_qa]
    # Every value is checked (collision_states raises outside [0, 1]); 0 keeps every turn.
    kept = collision_states(records, min_overlap)
    if min_overlap > 0:
        logging.info(
            "manager states: %d of %d turns collide (word overlap >= %g)",
            len(kept),
            len(records),
            min_overlap,
        )
        if not kept:
            raise ValueError(
                f"{source}: no manager state has a word overlap >= train.min_overlap="
                f"{min_overlap} with its top shown memory ({len(records)} turns)"
            )
    return kept


LINKED_QA = ("cites", "answerable", "shown")


def linked_questions(records: list, linked_qa: str) -> list:
    """The manager tuples with the questions their reward reads.

    "cites" (the paper's): every question whose evidence cites the turn. "answerable": only
    those whose every evidence turn was said by then (`LinkedQA.answerable_at`), so that no
    state is scored on a question its bank cannot answer yet whatever the manager does.
    "shown": the answerable ones, and on a turn that has any, also the answerable questions
    citing the turn that last wrote a memory shown to the manager (`MemoryRecord.dia_id`), so
    that the reward sees an UPDATE or DELETE that destroys what a shown memory answered (an
    overwrite reads like an ADD to the turn's own questions). A turn without a question of its
    own gets none (the stage's states stay the same turns). No gold operation is read: the
    links are the questions' evidence, as the paper's are.
    """
    if linked_qa not in LINKED_QA:
        raise ValueError(f"train.linked_qa must be one of {LINKED_QA}, got {linked_qa!r}")
    if linked_qa == "cites":
        return records
    by_turn = {(r.sample_id, r.dia_id): r.qa for r in records} if linked_qa == "shown" else {}
    out = []
    for r in records:
        qa = [q for q in r.qa if q.answerable_at(r.dia_id)]
        if linked_qa == "shown" and qa:
            writers = {m.id: m.dia_id for m in r.bank}
            for memory_id, _ in r.retrieved:
                qa += by_turn.get((r.sample_id, writers.get(memory_id, "")), ())
            qa = [q for q in qa if q.answerable_at(r.dia_id)]
            qa = list({q.qa_index: q for q in qa}.values())
        out.append(dataclasses.replace(r, qa=tuple(qa)))
    before, after = sum(len(r.qa) for r in records), sum(len(r.qa) for r in out)
    logging.info("linked questions (%s): %d; the turns cite %d", linked_qa, after, before)
    return out
