"""Reliability drill: kill training and bank saves at random, poison steps, feed bad settings.

    python tools/fault_drill.py --kills 5 --seed 0 --json drill.json

What it does, each part in fresh subprocesses of the real command lines (memr1/drill/parts.py):
  1. train kills: a tiny SFT run of `python -m memr1.train` is SIGKILLed `--kills` times, half of
     them timed to land inside a checkpoint save (Orbax's final rename is slowed by `--stall_s`
     so the window is wide), the rest while steps run, and resumed after each kill. It checks
     that every finalised checkpoint restores, that no save the run reported finished went
     missing, that the final train state is bitwise equal to an uninterrupted run's, and that
     metrics.jsonl holds the same records: every field equal except the wall-clock measurements
     (`memr1.train.metrics_log.is_wall_clock`: step times, tokens/s), which differ between any
     two runs. A difference is reported by record, step and field.
  2. bank kills: a loop of `memr1.memory.save_bank` is SIGKILLed `--bank_kills` times (half
     mid-save); after each kill the latest bank must load whole and be no older than the last
     save reported done (tests/memory/test_bank_persist.py does the same, twice).
  3. NaN/inf: the same run with a NaN loss and inf gradients injected (--inject_nonfinite), under
     train.on_nonfinite=skip (must finish, with the refused steps logged and the weights of a
     refused step unchanged) and =stop (must exit 3 with a message, the last checkpoint before it).
  4. bad settings: a mistyped override, a mesh the model cannot split, zero/negative bank
     capacity and a zero checkpoint interval must exit non-zero with the reason, before any model
     is loaded (no work directory appears).
`--parts` runs a subset (tests/reliability/test_fault_drill.py runs a short train-kills drill).
Prints a table, writes every figure to --json, and exits 1 if any part misbehaved. The drill's
subprocesses run `python -m memr1.drill.workers` (the train CLI printing save markers; a loop
of bank saves).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memr1.atomic import write_json_atomic
from memr1.drill import parts
from memr1.torchless import without_torch

PARTS = ("train", "bank", "nonfinite", "settings")


def run_parts(args: argparse.Namespace, root: Path) -> dict:
    """The report of the parts in `args.parts`, in the drill's fixed order."""
    rng = random.Random(args.seed)
    base = parts.prepare(root, args.seed)
    report = {"seed": args.seed, "python": sys.version.split()[0], "parts": list(args.parts)}
    if "train" in args.parts:
        report["train_kills"] = parts.train_kills(
            root, base, args.kills, args.steps, args.stall_s, rng
        )
    if "bank" in args.parts:
        report["bank_kills"] = parts.bank_kills(root, args.bank_kills, args.stall_s, rng)
    if "nonfinite" in args.parts:
        report["nonfinite"] = parts.nonfinite(root, base)
    if "settings" in args.parts:
        report["bad_settings"] = parts.bad_settings(root, base)
    return report


def _rows(report: dict) -> list[tuple[str, str, str, str]]:
    rows = []
    if (t := report.get("train_kills")) is not None:
        rows.append(("SIGKILL of SFT training", f"{t['kills']} ({t['kills_mid_save']} mid-save)",
                     f"{t['resumes']} resumes; final state equal: {t['final_state_equal']}; "
                     f"metrics.jsonl equal but for wall-clock fields: {t['metrics_jsonl_equal']}",
                     f"{t['checkpoints_lost']} checkpoints"))  # fmt: skip
    if (b := report.get("bank_kills")) is not None:
        rows.append(("SIGKILL of bank saves", f"{b['kills']} ({b['kills_mid_save']} mid-save)",
                     "latest bank whole and up to date after each kill",
                     f"{b['banks_lost']} banks"))  # fmt: skip
    if (n := report.get("nonfinite")) is not None:
        skip, stop = n["skip"], n["stop"]
        rows.append(
            (
                "NaN loss + inf grads, skip",
                "2 steps",
                f"exit {skip['exit']}, refused {skip['refused_steps']}, weights kept: "
                f"{skip['refused_update_kept_weights']}",
                "0 steps' updates (by design)",
            )
        )
        rows.append(
            (
                "inf grads, stop",
                "1 step",
                f"exit {stop['exit']}, last checkpoint "
                f"{stop['last_checkpoint']}, refused step logged: "
                f"{stop['last_logged_refused']}",
                "the run (stopped on purpose)",
            )
        )
    for case in report.get("bad_settings", []):
        rows.append((case["case"], "1", f"exit {case['exit']} in {case['seconds']} s, "
                     f"workdir created: {case['workdir_created']}", "-"))  # fmt: skip
    return rows


def table(report: dict) -> str:
    """The report's rows as an aligned text table."""
    rows = _rows(report)
    widths = [max(len(str(r[i])) for r in rows) for i in range(3)]
    head = ("injected", "times", "what survived / outcome", "lost")
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, [*widths, 0]))]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, [*widths, 0])) for r in rows]
    return "\n".join(lines)


def verdict(report: dict) -> list[str]:
    """What went wrong, in words; empty when every part that ran behaved as required."""
    checks = {}
    if (t := report.get("train_kills")) is not None:
        differs = "metrics.jsonl differs from the uninterrupted run"
        if not t["metrics_jsonl_equal"]:
            differs += ": " + "; ".join(t["metrics_jsonl_differences"][:3])
        checks["a checkpoint was lost"] = t["checkpoints_lost"] == 0
        checks["the resumed run ended elsewhere"] = t["final_state_equal"] and t["final_exit"] == 0
        checks[differs] = t["metrics_jsonl_equal"]
    if (b := report.get("bank_kills")) is not None:
        checks["a bank was lost"] = b["banks_lost"] == 0
    if (n := report.get("nonfinite")) is not None:
        skip, stop = n["skip"], n["stop"]
        checks["skip mode misbehaved"] = (
            skip["exit"] == 0 and skip["refused_steps"] == [3, 6]
        ) and skip["refused_update_kept_weights"]
        checks["stop mode misbehaved"] = (
            stop["exit"] == 3 and stop["last_checkpoint"] == 3 and stop["last_logged_refused"]
        )
    if (bad := report.get("bad_settings")) is not None:
        checks["a bad setting was accepted or left a work directory"] = all(
            c["exit"] != 0 and not c["workdir_created"] for c in bad
        )
    return [name for name, ok in checks.items() if not ok]


def _parts(text: str) -> tuple[str, ...]:
    chosen = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [x for x in chosen if x not in PARTS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma list of {','.join(PARTS)}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=5, help="SIGKILLs of the training run")
    p.add_argument("--bank_kills", type=int, default=6, help="SIGKILLs of bank saves")
    p.add_argument("--steps", type=int, default=24, help="training steps (checkpoint every 2)")
    p.add_argument("--stall_s", type=float, default=0.5, help="extra seconds inside each save")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--parts", type=_parts, default=PARTS, help=f"subset of {','.join(PARTS)}")
    p.add_argument("--json", type=Path, help="write the report here")
    p.add_argument("--workdir", type=Path, help="keep the runs here (default: a temp dir)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if "train" in args.parts and args.steps < 2 * args.kills + 4:
        p.error(f"--steps must be at least 2 * kills + 4 = {2 * args.kills + 4}")
    root = Path(tempfile.mkdtemp(prefix="fault_drill-")) if args.workdir is None else args.workdir
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    report = run_parts(args, root)
    report["wall_s"] = round(time.monotonic() - t0, 1)
    print(table(report))
    print(f"wall time {report['wall_s']} s; runs in {root}")
    if args.json:
        write_json_atomic(args.json, report)
    if args.workdir is None:
        shutil.rmtree(root, ignore_errors=True)
    failed = verdict(report)
    print("drill passed" if not failed else "drill FAILED: " + "; ".join(failed))
    return 0 if not failed else 1


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
