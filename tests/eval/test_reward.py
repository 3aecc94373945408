"""The training reward (`train.reward`) on hand-computed cases, and the judge reward against a
judge server on the loopback (a verdict it cannot read, a body that is not a completion, a
server that answers too late)."""

from __future__ import annotations

import numpy as np
import pytest

from memr1.eval.judge import LocomoJudge
from memr1.eval.judge_backends import JudgeBackendError, OpenAICompatibleBackend
from memr1.eval.reward import REWARDS, AnswerReward, check_reward, em_normalized

from .conftest import chat_reply
from .fakes import ScriptedBackend


def scores(name, answers, golds):
    got = AnswerReward(name)(["q"] * len(answers), golds, answers)
    assert got.stats == {} and got.scores.dtype == np.float32
    return got.scores.tolist()


def test_em_is_the_harness_exact_match():
    # Case and outer spaces only; punctuation and articles count.
    assert scores("em", [" paris ", "Paris.", "the Louvre", ""], ["Paris"] * 3 + [""]) == [
        1.0,
        0.0,
        0.0,
        0.0,
    ]


def test_em_normalized_drops_punctuation_articles_and_case():
    assert em_normalized("The Eiffel Tower.", "eiffel tower") == 1.0
    assert em_normalized("Paris!", "paris") == 1.0
    assert em_normalized("an apple and a pear", "apple pear") == 1.0
    assert em_normalized("7 May 2023", "May 7, 2023") == 0.0  # word order still counts
    # Nothing left after normalising (or nothing at all) is no answer: 0, not a match.
    assert em_normalized("The", "a") == 0.0
    assert em_normalized(None, "x") == 0.0 and em_normalized("x", "") == 0.0
    assert em_normalized(2022, "2022") == 1.0  # LoCoMo has integer golds


def test_f1_gives_partial_credit_for_partial_overlap():
    got = scores("f1", ["New York City", "red and blue", "Rome", "Paris"], [
        "New York",  # P 2/3, R 1: F1 0.8
        "blue, green and red",  # token sets {red, and, blue} vs {blue, green, and, red}: 6/7
        "Paris",
        "",
    ])  # fmt: skip
    assert got == pytest.approx([0.8, 6 / 7, 0.0, 0.0])


def test_an_unknown_reward_is_refused_by_name():
    with pytest.raises(ValueError, match=r"train\.reward='bleu' is not one of"):
        check_reward("bleu")
    with pytest.raises(ValueError, match=r"train\.reward='bleu'"):
        AnswerReward("bleu")
    assert check_reward("f1") == "f1" and set(REWARDS) == {"em", "em_normalized", "f1", "judge"}


def test_the_judge_reward_needs_a_judge_and_the_others_take_none():
    with pytest.raises(ValueError, match="needs a judge"):
        AnswerReward("judge")
    with pytest.raises(ValueError, match="takes no judge"):
        AnswerReward("em", judge=LocomoJudge(ScriptedBackend([])))


def test_judge_verdicts_are_the_reward_and_each_distinct_triple_is_judged_once():
    backend = ScriptedBackend([
        'Same dogs.\n{"label": "CORRECT"}',
        "Different city.\n{'label': 'WRONG'}",
        "I cannot decide.",  # no verdict: scored 0 and counted, never guessed
    ])  # fmt: skip
    reward = AnswerReward("judge", judge=LocomoJudge(backend))
    questions = ["Dogs?", "Dogs?", "City?", "Dogs?", "Food?"]
    golds = ["Toby and Buddy", "Toby and Buddy", "Rome", "Toby and Buddy", "pasta"]
    answers = ["Toby, Buddy", "Toby, Buddy", "Paris", "Toby, Buddy", "pizza"]
    got = reward(questions, golds, answers)
    assert got.scores.tolist() == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert len(backend.prompts) == 3  # three distinct triples of five
    assert "Generated answer: Toby, Buddy" in backend.prompts[0]
    assert got.stats == {"judge_unparseable_frac": 1 / 5, "judge_distinct_frac": 3 / 5}


def test_no_answers_judge_nothing():
    backend = ScriptedBackend([])
    got = AnswerReward("judge", judge=LocomoJudge(backend))([], [], [])
    assert got.scores.shape == (0,) and backend.prompts == []
    assert got.stats == {"judge_unparseable_frac": 0.0, "judge_distinct_frac": 0.0}


def judge_on(server, **kwargs) -> AnswerReward:
    settings = dict(api_key_env=None, timeout_s=2.0, max_retries=1, sleep=lambda s: None)
    backend = OpenAICompatibleBackend(server.base_url, "judge", **settings | kwargs)
    return AnswerReward("judge", judge=LocomoJudge(backend))


def test_a_loopback_judge_server_rewards_its_verdicts(chat_server):
    def verdict(request):
        prompt = request["messages"][-1]["content"]
        label = "CORRECT" if "Generated answer: Rome" in prompt else "WRONG"
        return chat_reply(f'Compared.\n{{"label": "{label}"}}')

    chat_server.script = [(200, verdict, 0.0)]
    got = judge_on(chat_server)(["City?", "City?"], ["Rome", "Rome"], ["Rome", "Milan"])
    assert got.scores.tolist() == [1.0, 0.0]
    assert got.stats["judge_unparseable_frac"] == 0.0 and len(chat_server.requests) == 2


def test_a_garbage_verdict_from_the_server_is_counted_as_unparseable(chat_server):
    chat_server.script = [(200, chat_reply("~~ \u2603 lorem {ipsum"), 0.0)]
    got = judge_on(chat_server)(["City?"], ["Rome"], ["Rome"])
    assert got.scores.tolist() == [0.0]
    assert got.stats["judge_unparseable_frac"] == 1.0


def test_a_body_that_is_not_a_completion_is_retried_then_named(chat_server):
    chat_server.script = [(200, "<html>bad gateway</html>", 0.0), (200, chat_reply("WRONG"), 0.0)]
    got = judge_on(chat_server)(["City?"], ["Rome"], ["Milan"])
    assert got.scores.tolist() == [0.0] and len(chat_server.requests) == 2
    chat_server.script = [(200, "<html>bad gateway</html>", 0.0)]
    with pytest.raises(JudgeBackendError, match=r"2 attempts.*not JSON"):
        judge_on(chat_server)(["City?"], ["Rome"], ["Milan"])


def test_a_judge_server_that_times_out_stops_the_reward_with_a_named_error(chat_server):
    chat_server.script = [(200, chat_reply('{"label": "CORRECT"}'), 1.0)]
    with pytest.raises(JudgeBackendError, match=r"2 attempts.*timed out after 0.2 s"):
        judge_on(chat_server, timeout_s=0.2)(["City?"], ["Rome"], ["Rome"])
    assert len(chat_server.requests) == 2  # the first try and one retry, no more
