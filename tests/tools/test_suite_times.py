"""tools/bench/suite_times.py sums the per-test times tests/conftest.py records with
MEMR1_TEST_TIMES, and replays them on two workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.tool import load_tool

ROOT = Path(__file__).resolve().parents[2]


def test_per_file_sums_tests_and_sorts_by_cpu():
    tool = load_tool("suite_times")
    records = [
        {"test": "tests/a.py::t1", "wall_s": 1.0, "cpu_s": 2.0},
        {"test": "tests/b.py::t1", "wall_s": 5.0, "cpu_s": 9.0},
        {"test": "tests/a.py::t2[x]", "wall_s": 3.0, "cpu_s": 4.0},
    ]
    rows = tool.per_file(records)
    assert [r["file"] for r in rows] == ["tests/b.py", "tests/a.py"]
    assert rows[1] == {"file": "tests/a.py", "tests": 2, "wall_s": 4.0, "cpu_s": 6.0}


def test_the_replay_hands_each_file_to_the_first_free_worker_in_run_order():
    tool = load_tool("suite_times")
    # Run order a (8 s), b (3), c (4), d (2): a | b, c, d -> workers at 8 and 9 s.
    records = [{"test": f"tests/{f}.py::t", "wall_s": s, "cpu_s": s} for f, s in
               [("a", 5.0), ("b", 3.0), ("a", 3.0), ("c", 4.0), ("d", 2.0)]]  # fmt: skip
    assert tool.replay(records, workers=2) == [8.0, 9.0]
    assert tool.replay(records, workers=1) == [17.0]


def test_a_run_records_every_test_with_its_subprocess_cpu(tmp_path):
    """The conftest hook writes one record per test, and counts a subprocess's CPU."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text(f"exec(open({str(ROOT / 'tests/conftest.py')!r}).read())\n")
    spin = "import time; t = time.process_time()\\nwhile time.process_time() - t < 0.3: pass"
    (tests / "test_x.py").write_text(
        "import subprocess, sys\n"
        "def test_fast():\n    pass\n"
        f"def test_child():\n    subprocess.run([sys.executable, '-c', '{spin}'], check=True)\n"
    )
    times = tmp_path / "times"
    env = {**os.environ, "MEMR1_TEST_TIMES": str(times), "MEMR1_TEST_COMPILE_CACHE": "0"}
    env.pop("PYTEST_XDIST_WORKER", None)  # this test's own worker: the inner run has none
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (times / "main.jsonl").read_text().splitlines()]
    by_name = {r["test"].split("::")[1]: r for r in records}
    assert set(by_name) == {"test_fast", "test_child"}
    assert by_name["test_child"]["cpu_s"] >= 0.3 > by_name["test_fast"]["cpu_s"]
    out = tmp_path / "files.json"
    assert load_tool("suite_times").main([str(times), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["files"][0]["tests"] == 2
