"""The answer reward of RL training (`train.reward`): one function scores every answer a run
rewards or validates.

The Answer Agent's own reply (answer stage), each answer the frozen Answer Agent gives over a
bank a sampled manager reply writes (manager stage, `memr1.env.manager_reward`) and both
stages' validation passes score the text after the last **Answer:** with the same
`AnswerReward`, so `train/reward` and `val/reward` are one quantity.

  em             exact match as the Mem0 / A-Mem harness scores it (`memr1.eval.metrics`): the
                 stripped strings equal ignoring case. The paper's reward, and the default.
  em_normalized  exact match after the LoCoMo scorer's normaliser
                 (`memr1.eval.locomo_scorer.normalize_answer`: lowercase, ASCII punctuation and
                 the words a/an/the/and dropped, spaces collapsed), the SQuAD-style EM the public
                 reproductions train with: "The Eiffel Tower." earns 1 against "eiffel tower".
  f1             the harness's token-set F1: partial credit for partial overlap.
  judge          the LoCoMo LLM judge (`memr1.eval.judge`), CORRECT = 1 and WRONG = 0: the
                 judge reward of the paper's Table 2 ablation. Each distinct (question, gold,
                 answer) of a call is judged once (a manager step's G candidate banks often
                 draw the same answer); a verdict the parser cannot read scores 0 and is counted
                 (`judge_unparseable_frac`, logged as train/ and val/), never guessed; a judge
                 server that still fails after its retries stops the run
                 (`JudgeBackendError`).

Every reward is in [0, 1] and is 0 for an empty answer or gold (as the harness's EM and F1).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from memr1.eval.judge import LocomoJudge
from memr1.eval.locomo_scorer import normalize_answer
from memr1.eval.metrics import exact_match, token_f1

REWARDS = ("em", "em_normalized", "f1", "judge")
# The stats a judge reward adds to a rollout's (every key on every call, zeros included, so
# that the mean over processes is the step's: `memr1.train.multihost.merge_stats`).
JUDGE_STATS = ("judge_unparseable_frac", "judge_distinct_frac")


def check_reward(name: object) -> str:
    """Returns `name` if it is one of :data:`REWARDS`; else a ValueError naming train.reward."""
    if name not in REWARDS:
        raise ValueError(f"config train.reward={name!r} is not one of {list(REWARDS)}")
    return str(name)


def em_normalized(prediction: Any, gold: Any) -> float:
    """1.0 iff both answers are equal after `normalize_answer`; 0.0 when either is empty then."""
    pred = normalize_answer("" if prediction is None else str(prediction))
    ref = normalize_answer("" if gold is None else str(gold))
    if not pred or not ref:
        return 0.0
    return float(pred == ref)


_PLAIN = {"em": exact_match, "em_normalized": em_normalized, "f1": token_f1}


@dataclasses.dataclass(frozen=True)
class RewardScores:
    """Rewards of Q answers (f32[Q]) and the reward's own stats (judge: its shares)."""

    scores: np.ndarray
    stats: dict[str, float]


class AnswerReward:
    """`reward(questions, golds, answers) -> RewardScores`, the one answer reward of a run.

    Args:
      name: one of :data:`REWARDS`.
      judge: the LLM judge (required for "judge", refused otherwise).
    """

    def __init__(self, name: str, judge: LocomoJudge | None = None):
        self.name = check_reward(name)
        if (name == "judge") != (judge is not None):
            raise ValueError(
                f"train.reward={name!r}: "
                + ("needs a judge (config judge.kind)" if judge is None else "takes no judge")
            )
        self.judge = judge

    def __repr__(self) -> str:
        return f"AnswerReward({self.name!r})"

    def __call__(
        self, questions: Sequence[Any], golds: Sequence[Any], answers: Sequence[Any]
    ) -> RewardScores:
        """Scores Q aligned (question, gold, answer) triples; the question is read by the judge
        only."""
        if not len(questions) == len(golds) == len(answers):
            raise ValueError(
                f"AnswerReward needs lists of one length; got {len(questions)} questions, "
                f"{len(golds)} golds, {len(answers)} answers"
            )
        if self.judge is None:
            fn = _PLAIN[self.name]
            scores = np.asarray([fn(a, g) for a, g in zip(answers, golds)], np.float32)
            return RewardScores(scores, {})
        return self._judged(questions, golds, answers)

    def _judged(self, questions, golds, answers) -> RewardScores:
        triples = [(str(q), str(g), str(a)) for q, g, a in zip(questions, golds, answers)]
        distinct = list(dict.fromkeys(triples))
        if not distinct:
            return RewardScores(np.zeros(0, np.float32), dict.fromkeys(JUDGE_STATS, 0.0))
        result = self.judge.judge(*zip(*distinct))
        row = {t: i for i, t in enumerate(distinct)}
        index = np.asarray([row[t] for t in triples], np.int64)
        unreadable = np.asarray([label is None for label in result.labels], bool)[index]
        stats = {
            "judge_unparseable_frac": float(unreadable.mean()),
            "judge_distinct_frac": len(distinct) / len(triples),
        }
        return RewardScores(result.scores[index].astype(np.float32), stats)


EXACT_MATCH = AnswerReward("em")
