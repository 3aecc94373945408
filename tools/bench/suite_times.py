"""Where the test suite's time goes: per-file wall and CPU seconds of a run made with
MEMR1_TEST_TIMES=DIR (tests/conftest.py records each test), slowest first.

  MEMR1_TEST_TIMES=/tmp/times make test
  python tools/bench/suite_times.py /tmp/times [--top 30] [--json OUT] [--workers 2]

CPU seconds (the test's process and the subprocesses it waited for) are what a file costs the
two cores whatever else runs on the machine; wall seconds on a shared machine are not.
`--workers N` replays the files' CPU seconds on N pytest-xdist workers as `--dist loadfile`
hands them out (each file, in the order the run met them, to the first free worker): the
tests' part of `make test`'s wall time on a machine to itself, from a run that shared it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def per_file(records: list[dict]) -> list[dict]:
    """Sums of wall and CPU seconds and the test count per file, largest CPU first."""
    files: dict[str, dict] = {}
    for r in records:
        f = files.setdefault(r["test"].split("::")[0], {"tests": 0, "wall_s": 0.0, "cpu_s": 0.0})
        f["tests"] += 1
        f["wall_s"] += r["wall_s"]
        f["cpu_s"] += r["cpu_s"]
    rows = [{"file": name, **v} for name, v in files.items()]
    return sorted(rows, key=lambda r: -r["cpu_s"])


def replay(records: list[dict], workers: int) -> list[float]:
    """Each worker's CPU seconds when the files (in the order the records first name them) go
    one at a time to the worker with the least work so far."""
    order: dict[str, float] = {}
    for r in records:
        name = r["test"].split("::")[0]
        order[name] = order.get(name, 0.0) + r["cpu_s"]
    loads = [0.0] * workers
    for seconds in order.values():
        loads[loads.index(min(loads))] += seconds
    return loads


def read_records(directory: Path) -> list[dict]:
    paths = sorted(directory.glob("*.jsonl"))
    if not paths:
        raise SystemExit(
            f"{directory}: no *.jsonl (run the suite with MEMR1_TEST_TIMES={directory})"
        )
    return [json.loads(line) for p in paths for line in p.read_text().splitlines() if line]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--json", type=Path, help="write every file's row here")
    parser.add_argument("--workers", type=int, default=0, help="replay on this many workers")
    args = parser.parse_args(argv)
    records = read_records(args.directory)
    rows = per_file(records)
    total_cpu = sum(r["cpu_s"] for r in rows)
    total_wall = sum(r["wall_s"] for r in rows)
    print(f"{len(rows)} files; CPU {total_cpu:.0f} s, wall summed over workers {total_wall:.0f} s")
    print("| file | tests | CPU s | CPU share | wall s |\n|---|---:|---:|---:|---:|")
    for r in rows[: args.top]:
        share = r["cpu_s"] / max(total_cpu, 1e-9)
        print(
            f"| {r['file']} | {r['tests']} | {r['cpu_s']:.0f} | {share:.1%} | {r['wall_s']:.0f} |"
        )
    if args.workers > 0:
        loads = replay(records, args.workers)
        each = " + ".join(f"{x:.0f}" for x in loads)
        last = max(loads)
        print(f"replayed on {args.workers} workers: {each} CPU s; the last ends at {last:.0f} s "
              f"({last / 60:.1f} min)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"files": rows, "cpu_s": total_cpu}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
