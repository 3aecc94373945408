"""The TFDS build commands and the readers behind `tfds:DATA_DIR[:SPLIT]`: a dataset or tuples
folder built with the command reads back exactly the records of the direct path, in order, and
bad input exits 2 naming the problem."""

from __future__ import annotations

import dataclasses

import pytest

from configs import memr1 as memr1_config
from memr1.data.errors import DataError
from memr1.data.locomo import load_locomo
from memr1.data.source import TfdsSource, parse_source
from memr1.data.tfds.__main__ import main as build_dataset
from memr1.data.tfds.read import read_conversations
from memr1.env.setup import load_conversations
from memr1.tuples import open_tuples, read_tuples, write_tuples
from memr1.tuples.to_tfds import main as build_tuples_dataset
from tests import data_fixtures as fixtures
from tests.data.test_tuples import build, synth_conversations, write_synth


def _data(dataset: str, path, **changes):
    data = memr1_config.get_config(f"dataset={dataset},runlocal").data
    data.path = str(path)
    for key, value in changes.items():
        data[key] = value
    return data


@pytest.fixture(scope="module")
def locomo(tmp_path_factory):
    """(the LoCoMo fixture file, the data_dir the command built it into)."""
    root = tmp_path_factory.mktemp("locomo")
    path = fixtures.write_locomo_fixture(root / "locomo10.json", seed=21, num_conversations=5)
    assert build_dataset(["--dataset=locomo", f"--source={path}", f"--data_dir={root / 'd'}"]) == 0
    return path, root / "d"


def test_the_spec_names_a_data_dir_and_maybe_a_split():
    assert parse_source("runs/locomo10.json") is None
    assert parse_source("tfds:/data/tfds") == TfdsSource("/data/tfds", None)
    assert parse_source("tfds:/data/tfds:test") == TfdsSource("/data/tfds", "test")
    assert parse_source("tfds:gs://bucket/tfds") == TfdsSource("gs://bucket/tfds", None)
    assert parse_source("tfds:gs://bucket/tfds:train") == TfdsSource("gs://bucket/tfds", "train")
    with pytest.raises(ValueError, match="tfds:DATA_DIR"):
        parse_source("tfds:")


@pytest.mark.parametrize("split", ["test", "validation", "all"])
def test_evaluation_reads_the_same_conversations_from_the_built_dataset(locomo, split):
    path, data_dir = locomo
    direct = load_conversations(_data("locomo", path, split=split))
    assert direct and load_conversations(_data("locomo", f"tfds:{data_dir}", split=split)) == direct


def test_a_stored_split_reads_as_the_same_split_of_the_file(locomo):
    path, data_dir = locomo
    stored = load_conversations(_data("locomo", f"tfds:{data_dir}:test", split="all"))
    assert stored == load_conversations(_data("locomo", path, split="test"))


def test_every_field_survives_including_observations_and_dates(tmp_path):
    """LongMemEval (question dates, session ids, abstention) and MSC (personas as observations)."""
    lme = fixtures.write_longmemeval_fixture(tmp_path / "lme" / "longmemeval_s.json", variant="s")
    msc = fixtures.write_msc_fixture(tmp_path / "msc" / "msc.jsonl")
    for name, source in (("longmemeval", lme), ("msc", msc)):
        args = [f"--dataset={name}", f"--source={source}", f"--data_dir={tmp_path / 'd'}"]
        assert build_dataset([*args, "--config=conversations"]) == 0
        direct = load_conversations(_data(name, source, split="all"))
        assert load_conversations(_data(name, f"tfds:{tmp_path / 'd'}", split="all")) == direct
    (conversation, *_) = read_conversations("msc", tmp_path / "d")
    assert conversation.observation and conversation.sessions[0].date_time.year > 1900


def test_overwrite_rebuilds_from_a_changed_source(tmp_path):
    path = fixtures.write_locomo_fixture(tmp_path / "locomo10.json", seed=3, num_conversations=2)
    args = ["--dataset=locomo", f"--source={path}", f"--data_dir={tmp_path / 'd'}"]
    assert build_dataset([*args, "--config=conversations"]) == 0
    path = fixtures.write_locomo_fixture(path, seed=4, num_conversations=3)
    assert build_dataset([*args, "--config=conversations", "--overwrite"]) == 0
    assert read_conversations("locomo", tmp_path / "d") == load_locomo(path)


def _status(capsys, command, *argv: str) -> tuple[int, str]:
    try:
        code = command(list(argv))
    except SystemExit as caught:  # argparse refusing its arguments
        code = caught.code
    return code, capsys.readouterr().err


def test_bad_input_exits_2_naming_the_problem(locomo, tmp_path, capsys):
    path, data_dir = locomo
    out = tmp_path / "d"
    cases = [
        (["--dataset=loco", f"--source={path}", f"--data_dir={out}"], "invalid choice: 'loco'"),
        (["--dataset=locomo", f"--source={path}"], "required: --data_dir"),
        (["--dataset=locomo", "--config=turns", f"--source={path}", f"--data_dir={out}"],
         "invalid choice: 'turns'"),
        (["--dataset=locomo", f"--source={tmp_path / 'nope.json'}", f"--data_dir={out}"],
         "nope.json: no such file"),
        (["--dataset=locomo", f"--source={path}", f"--data_dir={data_dir}"],
         "already built; pass --overwrite"),
    ]  # fmt: skip
    for argv, message in cases:
        code, err = _status(capsys, build_dataset, *argv)
        assert code == 2 and message in err, (argv, err)
    assert not out.exists()


def test_reading_a_missing_dataset_or_split_names_it_and_creates_nothing(locomo, tmp_path):
    _, data_dir = locomo
    with pytest.raises(DataError, match="not built; build it with python -m memr1.data.tfds"):
        load_conversations(_data("locomo", f"tfds:{tmp_path / 'none'}"))
    assert not (tmp_path / "none").exists()
    with pytest.raises(DataError, match="no split 'trian'"):
        load_conversations(_data("locomo", f"tfds:{data_dir}:trian"))
    with pytest.raises(DataError, match="not built; build it with python -m memr1.tuples.to_tfds"):
        read_tuples(f"tfds:{data_dir}", "answer")  # a data_dir without tuples built in it


@pytest.fixture(scope="module")
def tuples_dirs(tmp_path_factory):
    """(train tuples folder, its parent holding train and validation folders)."""
    root = tmp_path_factory.mktemp("tuples")
    convs = synth_conversations(write_synth(root / "synth"))
    built = build(convs)
    for split in ("train", "validation"):
        write_tuples(root / "all" / split, built.manager, built.answer, {"split": split})
    return root / "all" / "train", root / "all"


@pytest.mark.parametrize("kind", ["manager", "answer"])
def test_training_reads_the_same_tuples_from_the_built_dataset(tuples_dirs, tmp_path, kind):
    train, both = tuples_dirs
    assert (
        build_tuples_dataset([f"--source={both}", f"--data_dir={tmp_path}", f"--kind={kind}"]) == 0
    )
    direct = read_tuples(train, kind)
    assert direct and read_tuples(f"tfds:{tmp_path}", kind) == direct  # the train split by default
    assert read_tuples(f"tfds:{tmp_path}:validation", kind) == direct
    with open_tuples(f"tfds:{tmp_path}", kind) as reader, open_tuples(train, kind) as folder:
        # Random access by position, as the training loop indexes its rows.
        for i in (len(folder) - 1, 0, len(folder) // 2, -1):
            assert reader[i] == folder[i]
        with pytest.raises(IndexError):
            reader[len(folder)]


def test_a_stale_tuples_build_is_refused(tuples_dirs, tmp_path, capsys):
    train, _ = tuples_dirs
    args = [f"--source={train}", f"--data_dir={tmp_path}", "--kind=answer"]
    assert build_tuples_dataset(args) == 0
    code, err = _status(capsys, build_tuples_dataset, *args)
    assert code == 2 and "already built; pass --overwrite" in err
    assert build_tuples_dataset([*args, "--overwrite"]) == 0
    # One folder of split "train": the default split is found without naming it.
    assert [dataclasses.asdict(t) for t in read_tuples(f"tfds:{tmp_path}", "answer")] == [
        dataclasses.asdict(t) for t in read_tuples(train, "answer")
    ]
