"""Algorithm 3 (answering): retrieve each speaker's top memories, distil, answer, score."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

import jax
import numpy as np

from memr1.data.records import QA, Conversation
from memr1.env.answer_io import answer_prompt, extract_distilled, extract_final_answer
from memr1.env.memory_store import ConversationMemory, EmbedFn, Hit
from memr1.env.policy import SamplingConfig, TextPolicy
from memr1.env.stats import StageStats
from memr1.eval.metrics import score_answer


@dataclasses.dataclass(frozen=True)
class AnswerConfig:
    """The Answer Agent's settings, from the config (`from_config`)."""

    k_per_speaker: int  # memory.k_per_speaker (the paper: 30 per speaker, 60 in all)
    distill: bool  # agents.distill; False: the no-distillation ablation
    style: str  # agents.style
    sampling: SamplingConfig  # agents.temperature, agents.answer_max_new_tokens

    @classmethod
    def from_config(cls, config) -> AnswerConfig:
        return cls(
            k_per_speaker=config.memory.k_per_speaker,
            distill=config.agents.distill,
            style=config.agents.style,
            sampling=SamplingConfig.from_config(config, "answer"),
        )


@dataclasses.dataclass
class Prediction:
    sample_id: str
    question_index: int
    question: str
    gold: str
    category: int
    retrieved: dict[str, list[dict]]
    output: str
    answer: str
    used_fallback: bool
    distilled: list[str]
    em: float
    f1: float
    bleu1: float


def gold_answer(qa: QA) -> str:
    """The reference answer scored against (category 5's distractor when there is no answer)."""
    return qa.answer if qa.answer is not None else (qa.adversarial_answer or "")


class Bank(Protocol):
    """What answering reads from a bank: `memory_store.BankView` and `ConversationMemory`."""

    speakers: tuple[str, ...]

    def search(self, query_QE: np.ndarray, owner: int, k: int) -> list[list[Hit]]: ...


@dataclasses.dataclass(frozen=True)
class Reply:
    """The Answer Agent's reply to one question, read as evaluation and the rewards read it."""

    output: str
    answer: str  # the text after the last **Answer:** (the whole reply when there is none)
    used_fallback: bool  # no **Answer:** marker in the reply
    cut: bool  # the token budget ran out before the reply wrote **Answer:**
    n_tokens: int
    prompt_cut: bool = False  # its lowest-ranked memories went to fit agents.max_prompt_tokens


def retrieve(
    questions: Sequence[str], banks: Sequence[Bank], embed: EmbedFn, k_per_speaker: int
) -> list[dict[str, list[Hit]]]:
    """Per question: speaker name -> that speaker's top-k hits in the question's bank, best first.

    Each distinct question text is embedded once, however many banks it is asked over.
    """
    if not questions:
        return []
    unique = list(dict.fromkeys(questions))
    emb = embed(unique)
    row_of = {q: i for i, q in enumerate(unique)}
    out = []
    for question, bank in zip(questions, banks, strict=True):
        q = emb[row_of[question] : row_of[question] + 1]
        out.append(
            {
                name: bank.search(q, owner, k_per_speaker)[0]
                for owner, name in enumerate(bank.speakers)
            }
        )
    return out


def retrieve_for_questions(
    items: Sequence[tuple[Conversation, int, QA]],
    memories: dict[str, ConversationMemory],
    embed: EmbedFn,
    k_per_speaker: int,
) -> list[dict[str, list]]:
    """`retrieve` for (conversation, question index, QA) items over their conversations' banks."""
    banks = [memories[conv.sample_id] for conv, _, _ in items]
    return retrieve([qa.question for _, _, qa in items], banks, embed, k_per_speaker)


def answer_over_banks(
    questions: Sequence[str],
    banks: Sequence[Bank],
    *,
    embed: EmbedFn,
    answerer: TextPolicy,
    cfg: AnswerConfig,
    key: jax.Array,
    stats: StageStats | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[dict[str, list[Hit]]], list[Reply]]:
    """Algorithm 3: question i is answered over banks[i] (retrieve, prompt, answer, parse).

    Evaluation and the manager stage's reward both answer through this function, so the frozen
    Answer Agent of training reads banks exactly as the evaluated one does: the same retriever
    (each bank's own), prompts, sampling and token budget. Questions are retrieved in batches of
    `answerer.batch_size`, and answered in one engine run (`answerer.batch_size` prompts
    decoded at once, slots refilled as replies end), in which reply i samples with
    `fold_in(key, i)`.

    Under greedy decoding (temperature 0) a reply is a function of its prompt, so a prompt that
    recurs (the same question over banks whose retrieved memories coincide: over the G
    candidate banks of a manager-stage state a linked question of the CPU demo reads 2-4
    distinct prompts of 8) is answered once and its reply given to every question that has it;
    the run then decodes the distinct prompts, in order of first appearance. `stats`
    counts them ("answers", "distinct_prompts"). A sampled reply stays one draw per question.

    Returns:
      (the retrieved hits per question, the reply per question).
    """
    stats = stats or StageStats()
    step = answerer.batch_size
    hits_out: list[dict[str, list[Hit]]] = []
    for start in range(0, len(questions), step):
        chunk_q, chunk_b = questions[start : start + step], banks[start : start + step]
        with stats.time("retrieval", items=len(chunk_q)):
            hits_out.extend(retrieve(chunk_q, chunk_b, embed, cfg.k_per_speaker))
    shown = [
        (question, tuple((name, tuple((h.when, h.text) for h in hs)) for name, hs in per.items()))
        for question, per in zip(questions, hits_out)
    ]
    if cfg.sampling.temperature == 0:
        first = list(dict.fromkeys(shown))
        slot = {prompt: i for i, prompt in enumerate(first)}
        of_question = [slot[prompt] for prompt in shown]
    else:
        first, of_question = shown, list(range(len(shown)))
    stats.count("answers", "distinct_prompts", len(first))
    users = np.bincount(np.asarray(of_question, np.int64), minlength=len(first))
    chats = [
        answer_prompt(question, {name: list(memories) for name, memories in per},
                      distill=cfg.distill, style=cfg.style)
        for question, per in first
    ]  # fmt: skip
    # One engine run answers every distinct prompt (answerer.batch_size of them at a time),
    # reporting each question as its prompt's reply ends.
    kw = {} if progress is None else {"progress": lambda done: progress(int(users[done].sum()))}
    with stats.time("answer", items=len(chats)):
        outputs = answerer.complete(chats, cfg.sampling, key=key, **kw)
    samples = [sample for (sample,) in outputs]
    stats.add_tokens("answer", sum(len(sample.ids) for sample in samples))
    replies = []
    for i in of_question:
        sample = samples[i]
        answer, fallback = extract_final_answer(sample.text)
        cut = fallback and not sample.finished
        if fallback:
            stats.count("answers", "no_marker_fallback")
        if cut:
            stats.count("answers", "cut_before_answer")
        if sample.prompt_truncated:
            stats.count("answers", "prompt_cut")
        replies.append(
            Reply(sample.text, answer, fallback, cut, len(sample.ids), sample.prompt_truncated)
        )
    return hits_out, replies


def answer_questions(
    items: Sequence[tuple[Conversation, int, QA]],
    memories: dict[str, ConversationMemory],
    *,
    embed: EmbedFn,
    answerer: TextPolicy,
    cfg: AnswerConfig,
    key: jax.Array,
    stats: StageStats | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[Prediction]:
    """Answers (conversation, question index, QA) items over the built banks and scores them."""
    hits, replies = answer_over_banks(
        [qa.question for _, _, qa in items],
        [memories[conv.sample_id] for conv, _, _ in items],
        embed=embed,
        answerer=answerer,
        cfg=cfg,
        key=key,
        stats=stats,
        progress=progress,
    )
    predictions = []
    for (conv, qi, qa), per_speaker, reply in zip(items, hits, replies):
        gold = gold_answer(qa)
        scores = score_answer(reply.answer, gold)
        predictions.append(
            Prediction(
                sample_id=conv.sample_id,
                question_index=qi,
                question=qa.question,
                gold=gold,
                category=qa.category,
                retrieved={
                    name: [{"id": h.memory_id, "when": h.when, "text": h.text} for h in hs]
                    for name, hs in per_speaker.items()
                },
                output=reply.output,
                answer=reply.answer,
                used_fallback=reply.used_fallback,
                distilled=extract_distilled(reply.output) if cfg.distill else [],
                em=scores.em,
                f1=scores.f1,
                bleu1=scores.bleu1,
            )
        )
    return predictions
