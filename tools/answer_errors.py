"""Where the demo's Answer Agents miss: experiments/cpu_demo/answer_errors.py per seed.

  python tools/answer_errors.py work/demo/seed-0                       # validation evaluations
  python tools/answer_errors.py work/demo/seed-0 --split test --out errors.json
  python tools/answer_errors.py work/demo/seed-0 --systems memory_sft,memory_r1

Reads SEED_DIR/eval/SPLIT/SYSTEM/predictions.jsonl for each evaluated system (default: every
one there) and classes each answer against the careful rule reader on the memories that system
was shown: right, beyond (the careful reader misses it too: the bank or the retrieval lacks the
answer), and the readable misses: hedged (" or "), empty, wrong. Prints the share of each class
per system and the readable misses per question group (date, choice, count, value, other);
writes JSON (--out; default SEED_DIR/answer_errors_SPLIT.json). Synthloco questions only: the
careful reader knows synthloco's sentences. docs/demo.md has its tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.cpu_demo import answer_errors as ae
from memr1.atomic import write_json_atomic
from memr1.torchless import without_torch


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed_dir", type=Path, help="a demo seed folder (work/demo/seed-N)")
    parser.add_argument("--split", default="validation", help="validation or test")
    parser.add_argument("--systems", default=None, help="comma-separated (default: every one)")
    parser.add_argument("--out", type=Path, default=None)
    return parser, parser.parse_args(argv)


def prediction_files(seed_dir: Path, split: str, systems: str | None) -> dict[str, Path]:
    """{system: its predictions.jsonl}. Raises ValueError naming what is missing."""
    root = seed_dir / "eval" / split
    if not root.is_dir():
        raise ValueError(f"{root}: no evaluations of split {split!r} in this seed folder")
    names = systems.split(",") if systems else sorted(p.name for p in root.iterdir() if p.is_dir())
    files = {name: root / name / "predictions.jsonl" for name in names}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing or not files:
        raise ValueError(f"no predictions file: {', '.join(missing) or root}")
    return files


def print_tables(result: dict) -> None:
    print(f"answers classed against the careful rule reader ({result['split']})")
    print("| system | questions | " + " | ".join(ae.CLASSES) + " |")
    print("|---|---:|" + "---:|" * len(ae.CLASSES))
    for name, t in result["systems"].items():
        cells = " | ".join(f"{100 * t['classes'][c] / t['n']:.1f}" for c in ae.CLASSES)
        print(f"| {name} | {t['n']} | {cells} |")
    print("\nreadable misses (hedged + empty + wrong) per question group")
    print("| system | " + " | ".join(ae.GROUPS) + " |")
    print("|---|" + "---:|" * len(ae.GROUPS))
    for name, t in result["systems"].items():
        print(f"| {name} | " + " | ".join(str(t["misses_by_group"][g]) for g in ae.GROUPS) + " |")


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    try:
        files = prediction_files(args.seed_dir, args.split, args.systems)
        classifier = ae.Classifier()
        systems = {name: ae.tally(ae.read_predictions(p), classifier) for name, p in files.items()}
    except ValueError as e:
        parser.error(str(e))
    result = {"seed_dir": str(args.seed_dir), "split": args.split, "systems": systems}
    print_tables(result)
    out = args.out or args.seed_dir / f"answer_errors_{args.split}.json"
    write_json_atomic(out, result)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
