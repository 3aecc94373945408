"""LongMemEval's yes/no judge: per-type prompts, reply parsing and the summary numbers."""

from __future__ import annotations

import pytest

from memr1.eval import longmemeval_judge as lme

from .fakes import ScriptedBackend


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("Yes", True),
        ("no.", False),
        ("**Yes**", True),
        ("YES", True),
        ("Yes, the response names the right city.", True),
        ("No, it never says yes.", False),  # the leading word decides
        ("Answer: no", False),
        ("The answer is yes.", True),
        ('{"answer": "no"}', False),
        ("<think>yes? maybe no</think> Yes", True),
        ("yes or no", None),  # both words, no leading verdict
        ("Maybe.", None),
        ("Nope", None),  # not the word "no"
        ("", None),
        (None, None),
    ],
)
def test_parse_yes_no(raw, expected):
    assert lme.parse_yes_no(raw) is expected


def test_each_type_gets_its_own_rules():
    args = dict(question="Q?", answer="A", response="R")
    temporal = lme.build_longmemeval_prompt("temporal-reasoning", **args)
    update = lme.build_longmemeval_prompt("knowledge-update", **args)
    preference = lme.build_longmemeval_prompt("single-session-preference", **args)
    plain = lme.build_longmemeval_prompt("multi-session", **args)
    abstain = lme.build_longmemeval_prompt("multi-session", abstention=True, **args)
    assert "off by one" in temporal and "off by one" not in plain
    assert "more recent" in update and "more recent" not in plain
    assert "Rubric: A" in preference and "Correct answer: A" in plain
    assert "cannot be answered" in abstain and "Correct answer" not in abstain
    for prompt in (temporal, update, preference, plain, abstain):
        assert "Question: Q?" in prompt and "Model response: R" in prompt
        assert prompt.rstrip().endswith("Answer yes or no only.")
    with pytest.raises(ValueError, match="question type 'trivia'"):
        lme.build_longmemeval_prompt("trivia", **args)


def make_items() -> list[lme.LongMemEvalItem]:
    rows = [
        ("t1", "temporal-reasoning"),
        ("t2", "temporal-reasoning"),
        ("t3_abs", "temporal-reasoning"),
        ("k1", "knowledge-update"),
        ("u1", "single-session-user"),
        ("u2_abs", "single-session-user"),
    ]
    return [
        lme.LongMemEvalItem(qid, qtype, f"question {qid}", 3, f"hyp {qid}") for qid, qtype in rows
    ]


def test_judge_uses_the_abstention_prompt_for_abs_ids_and_scores_yes():
    backend = ScriptedBackend(["Yes", "no", "yes", "hmm", "YES.", "No"])
    verdicts = lme.LongMemEvalJudge(backend, batch_size=4).judge(make_items())
    assert [v.correct for v in verdicts] == [True, False, True, False, True, False]
    assert [v.parsed for v in verdicts] == [True, True, True, False, True, True]
    assert "cannot be answered" in backend.prompts[2] and "cannot be answered" in backend.prompts[5]
    assert "cannot be answered" not in backend.prompts[0]
    assert "Correct answer: 3" in backend.prompts[0]  # integer answers are stringified


def test_summary_numbers_by_hand():
    items = make_items()
    correct = [True, False, True, False, True, False]
    summary = lme.summarize_longmemeval(items, correct)
    # temporal 2/3, knowledge-update 0/1, single-session-user 1/2.
    assert summary["per_type"]["temporal-reasoning"] == {
        "accuracy": pytest.approx(2 / 3),
        "count": 3,
    }
    assert summary["per_type"]["knowledge-update"] == {"accuracy": 0.0, "count": 1}
    assert summary["per_type"]["single-session-user"] == {"accuracy": 0.5, "count": 2}
    # Types without questions are listed with no accuracy and left out of the task average.
    assert summary["per_type"]["multi-session"] == {"accuracy": None, "count": 0}
    assert summary["task_averaged_accuracy"] == pytest.approx((2 / 3 + 0 + 0.5) / 3)
    assert summary["overall_accuracy"] == pytest.approx(3 / 6)
    # Abstention: t3_abs right, u2_abs wrong.
    assert summary["abstention"] == {"accuracy": 0.5, "count": 2}
    assert summary["count"] == 6


def test_summary_rejects_bad_input():
    items = make_items()
    with pytest.raises(ValueError, match="6 items but 5 verdicts"):
        lme.summarize_longmemeval(items, [True] * 5)
    bad = [lme.LongMemEvalItem("x9", "trivia", "q", "a", "h")]
    with pytest.raises(ValueError, match="x9.*'trivia'"):
        lme.summarize_longmemeval(bad, [True])
