"""From a config to a runnable system: its conversations and gold operations, and the memory
settings refused before anything is loaded.

Shared by the evaluation CLI, the train CLI and the demo, so all run exactly the same code path.
The agents' own settings are built by their `from_config` (`memr1.env.answer.AnswerConfig`,
`memr1.env.ingest.IngestConfig`, `memr1.env.memory_store.BankSpec`, `memr1.env.systems`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memr1.data.errors import WHOLE_FILE, DataError
from memr1.data.locomo import load_locomo
from memr1.data.longmemeval import load_longmemeval
from memr1.data.msc import load_msc
from memr1.data.records import Conversation
from memr1.data.source import parse_source
from memr1.data.split import parse_ratios, split_conversations
from memr1.env.facts import FACT_SOURCES
from memr1.memory.bank import OVERFLOW_POLICIES
from memr1.retrieval import BACKENDS

LOADERS = {
    "locomo": load_locomo,
    "synthloco": lambda path: load_locomo(path, source="synthloco"),
    "longmemeval": load_longmemeval,
    "msc": load_msc,
}


def load_conversations(data: Any) -> list[Conversation]:
    """The conversations of `data.split` (see configs/base.py `data_section`).

    `data.path` is the dataset's file or folder, or a dataset built by `python -m memr1.data.tfds`
    written `tfds:DATA_DIR[:SPLIT]` (`memr1.data.source`): its stored split, by default `full`,
    is read through `tfds.data_source` and then split like the file, so both give the same
    conversations.
    """
    if not data.path:
        raise ValueError("config data.path is not set: give the dataset file (--config.data.path)")
    if data.kind not in LOADERS:
        raise ValueError(f"unknown dataset kind {data.kind!r}; expected one of {sorted(LOADERS)}")
    tfds_source = parse_source(data.path)
    if tfds_source is None:
        conversations = LOADERS[data.kind](data.path)
    else:
        from memr1.data.tfds.read import read_conversations  # TFDS is imported only when used

        conversations = read_conversations(data.kind, tfds_source.data_dir, tfds_source.split)
    dropped = tuple(int(c) for c in str(data.drop_categories).split(",") if c.strip())
    if data.split == "all":
        parts = split_conversations(conversations, (1,), names=("all",), dropped_categories=dropped)
    else:
        parts = split_conversations(
            conversations, parse_ratios(data.ratios), dropped_categories=dropped
        )
        if data.split not in parts:
            raise ValueError(f"config data.split={data.split!r} is not one of {sorted(parts)}")
    chosen = list(parts[data.split])
    if data.max_conversations >= 0:
        chosen = chosen[: data.max_conversations]
    if not chosen:
        raise DataError(str(data.path), WHOLE_FILE, "split", f"split {data.split!r} is empty")
    return chosen


def load_gold_ops(path: str | None) -> dict | None:
    if not path:
        return None
    try:
        gold = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise DataError(
            str(path), WHOLE_FILE, "gold_ops", f"cannot read gold operations: {err}"
        ) from err
    if not isinstance(gold, dict) or "conversations" not in gold:
        raise DataError(str(path), WHOLE_FILE, "conversations", "not a synthloco gold_ops file")
    return gold


def check_memory_config(memory: Any) -> None:
    """Refuses memory settings that cannot work, naming the field, before anything is loaded.

    Without this a zero or negative capacity would surface only when the first bank is built,
    after the backbone and the sentence encoder have been loaded.
    """
    for name, low in [
        ("capacity", 1),
        ("text_bytes", 1),
        ("log_capacity", 0),
        ("k_per_fact", 1),
        ("k_per_speaker", 1),
    ]:
        value = memory[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"config memory.{name}={value!r}: must be an integer >= {low}")
    for name, allowed in [
        ("overflow", OVERFLOW_POLICIES),
        ("retriever", tuple(sorted(BACKENDS))),
        ("fact_source", FACT_SOURCES),
    ]:
        if memory[name] not in allowed:
            raise ValueError(f"config memory.{name}={memory[name]!r}: expected one of {allowed}")
