"""Generates a synthloco dataset and writes it in LoCoMo's nested JSON schema.

Usage::

  python -m memr1.data.synthloco.generate --out DIR --preset demo --seed 0

writes ``DIR/<split>.json`` for each split of the preset (train, validation, test), each a JSON
list of LoCoMo records with sample_ids such as ``synth-train-000``; ``DIR/gold_ops.json``, the gold
memory operations and final banks keyed by sample_id (format in gold.py; never part of a
conversation file); and ``DIR/metadata.json``, the config and summary counts. The same preset and
seed always give byte-identical files. Every file is written to a temporary name and renamed into
place, and nothing at all is written when the arguments are bad.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memr1.atomic import write_json_atomic
from memr1.data.synthloco import dates, gold, qa, render
from memr1.data.synthloco.events import plan_story
from memr1.data.synthloco.world import PRESETS, SynthConfig, Vocab, get_preset

GOLD_FORMAT = "synthloco-gold-ops/1"
# A conversation whose story yields fewer than ``min_qa`` questions is redrawn from the next
# attempt's stream; this many failures in a row means the config cannot reach min_qa.
MAX_ATTEMPTS = 50


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A generated dataset, in memory.

    Attributes:
      config: the config it was generated from.
      splits: split name -> list of LoCoMo records.
      gold: sample_id -> ``{"split", "speakers", "ops", "final_bank"}``.
    """

    config: SynthConfig
    splits: dict[str, list[dict[str, Any]]]
    gold: dict[str, dict[str, Any]]


def generate_conversation(
    config: SynthConfig, vocab: Vocab, split: str, index: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Generates one conversation and its gold operations.

    Each conversation draws from its own random stream, seeded by (seed, split, index, attempt),
    so it does not depend on how many other conversations are generated.

    Returns:
      ``(record, gold entry)``: the LoCoMo record and its entry of gold_ops.json.
    """
    sample_id = f"synth-{split}-{index:03d}"
    years = range(config.first_year, config.last_year + 1)
    for attempt in range(MAX_ATTEMPTS):
        rng = random.Random(f"synthloco:{config.seed}:{split}:{index}:{attempt}")
        speakers = tuple(rng.sample(vocab.names, 2))
        times = dates.session_times(rng, rng.randint(*config.sessions), config.gap_days, years)
        days = [moment.date() for moment in times]
        story = plan_story(rng, speakers, days, config, vocab)
        sessions = [
            render.render_session(
                rng, number, facts, speakers, rng.randint(*config.turns_per_session), vocab
            )
            for number, facts in enumerate(story, start=1)
        ]
        questions = qa.make_qa(rng, story, speakers, days, config, vocab)
        if sum(1 for q in questions if q["category"] != qa.ADVERSARIAL) >= config.min_qa:
            break
    else:
        raise RuntimeError(
            f"{sample_id}: no draw reached min_qa={config.min_qa} questions in {MAX_ATTEMPTS} "
            "attempts; lower min_qa or allow more sessions or facts per session"
        )

    conversation: dict[str, Any] = {"speaker_a": speakers[0], "speaker_b": speakers[1]}
    event_summary, observation, session_summary = {}, {}, {}
    for number, (moment, turns, facts) in enumerate(zip(times, sessions, story), start=1):
        date_time = dates.format_date_time(moment)
        conversation[f"session_{number}_date_time"] = date_time
        conversation[f"session_{number}"] = turns
        event_summary[f"events_session_{number}"] = render.event_summary(
            facts, speakers, moment.date(), vocab
        )
        observation[f"session_{number}_observation"] = render.observations(facts, speakers, vocab)
        session_summary[f"session_{number}_summary"] = render.session_summary(
            facts, speakers, date_time, vocab
        )
    record = {
        "qa": questions,
        "conversation": conversation,
        "event_summary": event_summary,
        "observation": observation,
        "session_summary": session_summary,
        "sample_id": sample_id,
    }
    sentences = {fact.dia_id: render.observation(fact, vocab) for facts in story for fact in facts}
    ops = gold.gold_ops(sessions, story, speakers, vocab, sentences)
    entry = {
        "split": split,
        "speakers": list(speakers),
        "ops": ops,
        "final_bank": gold.replay(ops, speakers),
    }
    return record, entry


def generate_dataset(config: SynthConfig) -> Dataset:
    """Generates every split of ``config`` (validated first)."""
    config.validate()
    vocab = Vocab.from_config(config)
    splits: dict[str, list[dict[str, Any]]] = {}
    gold_entries: dict[str, dict[str, Any]] = {}
    for split, count in config.splits:
        splits[split] = []
        for index in range(count):
            record, entry = generate_conversation(config, vocab, split, index)
            splits[split].append(record)
            gold_entries[record["sample_id"]] = entry
    return Dataset(config=config, splits=splits, gold=gold_entries)


def _text_of(dataset: Dataset) -> list[str]:
    """Every piece of text a model would read or write, for vocabulary counts."""
    texts = []
    for records in dataset.splits.values():
        for record in records:
            for key, value in record["conversation"].items():
                if isinstance(value, list):
                    texts += [turn["text"] for turn in value]
                elif key.endswith("_date_time"):
                    texts.append(value)
            texts += [str(q.get("answer", q.get("adversarial_answer"))) for q in record["qa"]]
            texts += [q["question"] for q in record["qa"]]
            texts += list(record["session_summary"].values())
    for entry in dataset.gold.values():
        texts += [op["text"] for op in entry["ops"] if op["text"]]
    return texts


def summarize(dataset: Dataset) -> dict[str, Any]:
    """Counts conversations, sessions, turns, questions per category, ops per type and words.

    ``fact_ops`` counts the ops of fact turns only; every other turn is a small-talk NOOP.
    """
    counts: dict[str, Any] = {}
    for split, records in dataset.splits.items():
        ops = [op for r in records for op in dataset.gold[r["sample_id"]]["ops"]]
        categories = Counter(str(q["category"]) for r in records for q in r["qa"])
        counts[split] = {
            "conversations": len(records),
            "sessions": sum(len(r["observation"]) for r in records),
            "turns": len(ops),
            "qa_per_category": dict(sorted(categories.items())),
            "fact_ops": dict(sorted(Counter(op["op"] for op in ops if op["fact"]).items())),
        }
    text = " ".join(_text_of(dataset)).lower()
    counts["distinct_words"] = len(set(re.findall(r"[a-z]+|\d+", text)))
    counts["distinct_word_and_punct_tokens"] = len(set(re.findall(r"\w+|[^\w\s]", text)))
    return counts


def write_dataset(
    dataset: Dataset, out_dir: str | os.PathLike, preset: str | None = None
) -> dict[str, Any]:
    """Writes the split files, gold_ops.json and metadata.json into ``out_dir`` (created if new).

    Returns:
      The metadata written, whose ``counts`` are those of :func:`summarize`.
    """
    out = Path(out_dir)
    metadata = {
        "generator": "memr1.data.synthloco",
        "preset": preset,
        "config": dataclasses.asdict(dataset.config),
        "files": [f"{split}.json" for split in dataset.splits] + ["gold_ops.json"],
        "counts": summarize(dataset),
    }
    gold_file = {"format": GOLD_FORMAT, "conversations": dataset.gold}
    for split, records in dataset.splits.items():
        write_json_atomic(out / f"{split}.json", records)
    write_json_atomic(out / "gold_ops.json", gold_file)
    write_json_atomic(out / "metadata.json", metadata)
    return metadata


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m memr1.data.synthloco.generate",
        description="Write a synthetic LoCoMo-format benchmark with gold memory operations.",
    )
    parser.add_argument("--out", required=True, help="output folder (created if missing)")
    parser.add_argument("--preset", default="demo", choices=sorted(PRESETS), help="size preset")
    parser.add_argument("--seed", type=int, default=0, help="master random seed")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        parser.error(f"--out {str(out)!r} exists and is not a folder")
    if args.seed < 0:
        parser.error(f"--seed must be a non-negative integer, got {args.seed}")
    # Everything is generated in memory before the first file is touched, so a failure here
    # leaves the output folder as it was.
    dataset = generate_dataset(get_preset(args.preset, args.seed))
    try:
        metadata = write_dataset(dataset, out, preset=args.preset)
    except OSError as err:
        print(f"error: could not write to {str(out)!r}: {err}", file=sys.stderr)
        return 1
    counts = metadata["counts"]
    for split in dataset.splits:
        print(f"{out / (split + '.json')}: {json.dumps(counts[split])}")
    print(f"distinct words: {counts['distinct_words']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
