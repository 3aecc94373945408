"""A prompt over agents.max_prompt_tokens drops its lowest-ranked memories, never its
instructions or its question (`TextPolicy.fit`, `answer_prompt`); one whose fixed part alone is
over the budget is a named error; the share of cut prompts is counted where prompts are built
(rollouts: `prompt_truncated_frac`; evaluation: `answers.prompt_cut_frac`)."""

from __future__ import annotations

import types

import jax
import numpy as np
import pytest

from memr1.env.answer import AnswerConfig, answer_over_banks
from memr1.env.answer_io import answer_prompt, render_answer_input
from memr1.env.memory_store import Hit
from memr1.env.outputs import answer_summary
from memr1.env.policy import Completion, PromptTooLongError, SamplingConfig, TextPolicy
from memr1.env.stats import StageStats
from memr1.models.config import get_size
from memr1.models.tokenizer_train import train_bpe_tokenizer

QUESTION = "Where did Ann move after the wedding in June?"
MEMORIES = {
    "Ann": [("1 May 2023", f"Ann memory number {i} about her flat and cats") for i in range(6)],
    "Jo": [("2 May 2023", f"Jo memory number {i} about work at the bakery") for i in range(6)],
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    chat = render_answer_input(QUESTION, MEMORIES, style="compact")
    texts = [m["content"] for m in chat] * 20
    return train_bpe_tokenizer(texts, tmp_path_factory.mktemp("tok"), vocab_size=300)


def _policy(tokenizer, budget: int) -> TextPolicy:
    cfg = get_size("tiny", vocab_size=len(tokenizer))
    return TextPolicy(
        cfg, None, None, tokenizer, eos_ids=[tokenizer.eos_token_id],
        pad_id=tokenizer.pad_token_id, max_prompt_tokens=budget, name="answerer",
    )  # fmt: skip


def _length(policy, messages) -> int:
    return len(policy._ids(messages))


def test_an_over_budget_prompt_drops_its_lowest_ranked_memories(tokenizer):
    prompt = answer_prompt(QUESTION, MEMORIES, style="compact")
    probe = _policy(tokenizer, 10**6)
    full, fixed = _length(probe, prompt.build(prompt.n)), _length(probe, prompt.build(0))
    assert prompt.n == 12 and fixed < full
    budget = (full + fixed) // 2
    policy = _policy(tokenizer, budget)
    ids, cut = policy.fit(prompt)
    assert cut and len(ids) <= budget
    text = tokenizer.decode(ids)
    # The instructions (the prompt's head, up to the memories) and the question are all there.
    assert tokenizer.decode(probe._ids(prompt.build(0))[:8]) in text and QUESTION in text
    # The most memories that fit, best ranked first: both speakers keep their top ones.
    kept = next(k for k in range(prompt.n, -1, -1) if _length(probe, prompt.build(k)) <= budget)
    assert 0 < kept < prompt.n
    np.testing.assert_array_equal(ids, probe._ids(prompt.build(kept)))
    assert "Ann memory number 0" in text and "Jo memory number 0" in text
    assert "Ann memory number 5" not in text and "Jo memory number 5" not in text


def test_a_prompt_within_budget_is_whole(tokenizer):
    prompt = answer_prompt(QUESTION, MEMORIES, style="compact")
    policy = _policy(tokenizer, 10**6)
    ids, cut = policy.fit(prompt)
    assert not cut
    want, _ = policy.encode(policy.render(render_answer_input(QUESTION, MEMORIES, style="compact")))
    np.testing.assert_array_equal(ids, want)


def test_a_fixed_part_over_budget_is_a_named_error(tokenizer):
    prompt = answer_prompt(QUESTION, MEMORIES, style="compact")
    fixed = _length(_policy(tokenizer, 10**6), prompt.build(0))
    policy = _policy(tokenizer, fixed - 1)
    with pytest.raises(PromptTooLongError, match=rf"fixed part\) is {fixed} tokens, over agents"):
        policy.fit(prompt)
    with pytest.raises(PromptTooLongError, match=f"max_prompt_tokens={fixed - 1}"):
        policy.fit(prompt)
    # A prompt with nothing droppable is never cut at its head (the old tail-keeping encode).
    whole = render_answer_input(QUESTION, MEMORIES, style="compact")
    with pytest.raises(PromptTooLongError, match="nothing that may be dropped"):
        _policy(tokenizer, fixed).fit(whole)


class _Bank:
    speakers = ("Ann", "Jo")

    def search(self, query, owner, k):
        name = self.speakers[owner]
        return [[Hit(i, text, owner, 0, 1.0) for i, (_, text) in enumerate(MEMORIES[name][:k])]]


def test_evaluation_counts_its_cut_prompts(tokenizer, monkeypatch):
    """answer_over_banks (evaluation's and the manager reward's answering) fits each prompt
    and counts those that dropped memories: results.json's answers.prompt_cut_frac."""
    prompt = answer_prompt(QUESTION, MEMORIES, style="compact")
    probe = _policy(tokenizer, 10**6)
    budget = _length(probe, prompt.build(prompt.n)) - 1
    policy = _policy(tokenizer, budget)
    seen = []

    def complete_ids(prompts, sampling, *, key, num_samples=1, params=None, progress=None):
        seen.extend(prompts)
        return [[Completion("**Answer:** x", ids, ids[:1], np.zeros(1), True, cut)]
                for ids, cut in prompts]  # fmt: skip

    monkeypatch.setattr(policy, "complete_ids", complete_ids)
    cfg = AnswerConfig(
        k_per_speaker=6, distill=True, style="compact",
        sampling=SamplingConfig(temperature=0.0, max_new_tokens=4),
    )  # fmt: skip
    embed = lambda texts: np.ones((len(texts), 4), np.float32)
    stats = StageStats()
    # One question over all 12 memories (cut), one over 2 per speaker (whole).
    cfg_small = AnswerConfig(**{**cfg.__dict__, "k_per_speaker": 2})
    _, replies = answer_over_banks(
        [QUESTION], [_Bank()], embed=embed, answerer=policy, cfg=cfg, key=jax.random.key(0),
        stats=stats,
    )  # fmt: skip
    _, more = answer_over_banks(
        [QUESTION], [_Bank()], embed=embed, answerer=policy, cfg=cfg_small,
        key=jax.random.key(0), stats=stats,
    )  # fmt: skip
    assert [r.prompt_cut for r in replies + more] == [True, False]
    assert all(len(ids) <= budget for ids, _ in seen)
    run = types.SimpleNamespace(stats=stats, predictions=[None, None])
    assert answer_summary(run)["prompt_cut_frac"] == 0.5
