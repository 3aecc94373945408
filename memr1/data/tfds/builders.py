"""TFDS builders for LoCoMo, synthloco, LongMemEval and MSC, readable without TensorFlow.

None of the benchmarks can be downloaded from where this runs, so every builder reads its input
from ``manual_dir`` and goes through the same loaders as the rest of memr1 (same validation, same
records). Built with ``file_format="array_record"``, the data is written and read back by
``array_record`` and ``tfds.data_source`` alone: TensorFlow is never imported (see ``build``).

Splits per builder (TFDS refuses a split without examples, so an empty one is left out):

* ``locomo`` / ``synthloco``: ``full`` (every question, category 5 included) and the Memory-R1
  split ``train`` / ``validation`` / ``test`` (1:1:8 by conversation, category 5 removed).
* ``longmemeval``: one split per file found, named after its variant: ``s``, ``m``, ``oracle``.
* ``msc``: ``full``.
"""

from __future__ import annotations

import abc
import inspect
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import tensorflow_datasets as tfds
from etils import epath
from tensorflow_datasets.core import utils as tfds_utils

from memr1.data.errors import DataError
from memr1.data.locomo import load_locomo
from memr1.data.longmemeval import load_longmemeval
from memr1.data.msc import load_msc
from memr1.data.records import Conversation
from memr1.data.split import split_conversations
from memr1.data.tfds import features

FULL_SPLIT = "full"
_LONGMEMEVAL_FILE = re.compile(r"longmemeval_(s|m|oracle)(?:_[a-z]+)?(?:\.json)?")


class _ConversationBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Shared machinery: subclasses only say how to read ``manual_dir`` into named splits."""

    VERSION = tfds.core.Version("1.1.0")
    RELEASE_NOTES = {
        "1.0.0": "First release.",
        "1.1.0": "conversations: the whole record as JSON (record).",
    }
    BUILDER_CONFIGS = [
        tfds.core.BuilderConfig(name=features.QA_CONFIG, description="one example per question"),
        tfds.core.BuilderConfig(
            name=features.CONVERSATIONS_CONFIG, description="one example per conversation"
        ),
    ]
    DESCRIPTION = ""
    HOMEPAGE = ""

    # TFDS 4.9.10 finds a builder's source file through `importlib_resources`, a package it only
    # declares for Python < 3.9 (tensorflow/datasets#11212), so the lookup fails on a clean install
    # for any builder defined in a package. Naming the file directly is what its fallback does.
    @tfds_utils.classproperty
    @classmethod
    def code_path(cls) -> epath.Path:
        return epath.Path(inspect.getfile(cls))

    @abc.abstractmethod
    def _read_splits(self, manual_dir: Path) -> dict[str, Sequence[Conversation]]:
        """Loads ``manual_dir`` into ``{split name: conversations}``."""

    def _info(self) -> tfds.core.DatasetInfo:
        is_qa = self.builder_config.name == features.QA_CONFIG
        return tfds.core.DatasetInfo(
            builder=self,
            description=self.DESCRIPTION,
            features=features.qa_features() if is_qa else features.conversation_features(),
            homepage=self.HOMEPAGE,
            # Examples keep file order, so index i of a split is always the same record.
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Any]:
        manual_dir = Path(dl_manager.manual_dir)
        is_qa = self.builder_config.name == features.QA_CONFIG
        generators = {}
        for name, conversations in self._read_splits(manual_dir).items():
            size = sum(len(c.qa) for c in conversations) if is_qa else len(conversations)
            if size:
                generators[name] = self._generate_examples(conversations)
        if not generators:
            raise DataError(manual_dir, "<none>", "<splits>", "no split has any example")
        return generators

    def _generate_examples(
        self, conversations: Sequence[Conversation]
    ) -> Iterator[tuple[str, Any]]:
        if self.builder_config.name == features.QA_CONFIG:
            for conversation in conversations:
                for index, qa in enumerate(conversation.qa):
                    key = f"{conversation.sample_id}/{index}"
                    yield key, features.qa_example(conversation, index, qa)
        else:
            for conversation in conversations:
                yield conversation.sample_id, features.conversation_example(conversation)


class _LocomoSchemaBuilder(_ConversationBuilder, skip_registration=True):
    """Reads LoCoMo-schema ``*.json`` files (nested or flat) from ``manual_dir``."""

    SOURCE = ""

    def _read_splits(self, manual_dir: Path) -> dict[str, Sequence[Conversation]]:
        conversations = load_locomo(manual_dir, source=self.SOURCE)
        return {FULL_SPLIT: conversations, **split_conversations(conversations)}


class Locomo(_LocomoSchemaBuilder):
    """LoCoMo (snap-research/locomo, CC BY-NC 4.0), from a user-supplied ``locomo10.json``."""

    SOURCE = "locomo"
    DESCRIPTION = "LoCoMo: ten long two-speaker conversations and 1,986 questions about them."
    HOMEPAGE = "https://github.com/snap-research/locomo"
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Put locomo10.json (or flat per-conversation LoCoMo files), and no other *.json file, in "
        "manual_dir."
    )


class Synthloco(_LocomoSchemaBuilder):
    """Synthetic conversations written in the LoCoMo schema by ``memr1.data.synthloco``."""

    SOURCE = "synthloco"
    DESCRIPTION = "Generated conversations and questions in the LoCoMo schema."
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Put the generated LoCoMo-schema *.json file(s), and no other *.json file, in manual_dir."
    )


class Longmemeval(_ConversationBuilder):
    """LongMemEval (xiaowu0162/LongMemEval, MIT): one conversation and question per instance."""

    DESCRIPTION = "LongMemEval: 500 questions, each over its own chat history."
    HOMEPAGE = "https://github.com/xiaowu0162/LongMemEval"
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Put any of longmemeval_s.json, longmemeval_m.json and longmemeval_oracle.json in "
        "manual_dir; each file found becomes the split s, m or oracle."
    )

    def _read_splits(self, manual_dir: Path) -> dict[str, Sequence[Conversation]]:
        splits: dict[str, Sequence[Conversation]] = {}
        for path in sorted(manual_dir.iterdir()):
            match = _LONGMEMEVAL_FILE.fullmatch(path.name)
            if match is None:
                continue
            if match.group(1) in splits:
                raise DataError(path, "<none>", "<files>", f"a second {match.group(1)} file")
            splits[match.group(1)] = load_longmemeval(path)
        if not splits:
            raise DataError(manual_dir, "<none>", "<files>", "no longmemeval_{s,m,oracle} file")
        return splits


class Msc(_ConversationBuilder):
    """MSC-Self-Instruct (MemGPT, Apache-2.0) or ParlAI Multi-Session Chat rows."""

    DESCRIPTION = "Multi-Session Chat rows; MSC-Self-Instruct rows add one question each."
    MANUAL_DOWNLOAD_INSTRUCTIONS = "Put exactly one MSC *.jsonl or *.json file in manual_dir."

    def _read_splits(self, manual_dir: Path) -> dict[str, Sequence[Conversation]]:
        files = sorted(p for p in manual_dir.iterdir() if p.suffix in (".json", ".jsonl"))
        if len(files) != 1:
            raise DataError(
                manual_dir, "<none>", "<files>", f"expected one MSC file, found {len(files)}"
            )
        return {FULL_SPLIT: load_msc(files[0])}


BUILDERS: dict[str, type[_ConversationBuilder]] = {
    cls.name: cls for cls in (Locomo, Synthloco, Longmemeval, Msc)
}


def prepare(
    builder: tfds.core.DatasetBuilder, manual_dir: str | Path, *, overwrite: bool = False
) -> tfds.core.DatasetBuilder:
    """Builds ``builder``'s dataset from ``manual_dir``; returns the builder.

    Raises:
      FileExistsError: if the dataset is already built under its data_dir and not ``overwrite``
        (a stale build is never reused silently).
    """
    if builder.is_prepared() and not overwrite:
        raise FileExistsError(
            f"{builder.data_dir} is already built; pass --overwrite (overwrite=True) to rebuild it"
        )
    mode = tfds.download.GenerateMode
    download_config = tfds.download.DownloadConfig(
        manual_dir=str(manual_dir),
        download_mode=mode.FORCE_REDOWNLOAD if overwrite else mode.REUSE_DATASET_IF_EXISTS,
    )
    builder.download_and_prepare(download_config=download_config)
    return builder


def build(
    name: str,
    manual_dir: str | Path,
    data_dir: str | Path,
    config: str = features.QA_CONFIG,
    *,
    overwrite: bool = False,
) -> tfds.core.DatasetBuilder:
    """Builds one dataset config as array_record files under ``data_dir`` and returns its builder.

    Args:
      name: ``"locomo"``, ``"synthloco"``, ``"longmemeval"`` or ``"msc"``.
      manual_dir: the folder holding the source file(s).
      data_dir: where TFDS writes ``<name>/<config>/<version>/``.
      config: ``"qa"`` or ``"conversations"``.
      overwrite: rebuild a dataset that is already there (else FileExistsError).

    Returns:
      The prepared builder. Read it back with ``builder.as_data_source()``,
      ``tfds.data_source(f"{name}/{config}", data_dir=data_dir)`` (random access by index,
      examples decoded to numpy / bytes, no TensorFlow) or ``read.read_conversations``.
    """
    if name not in BUILDERS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {sorted(BUILDERS)}")
    configs = [c.name for c in BUILDERS[name].BUILDER_CONFIGS]
    if config not in configs:
        raise ValueError(f"unknown config {config!r} of {name}; expected one of {configs}")
    builder = BUILDERS[name](config=config, data_dir=str(data_dir), file_format="array_record")
    return prepare(builder, manual_dir, overwrite=overwrite)
