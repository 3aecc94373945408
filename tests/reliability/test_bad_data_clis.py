"""Malformed dataset files through the three command lines that read them.

tests/data checks each loader's errors (test_locomo_errors.py, test_longmemeval.py, test_msc.py)
and runs each CLI on one broken file. This table sends every kind of breakage below through every
CLI that reads that dataset (`memr1.data.stats`, `memr1.tuples` for LoCoMo, and
`memr1.evaluate`): each must exit 2 with one message that names the file, the sample and the
field, and write nothing. The first two run in-process through their `main(argv)`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from configs import memr1 as memr1_config
from memr1.data import stats
from memr1.data.errors import WHOLE_FILE
from memr1.tuples import cli as tuples_cli
from tests import data_fixtures as fixtures

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = {"locomo": "conv-7-1", "msc": "msc-1"}


def _locomo():
    return fixtures.locomo_fixture(seed=7, num_conversations=3, num_sessions=3)


def _conv(records):
    return records[1]["conversation"]


def _dump(value) -> str:
    return json.dumps(value)


def _locomo_case(change):
    def build():
        records = _locomo()
        change(records)
        return _dump(records)

    return build


def _lme_case(change):
    def build():
        instances = fixtures.longmemeval_fixture(seed=2, num_instances=6, num_sessions=5)
        change(instances)
        return _dump(instances)

    return build


def _msc_lines(change):
    def build():
        rows = fixtures.msc_fixture(seed=4, num_rows=3, num_previous=3, turns_per_session=4)
        lines = [json.dumps(r) for r in rows]
        change(rows, lines)
        return "\n".join(lines) + "\n"

    return build


def _truncated(build):
    return lambda: build()[: len(build()) // 2]


def _set_row(index, **fields):
    def change(rows, lines):
        rows[index].update(fields)
        lines[index] = json.dumps(rows[index])

    return change


LME_ID = fixtures.longmemeval_fixture(seed=2, num_instances=6, num_sessions=5)[3]["question_id"]
# (name, dataset, file text (or bytes), sample, field; a field ending in "*" is a prefix)
KINDS = [
    ("truncated", "locomo", _truncated(_locomo_case(lambda r: None)), WHOLE_FILE, "line 1 column*"),
    ("not UTF-8", "locomo", lambda: b'[{"sample_id": "\xff"}]', WHOLE_FILE, "<bytes>"),
    ("nested 100k deep", "locomo", lambda: "[" * 10**5 + "]" * 10**5, WHOLE_FILE, "<top level>"),
    ("wrong type", "locomo", _locomo_case(lambda r: r[1]["qa"][0].update(question=5)),
     "conv-7-1", "qa[0].question"),
    ("missing key", "locomo", _locomo_case(lambda r: _conv(r).pop("speaker_b")),
     "conv-7-1", "conversation.speaker_b"),
    ("null object", "locomo", _locomo_case(lambda r: r[1].update(conversation=None)),
     "conv-7-1", "conversation"),
    ("duplicated dia_id", "locomo",
     _locomo_case(lambda r: _conv(r)["session_2"][1].update(dia_id="D1:1")),
     "conv-7-1", "conversation.session_2[1].dia_id"),
    ("duplicated sample_id", "locomo", _locomo_case(lambda r: r[2].update(sample_id="conv-7-1")),
     "conv-7-1", "sample_id"),
    ("empty session", "locomo", _locomo_case(lambda r: _conv(r).update(session_2=[])),
     "conv-7-1", "conversation.session_2"),
    ("huge number", "locomo", _locomo_case(lambda r: r[1]["qa"][2].update(category=10**40)),
     "conv-7-1", "qa[2].category"),
    ("NaN literal", "locomo", _locomo_case(lambda r: r[1]["qa"][2].update(category=float("nan"))),
     "conv-7-1", "qa[2].category"),
    ("speakers share a name", "locomo",
     _locomo_case(lambda r: _conv(r).update(speaker_b=_conv(r)["speaker_a"])),
     "conv-7-1", "conversation.speaker_b"),
    ("turn by a third speaker", "locomo",
     _locomo_case(lambda r: _conv(r)["session_1"][0].update(speaker="Mallory")),
     "conv-7-1", "conversation.session_1[0].speaker"),
    ("truncated", "longmemeval", _truncated(_lme_case(lambda i: None)), WHOLE_FILE, "line 1 col*"),
    ("all sessions empty", "longmemeval",
     _lme_case(lambda i: i[3].update(haystack_sessions=[[]] * 5)), LME_ID, "haystack_sessions"),
    ("dates shorter than sessions", "longmemeval",
     _lme_case(lambda i: i[3]["haystack_dates"].pop()), LME_ID, "haystack_dates"),
    ("broken JSON line", "msc", _msc_lines(lambda r, lines: lines.__setitem__(1, lines[1][:-5])),
     "line 2", "column *"),
    ("no turns anywhere", "msc", _msc_lines(_set_row(1, dialog=[], previous_dialogs=[])),
     "msc-1", "dialog"),
    ("wrong type", "msc", _msc_lines(_set_row(1, dialog="hello")), "msc-1", "dialog"),
]  # fmt: skip
CLIS = {"locomo": ("stats", "tuples", "evaluate"), "longmemeval": ("stats", "evaluate"),
        "msc": ("stats", "evaluate")}  # fmt: skip
CASES = [(kind, cli) for kind in KINDS for cli in CLIS[kind[1]]]


# Runs `memr1.evaluate`'s real main once per file, each in a child forked from one process that
# has imported it already: a fresh absl flag parse per run, at the cost of a single import.
# (absl defines the config override flags while parsing, so one process cannot parse twice.)
EVALUATE = textwrap.dedent(
    """
    import json, os, sys
    from absl import app
    from memr1 import evaluate

    results = []
    for argv, err_path in json.loads(sys.argv[1]):
        pid = os.fork()
        if pid == 0:
            fd = os.open(err_path, os.O_WRONLY | os.O_CREAT)
            os.dup2(fd, 2)
            sys.argv = argv
            code = 99  # app.run always exits: 99 says it did not
            try:
                app.run(evaluate.main, argv=argv)
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
            finally:
                sys.stderr.flush()
                os._exit(code)
        results.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    print(json.dumps(results))
    """
)


def _write_bad(kind, directory: Path) -> Path:
    _, dataset, build, _, _ = kind
    content = build()
    bad = directory / ("bad.jsonl" if dataset == "msc" else "bad.json")
    bad.parent.mkdir(parents=True)
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    return bad


@pytest.fixture(scope="module")
def evaluate_runs(tmp_path_factory):
    """{kind index: (exit code, stderr, bad file, work directory)} for every kind."""
    root = tmp_path_factory.mktemp("evaluate")
    jobs, files = [], []
    for i, kind in enumerate(KINDS):
        bad = _write_bad(kind, root / str(i) / "in")
        config = f"configs/memr1.py:system=mem0,runlocal,dataset={kind[1]}"
        argv = ["memr1.evaluate", f"--config={config}", f"--config.data.path={bad}",
                f"--workdir={root / str(i) / 'out' / 'r'}"]  # fmt: skip
        jobs.append((argv, str(root / str(i) / "stderr.txt")))
        files.append(bad)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", EVALUATE, json.dumps(jobs)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    codes = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        i: (codes[i], Path(err).read_text(), files[i], root / str(i) / "out")
        for i, (_, err) in enumerate(jobs)
    }


def _run_in_process(cli: str, dataset: str, bad: Path, out: Path, good_locomo: Path) -> int:
    if cli == "stats":
        files = {"locomo": good_locomo, dataset: bad}
        args = [a for name, path in files.items() for a in (f"--{name}", str(path))]
        return stats.main([*args, "--json", str(out / "stats.json")])
    config = memr1_config.get_config(f"dataset={dataset}")
    config.data.update(path=str(bad), split="train")
    return tuples_cli.main(config, out=str(out / "t"))


@pytest.mark.parametrize(
    ("kind", "cli"), CASES, ids=[f"{k[1]}-{k[0]}-{cli}".replace(" ", "_") for k, cli in CASES]
)
def test_malformed_file_exits_2_naming_file_sample_and_field(
    kind, cli, tmp_path, capsys, evaluate_runs
):
    _, dataset, _, sample, field = kind
    if cli == "evaluate":
        code, err, bad, out = evaluate_runs[KINDS.index(kind)]
        stdout = ""
    else:
        bad = _write_bad(kind, tmp_path / "in")
        good = fixtures.write_locomo_fixture(tmp_path / "in" / "good.json", seed=1)
        out = tmp_path / "out"
        code = _run_in_process(cli, dataset, bad, out, good)
        captured = capsys.readouterr()
        err, stdout = captured.err, captured.out
    assert code == 2, err[-2000:]
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1, err[-2000:]
    message = lines[0]
    assert str(bad) in message and f"sample {sample!r}" in message, message
    wanted = f"field '{field.rstrip('*')}" + ("" if field.endswith("*") else "'")
    assert wanted in message, message
    assert stdout == ""
    assert not out.exists() or list(out.iterdir()) == [], "a partial output was left behind"
