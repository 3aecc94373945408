"""The reading probe: does the Answer Agent answer from its memories, or from its prior?

The manager stage's reward is the Answer Agent's exact match over the bank the manager writes, so
a manager's operation can only be rewarded if the answerer reads the memory that operation wrote.
This probe answers held-out questions greedily, as evaluation does, and splits them by whether
the gold answer is written in one of the memories shown (``readable``) or not. A reader's EM is
high on readable questions and low on the others; a policy that guesses from the world's prior
(six cities, six jobs) scores about the same on both, and then no bank, and so no manager
operation, changes its reward. Beside EM it reports the answer teacher's EM on the same prompts
and how often the policy gives the teacher's answer: the warm start is trained to give it, so
a low agreement on readable questions is a warm start that did not learn to copy.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from experiments.cpu_demo.sentences import parse_question
from memr1.env.answer_io import extract_final_answer
from memr1.eval.metrics import exact_match

# memory text -> answer, as CarelessAnswerTeacher.__call__: (question, memories) -> (lines, answer)
Teacher = Callable[[str, Mapping[str, Sequence[tuple[str, str]]]], tuple[list[str], str]]


def is_readable(t: Any) -> bool:
    """True when the gold answer of the AnswerTuple ``t`` is written in a memory it shows (a
    case-insensitive substring: "two" in "Ana has two cats.")."""
    gold = t.answer.strip().lower()
    return bool(gold) and any(gold in m.text.lower() for m in t.memories)


def reading_scores(
    tuples: Sequence[Any], answerer: Any, cfg: Any, teacher: Teacher, *, key_seed: int = 0
) -> dict[str, Any]:
    """EM of ``answerer`` (a TextPolicy) on the AnswerTuples ``tuples``, readable or not.

    Args:
      cfg: the answer settings (`memr1.env.answer.AnswerConfig`: prompt style, distillation,
        sampling) evaluation would answer with.
      teacher: the answer teacher the warm start was trained on.

    Returns:
      {"questions", "groups": {"readable"|"unreadable": {"n", "em", "teacher_em",
      "agrees_with_teacher"}}, "readable_by_kind": {kind: {"n", "em"}}}; groups with no
      question are left out.
    """
    chats = [t.answer_input(distill=cfg.distill, style=cfg.style) for t in tuples]
    outputs = answerer.complete(chats, cfg.sampling, key=jax.random.key(key_seed))
    sums: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    kinds: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for t, (sample,) in zip(tuples, outputs):
        answer, _ = extract_final_answer(sample.text)
        taught = teacher(t.question, t.memories_by_speaker())[1]
        group = "readable" if is_readable(t) else "unreadable"
        s = sums[group]
        s["n"] += 1
        s["em"] += exact_match(answer, t.answer)
        s["teacher_em"] += exact_match(taught, t.answer)
        s["agrees_with_teacher"] += exact_match(answer, taught)
        if group == "readable":
            q = parse_question(t.question)
            k = kinds[q.kind if q is not None else "other"]
            k["n"] += 1
            k["em"] += exact_match(answer, t.answer)

    def mean(c: collections.Counter) -> dict[str, float]:
        return {"n": c["n"], **{f: c[f] / c["n"] for f in c if f != "n"}}

    return {
        "questions": len(tuples),
        "groups": {g: mean(sums[g]) for g in ("readable", "unreadable") if sums[g]["n"]},
        "readable_by_kind": {k: mean(kinds[k]) for k in sorted(kinds)},
    }
