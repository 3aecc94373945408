"""Storing tuples: array_record round trip, all-or-nothing writes, refusing bad records, and the
TFDS builder over tuples folders."""

from __future__ import annotations

import json
import shutil

import pytest
from array_record.python.array_record_module import ArrayRecordWriter

from memr1.data.errors import DataError
from memr1.tuples import (
    SCHEMA_VERSION,
    TupleReader,
    read_metadata,
    read_tuples,
    write_tuples,
)
from memr1.tuples.schema import to_json
from tests.data.test_tuples import build, merge_into_first, synth_conversations, write_synth


@pytest.fixture(scope="module")
def tuples(tmp_path_factory):
    convs = synth_conversations(write_synth(tmp_path_factory.mktemp("synth")))
    return build(convs, builder="teacher", teacher=merge_into_first, window=6, only_with_qa=False)


def _write(folder, tuples, split="train", **kwargs):
    return write_tuples(folder, tuples.manager, tuples.answer, {"split": split}, **kwargs)


def test_round_trip_gives_back_equal_dataclasses(tuples, tmp_path):
    out = _write(tmp_path / "t", tuples)
    assert read_tuples(out, "manager") == tuples.manager
    assert read_tuples(out, "answer") == tuples.answer
    meta = read_metadata(out)
    assert meta["version"] == SCHEMA_VERSION and meta["build"] == {"split": "train"}
    assert meta["files"]["manager"]["records"] == len(tuples.manager)
    with TupleReader(out, "manager") as reader:
        assert len(reader) == len(tuples.manager)
        assert reader[3] == tuples.manager[3] and reader[-1] == tuples.manager[-1]
        with pytest.raises(IndexError):
            reader[len(reader)]
    # Nothing but the three files, and no temporary folder beside them.
    assert sorted(p.name for p in out.iterdir()) == [
        "answer.array_record",
        "manager.array_record",
        "metadata.json",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["t"]


def test_empty_tuple_lists_round_trip(tmp_path):
    out = write_tuples(tmp_path / "empty", [], [], {})
    assert read_tuples(out, "manager") == [] and read_tuples(out, "answer") == []


def test_a_failed_write_leaves_nothing(tuples, tmp_path):
    def breaks_halfway():
        yield tuples.answer[0]
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        write_tuples(tmp_path / "t", tuples.manager, breaks_halfway(), {})
    assert list(tmp_path.iterdir()) == []


def test_existing_folders_are_replaced_only_when_asked(tuples, tmp_path):
    out = _write(tmp_path / "t", tuples)
    with pytest.raises(FileExistsError, match="--overwrite"):
        write_tuples(out, [], [], {})
    assert read_tuples(out, "manager") == tuples.manager
    write_tuples(out, [], [], {"again": True}, overwrite=True)
    assert read_tuples(out, "manager") == [] and read_metadata(out)["build"] == {"again": True}
    assert [p.name for p in tmp_path.iterdir()] == ["t"]
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a tuples folder"):
        write_tuples(other, [], [], {}, overwrite=True)
    assert (other / "keep.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    assert read_tuples(write_tuples(tmp_path / "empty", [], [], {}), "answer") == []


def _with_record(tuples, folder, row):
    """A copy of a good tuples folder whose manager file holds one hand-written record."""
    shutil.copytree(_write(folder.parent / "good", tuples), folder)
    writer = ArrayRecordWriter(str(folder / "manager.array_record"), "group_size:1")
    writer.write(json.dumps(row).encode())
    writer.close()
    return folder


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"version": SCHEMA_VERSION + 1}, "version"),
        ({"facts": "one fact"}, "facts"),
        ({"retrieved": [[1]]}, "retrieved"),
        ({"turn_index": None}, "turn_index"),
    ],
)
def test_bad_records_are_reported_with_file_record_and_field(tuples, tmp_path, change, field):
    row = {**json.loads(to_json(tuples.manager[0])), **change}
    folder = _with_record(tuples, tmp_path / "bad", row)
    with pytest.raises(DataError) as err:
        read_tuples(folder, "manager")
    assert (err.value.file, err.value.sample, err.value.field) == (
        str(folder / "manager.array_record"),
        "record 0",
        field,
    )


def test_metadata_of_another_version_is_refused(tuples, tmp_path):
    out = _write(tmp_path / "t", tuples)
    meta = json.loads((out / "metadata.json").read_text())
    (out / "metadata.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(DataError, match="version 99"):
        TupleReader(out, "answer")
    with pytest.raises(DataError, match="not a tuples folder"):
        read_tuples(tmp_path, "answer")


def test_tfds_builder_serves_each_split_in_stored_order(tuples, tmp_path):
    from memr1.tuples import tfds_builder as tuples_builder

    manual = tmp_path / "manual"
    _write(manual / "train", tuples, split="train")
    _write(manual / "val", tuples, split="validation")
    for kind, expected in (("manager", tuples.manager), ("answer", tuples.answer)):
        builder = tuples_builder.build(manual, tmp_path / "tfds", kind)
        source = builder.as_data_source()
        assert set(source) == {"train", "validation"}
        got = [
            tuples_builder.decode_example(source["train"][i], kind) for i in range(len(expected))
        ]
        assert got == expected and len(source["validation"]) == len(expected)
    example = builder.as_data_source()["train"][0]
    assert example["index"] == tuples.answer[0].qa_index and bool(example["has_qa"])
