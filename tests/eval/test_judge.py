"""The LoCoMo LLM judge: prompt contents, verdict parsing and batch scoring."""

from __future__ import annotations

import pytest

from memr1.eval import judge
from memr1.eval.judge_backends import CallableBackend, JudgeBackendError

from .fakes import KeywordJudgeBackend, ScriptedBackend

C, W, U = "CORRECT", "WRONG", None

# (raw judge output, expected label); None means unparseable (scored as wrong).
NASTY_OUTPUTS = [
    ('Both name the same city.\n{"label": "CORRECT"}', C),
    ('```json\n{"label": "WRONG"}\n```', W),
    ("Same topic. {'label': 'CORRECT'}", C),  # Python-style single quotes
    ('{"label": "correct"}', C),  # lowercase value
    ('{"LABEL": "Wrong"}', W),  # key and value in odd case
    ('{"label":"INCORRECT"}', W),  # synonym of WRONG
    ('{"label": "CORRECT",}', C),  # trailing comma, invalid JSON
    ("The dates agree. \u201clabel\u201d: \u201cCORRECT\u201d", C),  # curly quotes, no braces
    ('Same day in another format.\n{"label": "CORRECT"', C),  # unterminated object
    ('{\n  "reasoning": "Both mention hiking {outdoors}.",\n  "label": "WRONG"\n}', W),
    ('At first {"label": "CORRECT"} but on reflection {"label": "WRONG"}', W),  # last wins
    ('The gold is correct; the answer is wrong. {"label": "CORRECT"}', C),  # JSON beats words
    ('{"label": "CORRECT|WRONG"}', U),  # echoed template, not a verdict
    ('{"label": "MAYBE"}', U),
    ("CORRECT", C),
    ("wrong.", W),  # the whole reply is one lowercase label
    ("**Label:** Correct", C),
    ("Verdict: WRONG. The years differ.", W),
    ("The label is WRONG, not CORRECT.", W),  # "not CORRECT" is a negation
    ("CORRECT or WRONG, hard to say.", U),  # conflicting bare labels
    ("<think>Maybe CORRECT? No.</think>\nWRONG", W),  # reasoning block ignored
    ("The response is not correct.", U),  # lowercase words inside prose are not trusted
    ("I cannot judge this.", U),
    ("", U),
    ("   \n  ", U),
    ("INCORRECTLY formatted CORRECTNESS", U),  # labels only as whole words
]


@pytest.mark.parametrize("raw,expected", NASTY_OUTPUTS)
def test_parse_judge_label(raw, expected):
    assert judge.parse_judge_label(raw) == expected


def test_parse_judge_label_accepts_none():
    assert judge.parse_judge_label(None) is None


def test_prompt_carries_the_three_texts_and_the_rules():
    prompt = judge.build_judge_prompt("When did Mel run?", "7 May 2023", "May 7, 2023")
    assert "Question: When did Mel run?" in prompt
    assert "Gold answer: 7 May 2023" in prompt
    assert "Generated answer: May 7, 2023" in prompt
    assert '"label"' in prompt and "CORRECT" in prompt and "WRONG" in prompt


def test_locomo_judge_scores_and_counts_unparseable():
    backend = KeywordJudgeBackend(replies={3: "no idea", 4: "```\n{'label': 'CORRECT'}\n```"})
    result = judge.LocomoJudge(backend, batch_size=2).judge(
        questions=["q1", "q2", "q3", "q4", "q5"],
        golds=["Paris", "7 May 2023", "two dogs", "x", "y"],
        predictions=["paris, France", "May 7 2023", "one dog", "x", "z"],
    )
    assert result.labels == [C, C, W, None, C]
    assert result.scores.tolist() == [1.0, 1.0, 0.0, 0.0, 1.0]
    assert result.num_unparseable == 1
    assert result.raw[3] == "no idea"
    assert result.mean == pytest.approx(0.6)
    assert len(backend.prompts) == 5


def test_locomo_judge_rejects_misaligned_inputs():
    j = judge.LocomoJudge(KeywordJudgeBackend())
    with pytest.raises(ValueError, match="same length"):
        j.judge(["q"], ["g", "h"], ["p"])


def test_backend_returning_wrong_count_is_a_clear_error():
    j = judge.LocomoJudge(ScriptedBackend(['{"label": "CORRECT"}']), batch_size=4)
    with pytest.raises(JudgeBackendError, match="returned 1 completions for 2 prompts"):
        j.judge(["q1", "q2"], ["g1", "g2"], ["p1", "p2"])


def test_callable_backend_plugs_a_plain_function_in():
    seen = []

    def sampler(prompts: list[str]) -> list[str]:
        seen.extend(prompts)
        return ['{"label": "WRONG"}'] * len(prompts)

    result = judge.LocomoJudge(CallableBackend(sampler)).judge(["q"], ["g"], ["p"])
    assert result.labels == [W]
    assert "Gold answer: g" in seen[0]


def test_callable_backend_checks_types():
    with pytest.raises(JudgeBackendError, match="item 0 is int"):
        CallableBackend(lambda prompts: [1 for _ in prompts]).complete(["x"])
