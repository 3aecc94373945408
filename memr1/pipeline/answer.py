"""Algorithm 3 (answering): retrieve each speaker's top memories, distil, answer, score."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax

from memr1.agents.answer_io import extract_distilled, extract_final_answer, render_answer_input
from memr1.data.records import QA, Conversation
from memr1.eval.metrics import score_answer
from memr1.pipeline.memory_store import ConversationMemory, EmbedFn
from memr1.pipeline.policy import SamplingConfig, TextPolicy
from memr1.pipeline.stats import StageStats


@dataclasses.dataclass(frozen=True)
class AnswerConfig:
    k_per_speaker: int = 30  # the paper: 30 per speaker, 60 in all
    distill: bool = True  # False: the no-distillation ablation
    style: str = "full"
    sampling: SamplingConfig = SamplingConfig(max_new_tokens=256)


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


def retrieve_for_questions(
    items: Sequence[tuple[Conversation, int, QA]],
    memories: dict[str, ConversationMemory],
    embed: EmbedFn,
    k_per_speaker: int,
) -> list[dict[str, list]]:
    """Per question: speaker name -> that speaker's top-k hits, best first."""
    if not items:
        return []
    q_emb = embed([qa.question for _, _, qa in items])
    out = []
    for row, (conv, _, _) in enumerate(items):
        memory = memories[conv.sample_id]
        out.append(
            {
                name: memory.search(q_emb[row : row + 1], owner, k_per_speaker)[0]
                for owner, name in enumerate(memory.speakers)
            }
        )
    return out


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
    """Answers (conversation, question index, QA) items over the built banks, in batches."""
    stats = stats or StageStats()
    predictions: list[Prediction] = []
    step = answerer.batch_size
    for start in range(0, len(items), step):
        chunk = items[start : start + step]
        with stats.time("retrieval", items=len(chunk)):
            hits = retrieve_for_questions(chunk, memories, embed, cfg.k_per_speaker)
        chats = [
            render_answer_input(
                qa.question,
                {name: [(h.when, h.text) for h in hs] for name, hs in per_speaker.items()},
                distill=cfg.distill,
                style=cfg.style,
            )
            for (_, _, qa), per_speaker in zip(chunk, hits)
        ]
        with stats.time("answer", items=len(chats)):
            outputs = answerer.complete(chats, cfg.sampling, key=jax.random.fold_in(key, start))
        for (conv, qi, qa), per_speaker, (sample,) in zip(chunk, hits, outputs):
            stats.add_tokens("answer", len(sample.ids))
            answer, fallback = extract_final_answer(sample.text)
            if fallback:
                stats.count("answers", "no_marker_fallback")
            gold = gold_answer(qa)
            scores = score_answer(answer, gold)
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
                    output=sample.text,
                    answer=answer,
                    used_fallback=fallback,
                    distilled=extract_distilled(sample.text) if cfg.distill else [],
                    em=scores.em,
                    f1=scores.f1,
                    bleu1=scores.bleu1,
                )
            )
        if progress is not None:
            progress(len(chunk))
    return predictions
