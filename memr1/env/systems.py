"""The systems compared in the paper, all on one backbone, and how a run of one is put together.

  locomo_rag   raw turns are the memories (no extraction, no manager); answer without distilling
  mem0         prompted extraction + prompted manager (untrained); Mem0's answer style
  memory_sft   manager and/or answer agent fine-tuned by behaviour cloning (checkpoints)
  memory_r1    manager and/or answer agent trained by RL (checkpoints), answers with distillation

A run ingests every conversation into its banks, then answers every question over them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax

from memr1.data.records import QA, Conversation
from memr1.env.answer import AnswerConfig, Prediction, answer_questions
from memr1.env.ingest import IngestConfig, TurnRecord, ingest
from memr1.env.memory_store import BankSpec, ConversationMemory, EmbedFn
from memr1.env.policy import TextPolicy
from memr1.env.stats import StageStats

SYSTEMS = ("locomo_rag", "mem0", "memory_sft", "memory_r1")


@dataclasses.dataclass(frozen=True)
class SystemSpec:
    name: str
    ingest: IngestConfig
    answer: AnswerConfig

    @classmethod
    def from_config(cls, config) -> SystemSpec:
        """System `config.system` with the config's ingest and answer settings."""
        ingest_cfg = IngestConfig.from_config(config)
        return system_spec(config.system, ingest_cfg, AnswerConfig.from_config(config))


def system_spec(name: str, ingest_cfg: IngestConfig, answer_cfg: AnswerConfig) -> SystemSpec:
    """Adjusts the configured ingest/answer settings to what system `name` means."""
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; expected one of {SYSTEMS}")
    if name == "locomo_rag":
        # The raw utterances, one memory each: there is no extractor to read pairs.
        ingest_cfg = dataclasses.replace(
            ingest_cfg, fact_source="turn", extract_from="utterance", use_manager=False
        )
        answer_cfg = dataclasses.replace(answer_cfg, distill=False)
    elif name == "mem0":
        ingest_cfg = dataclasses.replace(ingest_cfg, use_manager=True)
        answer_cfg = dataclasses.replace(answer_cfg, distill=False)
    else:
        ingest_cfg = dataclasses.replace(ingest_cfg, use_manager=True)
    return SystemSpec(name, ingest_cfg, answer_cfg)


@dataclasses.dataclass
class RunOutput:
    system: str
    conversations: list[Conversation]
    memories: dict[str, ConversationMemory]
    turns: list[TurnRecord]
    predictions: list[Prediction]
    stats: StageStats


def questions_of(
    conversations: Sequence[Conversation], max_questions: int = -1
) -> list[tuple[Conversation, int, QA]]:
    """(conversation, index, QA) for every question, in order, optionally capped."""
    items = [(c, i, qa) for c in conversations for i, qa in enumerate(c.qa)]
    return items if max_questions < 0 else items[:max_questions]


def run_system(
    spec: SystemSpec,
    conversations: Sequence[Conversation],
    *,
    embed: EmbedFn,
    dim: int,
    bank: BankSpec,
    manager: TextPolicy | None,
    answerer: TextPolicy,
    extractor: TextPolicy | None = None,
    key: jax.Array,
    max_questions: int = -1,
    progress: Callable[[str, int], Any] | None = None,
) -> RunOutput:
    """Builds the banks of `conversations` and answers their questions with system `spec`."""
    stats = StageStats()
    memories = {
        c.sample_id: ConversationMemory(c.sample_id, (c.speaker_a, c.speaker_b), bank, dim)
        for c in conversations
    }
    ingest_key, answer_key = jax.random.split(key)
    turns = ingest(
        conversations,
        memories,
        embed=embed,
        cfg=spec.ingest,
        key=ingest_key,
        extractor=extractor,
        manager=manager,
        stats=stats,
        progress=None if progress is None else (lambda n: progress("turns", n)),
    )
    predictions = answer_questions(
        questions_of(conversations, max_questions),
        memories,
        embed=embed,
        answerer=answerer,
        cfg=spec.answer,
        key=answer_key,
        stats=stats,
        progress=None if progress is None else (lambda n: progress("questions", n)),
    )
    return RunOutput(spec.name, list(conversations), memories, turns, predictions, stats)
