"""Print the memories of a run's banks and the history of each memory.

  python tools/inspect_bank.py WORKDIR                       # every conversation, all memories
  python tools/inspect_bank.py WORKDIR --conversation conv-26
  python tools/inspect_bank.py WORKDIR --conversation conv-26 --memory 12

WORKDIR is a `memr1.evaluate` work directory. The banks themselves are the Orbax saves under
WORKDIR/banks/<sample_id>/; this tool reads them with `memr1.memory.load_bank`, so it shows what
the arrays hold (the JSON views next to them are only a convenience).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
from pathlib import Path

from memr1 import memory as mem
from memr1.torchless import without_torch


def _date(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%d %b %Y")


def _speakers(workdir: Path, sample_id: str) -> list[str]:
    view = workdir / "banks" / f"{sample_id}.json"
    if view.exists():
        return json.loads(view.read_text())["speakers"]
    return []


def show_bank(workdir: Path, sample_id: str, memory_id: int | None, out=sys.stdout) -> None:
    bank = mem.load_bank(workdir / "banks" / sample_id)
    speakers = _speakers(workdir, sample_id)

    def owner(i: int) -> str:
        return speakers[i] if 0 <= i < len(speakers) else f"owner {i}"

    if memory_id is not None:
        history = mem.memory_history(bank, memory_id)
        if not history:
            print(f"{sample_id}: no logged history for memory {memory_id}", file=out)
        for e in history:
            line = f"turn {e['turn']} ({_date(e['timestamp'])}) {e['kind']}"
            if e.get("old_text"):
                line += f"\n    old: {e['old_text']}"
            if e.get("new_text"):
                line += f"\n    new: {e['new_text']}"
            print(line, file=out)
        return
    stats = mem.growth_stats(bank)
    c = stats["counters"]
    print(
        f"== {sample_id}: {stats['size']}/{stats['capacity']} memories; "
        f"adds {c['adds']}, updates {c['updates']}, deletes {c['deletes']}, "
        f"evictions {c['evictions']}, unknown-id ops {c['unknown_id']}",
        file=out,
    )
    for row in mem.text_view(bank):
        print(
            f"  [{row['id']:>4}] {owner(row['owner'])} v{row['version']} "
            f"({_date(row['updated'])}): {row['text']}",
            file=out,
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--conversation", help="sample_id of one conversation")
    parser.add_argument("--memory", type=int, help="memory id whose history to print")
    args = parser.parse_args(argv)
    # Orbax warns that a restore directory is read-only; that is expected for an inspector.
    logging.getLogger("absl").setLevel(logging.ERROR)
    banks = args.workdir / "banks"
    if not banks.is_dir():
        print(f"inspect_bank: {banks} is not a directory (not a memr1 workdir?)", file=sys.stderr)
        return 2
    ids = sorted(p.name for p in banks.iterdir() if p.is_dir())
    if args.conversation:
        if args.conversation not in ids:
            print(f"inspect_bank: no bank {args.conversation!r} in {banks}", file=sys.stderr)
            return 2
        ids = [args.conversation]
    if args.memory is not None and not args.conversation:
        print("inspect_bank: --memory needs --conversation", file=sys.stderr)
        return 2
    for sample_id in ids:
        show_bank(args.workdir, sample_id, args.memory)
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
