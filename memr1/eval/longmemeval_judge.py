"""LongMemEval's judge: a yes/no verdict per question, with rules that depend on its type.

The benchmark's protocol asks a judge model whether a response is correct, with a prompt per
question type: temporal questions forgive counts of days off by one, knowledge-update questions
accept an answer that also mentions the old value if the new one is right, preference questions
are judged against a rubric, and abstention questions (ids ending in "_abs") are correct when the
model says it cannot know. The prompts below follow those rules in our own words. The summary
reports what the benchmark reports: accuracy per type, the mean of those (task-averaged), the
mean over questions (overall) and the accuracy on abstention questions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# The benchmark's question types and abstention marker are the loader's facts; share them.
from memr1.data.longmemeval import ABSTENTION_SUFFIX, QUESTION_TYPES
from memr1.eval.judge_backends import JudgeBackend, complete_in_batches

_FACTUAL_RULE = (
    "Say yes if the response gives the correct answer, stated directly or reached through "
    "reasoning that arrives at it. Say no if it gives a different answer or only part of what "
    "the correct answer requires."
)
_RULES = {
    "single-session-user": _FACTUAL_RULE,
    "single-session-assistant": _FACTUAL_RULE,
    "multi-session": _FACTUAL_RULE,
    "temporal-reasoning": _FACTUAL_RULE
    + " When the question asks for a number of days, weeks, months or years, also say yes if"
    " the response is off by one from the correct count (for example 19 days where the correct"
    " answer is 18).",
    "knowledge-update": "Say yes if the response gives the correct answer. The user's "
    "information changed over time: a response that also mentions an earlier value is still "
    "correct, provided the value it gives as the more recent one matches the correct answer.",
    "single-session-preference": "The rubric describes what a response personalised to this "
    "user should do. Say yes if the response makes correct use of what it knows about the user "
    "in the way the rubric describes; it does not have to cover every point of the rubric. Say "
    "no if it ignores or misremembers the user's information.",
}
_ABSTENTION_RULE = (
    "This question cannot be answered from the conversation history, and the explanation says "
    "why. Say yes if the response recognises that, for example by saying the information was "
    "never given, is incomplete, or that something related was mentioned but not what is asked. "
    "Say no if it answers as if the information were known."
)
_TEMPLATE = """\
You will see a question, {reference_kind}, and a response written by a chat assistant.
{rule}

Question: {question}

{reference_label}: {answer}

Model response: {response}

{final_question} Answer yes or no only."""

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
# A leading yes/no decides, unless the reply merely repeats the choice ("yes or no").
_LEADING = re.compile(r"^(yes|no)\b(?!\s*(?:or|/)\s*(?:yes|no)\b)", re.IGNORECASE)
_WORD = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def is_abstention(question_id: str) -> bool:
    """Whether a LongMemEval question id marks an unanswerable (abstention) question."""
    return str(question_id).endswith(ABSTENTION_SUFFIX)


def _check_type(question_type: str, question_id: str | None = None) -> None:
    if question_type not in _RULES:
        where = f"question {question_id}: " if question_id is not None else ""
        raise ValueError(
            f"{where}unknown LongMemEval question type {question_type!r}; "
            f"expected one of {list(QUESTION_TYPES)}"
        )


def build_longmemeval_prompt(
    question_type: str, question: Any, answer: Any, response: Any, abstention: bool = False
) -> str:
    """The judge prompt for one question; ``answer`` is the gold, rubric or explanation."""
    _check_type(question_type)
    if abstention:
        kind, label, rule = "an explanation", "Explanation", _ABSTENTION_RULE
        final = "Does the response correctly treat the question as unanswerable?"
    elif question_type == "single-session-preference":
        kind, label, rule = "a rubric", "Rubric", _RULES[question_type]
        final = "Is the model response correct?"
    else:
        kind, label, rule = "the correct answer", "Correct answer", _RULES[question_type]
        final = "Is the model response correct?"
    return _TEMPLATE.format(
        reference_kind=kind,
        rule=rule,
        question=str(question),
        reference_label=label,
        answer=str(answer),
        response=str(response),
        final_question=final,
    )


def parse_yes_no(text: str | None) -> bool | None:
    """Reads a yes/no verdict: the leading word if it is one, else the only one of the two used.

    This is stricter than the benchmark's own check (the substring "yes" anywhere), which reads
    "No, it never says yes" or "the eyes differ" as yes. None means the reply is unreadable.
    """
    if not text:
        return None
    text = _THINK_BLOCK.sub(" ", text).strip().lstrip("*_`'\"#>:- \t\r\n")
    leading = _LEADING.match(text)
    if leading:
        return leading.group(1).lower() == "yes"
    words = {w.lower() for w in _WORD.findall(text)}
    return (words.pop() == "yes") if len(words) == 1 else None


@dataclass(frozen=True)
class LongMemEvalItem:
    """One question to judge; ``answer`` is the gold answer, rubric or abstention explanation."""

    question_id: str
    question_type: str
    question: Any
    answer: Any
    hypothesis: Any


@dataclass(frozen=True)
class LongMemEvalVerdict:
    """The judge's reply and verdict for one question (unparseable replies count as wrong)."""

    question_id: str
    correct: bool
    parsed: bool
    raw: str


class LongMemEvalJudge:
    """Judges LongMemEval responses through any ``JudgeBackend``."""

    def __init__(self, backend: JudgeBackend, batch_size: int = 32):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.backend = backend
        self.batch_size = batch_size

    def judge(self, items: Sequence[LongMemEvalItem]) -> list[LongMemEvalVerdict]:
        """One verdict per item, in order."""
        prompts = []
        for item in items:
            _check_type(item.question_type, item.question_id)
            prompts.append(
                build_longmemeval_prompt(
                    item.question_type,
                    item.question,
                    item.answer,
                    item.hypothesis,
                    abstention=is_abstention(item.question_id),
                )
            )
        raw = complete_in_batches(self.backend, prompts, self.batch_size)
        verdicts = []
        for item, reply in zip(items, raw):
            verdict = parse_yes_no(reply)
            verdicts.append(
                LongMemEvalVerdict(item.question_id, bool(verdict), verdict is not None, reply)
            )
        return verdicts


def _mean_or_none(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def summarize_longmemeval(
    items: Sequence[LongMemEvalItem], verdicts: Sequence[bool | LongMemEvalVerdict]
) -> dict[str, Any]:
    """The benchmark's summary numbers, as a JSON-able dict.

    Abstention questions count both in their own type and in the abstention accuracy, as in the
    benchmark's report. Types with no questions appear with accuracy None and are left out of the
    task average (the benchmark's script would print NaN for them).

    Returns:
      {"per_type": {type: {"accuracy", "count"}}, "task_averaged_accuracy",
       "overall_accuracy", "abstention": {"accuracy", "count"}, "count", "unparseable"}.
    """
    if len(items) != len(verdicts):
        raise ValueError(
            f"summarize_longmemeval got {len(items)} items but {len(verdicts)} verdicts"
        )
    per_type: dict[str, list[float]] = {t: [] for t in QUESTION_TYPES}
    abstention: list[float] = []
    everything: list[float] = []
    unparseable = 0
    for item, verdict in zip(items, verdicts):
        _check_type(item.question_type, item.question_id)
        if isinstance(verdict, LongMemEvalVerdict):
            unparseable += not verdict.parsed
            verdict = verdict.correct
        score = float(bool(verdict))
        per_type[item.question_type].append(score)
        everything.append(score)
        if is_abstention(item.question_id):
            abstention.append(score)
    type_means = [np.mean(v) for v in per_type.values() if v]
    return {
        "per_type": {
            t: {"accuracy": _mean_or_none(v), "count": len(v)} for t, v in per_type.items()
        },
        "task_averaged_accuracy": float(np.mean(type_means)) if type_means else None,
        "overall_accuracy": _mean_or_none(everything),
        "abstention": {"accuracy": _mean_or_none(abstention), "count": len(abstention)},
        "count": len(everything),
        "unparseable": unparseable,
    }
