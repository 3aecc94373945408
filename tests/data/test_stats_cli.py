"""``python -m memr1.data.stats`` as a user runs it: output, JSON file, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import data_fixtures as fixtures
from tests.data.helpers import REAL_LOCOMO, REPO, needs_real_locomo, write_json


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        [sys.executable, "-m", "memr1.data.stats", *map(str, args)],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=60,
    )  # fmt: skip


@pytest.fixture
def files(tmp_path):
    return {
        "locomo": fixtures.write_locomo_fixture(tmp_path / "locomo.json", seed=1),
        "longmemeval": fixtures.write_longmemeval_fixture(tmp_path / "lme.json", seed=1),
        "msc": fixtures.write_msc_fixture(tmp_path / "msc.jsonl", seed=1),
    }


def _row(stdout: str, dataset: str, group: str) -> list[str]:
    block = stdout.split(f"{dataset}: ", 1)[1]
    return next(line.split() for line in block.splitlines() if line.split()[:1] == [group])


def test_counts_per_split_and_category(files, tmp_path):
    out = tmp_path / "stats.json"
    result = _run("--locomo", files["locomo"], "--longmemeval", files["longmemeval"],
                  "--msc", files["msc"], "--json", out)  # fmt: skip
    assert result.returncode == 0, result.stderr
    # 3 conversations of 3 sessions x 5 turns; 3 QA per session + 2 per conversation.
    assert _row(result.stdout, "locomo", "all")[1:5] == ["3", "9", "45", "33"]
    assert _row(result.stdout, "locomo", "train")[1:5] == ["1", "3", "15", "8"]
    assert "single-hop" in result.stdout and "mem0 labelling" in result.stdout
    assert _row(result.stdout, "longmemeval", "all")[1:5] == ["6", "18", "72", "6"]
    assert _row(result.stdout, "msc", "all")[1:5] == ["4", "12", "48", "4"]
    report = json.loads(out.read_text())
    assert report["locomo"]["groups"]["test"]["qa"] == 8
    assert report["locomo"]["groups"]["all"]["per_kind"]["adversarial"] == 9
    assert report["longmemeval"]["groups"]["all"]["per_kind"]["knowledge-update"] == 1


def test_labelling_changes_the_names_not_the_numbers(files):
    mem0 = _run("--locomo", files["locomo"])
    locomo = _run("--locomo", files["locomo"], "--labelling", "locomo")
    assert mem0.returncode == locomo.returncode == 0
    header = [text.splitlines()[1].split() for text in (mem0.stdout, locomo.stdout)]
    assert header[0][5:9] == ["single-hop", "temporal", "multi-hop", "open-domain"]
    assert header[1][5:9] == ["multi-hop", "temporal", "open-domain", "single-hop"]
    assert _row(mem0.stdout, "locomo", "all") == _row(locomo.stdout, "locomo", "all")


def test_bad_file_exits_2_with_one_message_and_no_output(files, tmp_path):
    records = json.loads(files["locomo"].read_text())
    records[2]["qa"][4]["category"] = 9
    bad = write_json(tmp_path / "bad.json", records)
    out = tmp_path / "stats.json"
    # The bad file is the last one read, so nothing may be written although the others are fine.
    result = _run("--locomo", files["locomo"], "--msc", bad, "--json", out)
    assert result.returncode == 2
    assert result.stdout == ""
    assert not out.exists()
    result = _run("--locomo", bad, "--json", out)
    assert (result.returncode, result.stdout) == (2, "")
    assert not out.exists()
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1
    for part in (str(bad), records[2]["sample_id"], "qa[4].category"):
        assert part in message


def test_missing_file_and_bad_ratios_exit_2(files, tmp_path):
    missing = _run("--locomo", tmp_path / "nope.json")
    assert missing.returncode == 2 and "nope.json" in missing.stderr
    ratios = _run("--locomo", files["locomo"], "--ratios", "1:1")
    assert ratios.returncode == 2 and "ratios" in ratios.stderr


@needs_real_locomo
def test_real_file():
    result = _run("--locomo", REAL_LOCOMO)
    assert result.returncode == 0, result.stderr
    assert _row(result.stdout, "locomo", "all")[1:10] == [
        "10", "272", "5882", "1986", "282", "321", "96", "841", "446"
    ]  # fmt: skip
    assert _row(result.stdout, "locomo", "test")[1:9] == [
        "8", "234", "5094", "1307", "239", "258", "83", "727"
    ]  # fmt: skip
