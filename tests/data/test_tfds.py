"""TFDS builders: built as array_record from fixtures in manual_dir, read back with data_source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds

from memr1.data import tfds as memr1_tfds
from memr1.data.errors import DataError
from memr1.data.locomo import load_locomo
from memr1.data.longmemeval import load_longmemeval
from memr1.data.msc import load_msc
from memr1.data.split import split_conversations
from memr1.data.tfds.features import conversation_example, qa_example
from tests import data_fixtures as fixtures


def _decode(value):
    """Turns what data_source returns (bytes, numpy scalars, lists, dicts) into plain Python."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return [_decode(v) for v in value.tolist()]
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


@pytest.fixture(scope="module")
def manual_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("manual")
    fixtures.write_locomo_fixture(root / "locomo" / "locomo10.json", seed=21, num_conversations=4)
    fixtures.write_locomo_fixture(root / "synthloco" / "generated.json", seed=22)
    fixtures.write_longmemeval_fixture(root / "longmemeval" / "longmemeval_oracle.json", seed=23)
    fixtures.write_longmemeval_fixture(
        root / "longmemeval" / "longmemeval_s.json", seed=24, num_instances=2, variant="s"
    )
    fixtures.write_msc_fixture(root / "msc" / "msc_self_instruct.jsonl", seed=25)
    return {name: root / name for name in ("locomo", "synthloco", "longmemeval", "msc")}


def _expected_splits(name: str, folder: Path):
    if name in ("locomo", "synthloco"):
        conversations = load_locomo(folder, source=name)
        return {"full": conversations, **split_conversations(conversations)}
    if name == "longmemeval":
        return {
            "oracle": load_longmemeval(folder / "longmemeval_oracle.json"),
            "s": load_longmemeval(folder / "longmemeval_s.json"),
        }
    return {"full": load_msc(folder / "msc_self_instruct.jsonl")}


@pytest.mark.parametrize("name", ["locomo", "synthloco", "longmemeval", "msc"])
def test_qa_config_round_trip(name, manual_dirs, tmp_path):
    memr1_tfds.build(name, manual_dirs[name], tmp_path, config="qa")
    source = tfds.data_source(f"{name}/qa", data_dir=str(tmp_path))
    expected = _expected_splits(name, manual_dirs[name])
    assert sorted(source) == sorted(expected)
    for split, conversations in expected.items():
        want = [qa_example(c, i, qa) for c in conversations for i, qa in enumerate(c.qa)]
        got = [_decode(source[split][i]) for i in range(len(source[split]))]
        assert got == want, split


@pytest.mark.parametrize("name", ["locomo", "longmemeval", "msc"])
def test_conversations_config_round_trip(name, manual_dirs, tmp_path):
    builder = memr1_tfds.build(name, manual_dirs[name], tmp_path, config="conversations")
    source = builder.as_data_source()
    for split, conversations in _expected_splits(name, manual_dirs[name]).items():
        got = [_decode(source[split][i]) for i in range(len(source[split]))]
        want = [conversation_example(c) for c in conversations]
        # Sequences of dicts come back as dicts of lists.
        for example in want:
            for key in ("sessions", "turns", "qa"):
                rows = example[key]
                example[key] = {k: [row[k] for row in rows] for k in sorted(rows[0])}
        assert got == want, split
    assert (tmp_path / name / "conversations" / "1.1.0").is_dir()
    assert list((tmp_path / name / "conversations" / "1.1.0").glob("*.array_record*"))


def test_split_without_examples_is_left_out(tmp_path):
    manual = tmp_path / "manual"
    fixtures.write_locomo_fixture(manual / "two.json", seed=3, num_conversations=2)
    source = memr1_tfds.build("locomo", manual, tmp_path / "data").as_data_source()
    # Two conversations at 1:1:8 all go to test; TFDS cannot store an empty split.
    assert sorted(source) == ["full", "test"]


def test_bad_manual_dir_contents_raise_data_errors(tmp_path):
    manual = tmp_path / "manual"
    manual.mkdir()
    (manual / "notes.txt").write_text("no LongMemEval file here")
    with pytest.raises(DataError, match="longmemeval"):
        memr1_tfds.build("longmemeval", manual, tmp_path / "data")
    (manual / "broken.json").write_text("[{")
    with pytest.raises(DataError, match="broken.json"):
        memr1_tfds.build("locomo", manual, tmp_path / "data")


def test_unknown_builder_name(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset 'loco'"):
        memr1_tfds.build("loco", tmp_path, tmp_path)
