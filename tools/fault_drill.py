"""Reliability drill: kill training and bank saves at random, poison steps, feed bad settings.

    python tools/fault_drill.py --kills 5 --seed 0 --json drill.json

What it does, each part in fresh subprocesses of the real command lines:
  1. train kills: a tiny SFT run of `python -m memr1.train` is SIGKILLed `--kills` times, half of
     them timed to land inside a checkpoint save (Orbax's final rename is slowed by `--stall_s`
     so the window is wide), the rest while steps run, and resumed after each kill. It checks
     that every finalised checkpoint restores, that no save the run reported finished went
     missing, and that the final train state and metrics.jsonl are bitwise equal to an
     uninterrupted run.
  2. bank kills: a loop of `memr1.memory.save_bank` is SIGKILLed `--bank_kills` times (half
     mid-save); after each kill the latest bank must load whole and be no older than the last
     save reported done (tests/memory/test_bank_persist.py does the same, twice).
  3. NaN/inf: the same run with a NaN loss and inf gradients injected (--inject_nonfinite), under
     train.on_nonfinite=skip (must finish, with the refused steps logged and the weights of a
     refused step unchanged) and =stop (must exit 3 with a message, the last checkpoint before it).
  4. bad settings: a mistyped override, a mesh the model cannot split, zero/negative bank
     capacity and a zero checkpoint interval must exit non-zero with the reason, before any model
     is loaded (no work directory appears).
Prints a table, writes every figure to --json, and exits 1 if any part misbehaved. The worker
modes (`--worker -- ARGS`: the train CLI printing save markers; `--bank_worker DIR K`) are for
the drill's own subprocesses.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
TRAIN_CONFIG = "configs/memr1.py:runlocal,algo=sft,stage=answer"


# -- worker: the train CLI with markers ---------------------------------------------------------


def _stall_finalize(seconds: float) -> None:
    """Slows Orbax's last act of a save (commit marker + rename) so a kill can land inside it."""
    from orbax.checkpoint._src.path import atomicity

    finalize = atomicity.AtomicRenameTemporaryPath.finalize

    async def stalled(self, *args, **kwargs):
        time.sleep(seconds)
        return await finalize(self, *args, **kwargs)

    atomicity.AtomicRenameTemporaryPath.finalize = stalled


def worker(argv: list[str]) -> None:
    from absl import app

    import memr1.train.__main__ as cli
    from memr1.train.checkpoint import Checkpointer
    from memr1.train.metrics_log import MetricsWriter

    def say(line: str) -> None:
        print(line, flush=True)

    class Marked(Checkpointer):
        def save(self, step, state, data_position, *, force=False):
            say(f"SAVE-BEGIN {step}")
            saved = super().save(step, state, data_position, force=force)
            say(f"SAVE-END {step}")
            return saved

        def restore_latest(self, abstract_state, shardings=None):
            restored = super().restore_latest(abstract_state, shardings)
            if restored is not None:
                say(f"RESTORED {restored[1]['next_step']}")
            return restored

    write = MetricsWriter.write

    def logged(self, step, metrics, prefix="train"):
        write(self, step, metrics, prefix)
        say(f"LOGGED {step}")

    if float(os.environ.get("DRILL_STALL_S", "0")) > 0:
        _stall_finalize(float(os.environ["DRILL_STALL_S"]))
    cli.Checkpointer = Marked
    MetricsWriter.write = logged
    app.run(cli.main, argv=["memr1.train", *argv])


def tagged_bank(k: int):
    """A bank whose every array carries k: it loads consistent only if saved whole."""
    import jax.numpy as jnp

    from memr1 import memory as mem

    bank = mem.empty_bank(512, 64, 384, 64)
    return bank.replace(
        ids_M=jnp.arange(512, dtype=jnp.int32) + 1000 * k,
        emb_ME=jnp.full((512, 384), k, jnp.float32),
        next_id=jnp.int32(k),
    )


def bank_worker(directory: str, start: int) -> None:
    """Saves tagged banks start, start + 1, ... into `directory` until killed."""
    from memr1 import memory as mem

    if float(os.environ.get("DRILL_STALL_S", "0")) > 0:
        _stall_finalize(float(os.environ["DRILL_STALL_S"]))
    for k in range(start, start + 10_000):
        print(f"SAVE-BEGIN {k}", flush=True)
        mem.save_bank(directory, tagged_bank(k))
        print(f"SAVE-END {k}", flush=True)


# -- processes and markers ----------------------------------------------------------------------


class Child:
    """A subprocess whose stdout lines are collected, with their arrival time, by a thread."""

    def __init__(self, cmd: list[str], log: Path, env: dict | None = None):
        self.log = open(log, "a", encoding="utf-8")
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=env or ENV, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        self.lines: list[tuple[float, str]] = []
        self._new: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            item = (time.monotonic(), line.strip())
            self.lines.append(item)
            self._new.put(item)
        self._new.put(None)

    def wait_for(self, tag: str, at_least: int, timeout_s: float = 600) -> float | None:
        """Waits for a line "TAG n" with n >= at_least; its arrival time, or None at exit."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                item = self._new.get(timeout=1)
            except queue.Empty:
                continue
            if item is None:
                return None
            word, _, n = item[1].partition(" ")
            if word == tag and n.lstrip("-").isdigit() and int(n) >= at_least:
                return item[0]
        raise TimeoutError(f"no {tag} >= {at_least} within {timeout_s} s")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.finish()

    def finish(self, timeout_s: float = 900) -> int:
        rc = self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=30)  # the pipe ends with the process: every line is in
        self.proc.stdout.close()
        self.log.close()
        return rc

    def markers(self, tag: str) -> list[int]:
        return [int(line.split()[1]) for _, line in self.lines if line.startswith(tag + " ")]


def open_save(child: Child) -> int | None:
    """The step of a save this process began and never finished, if any."""
    begun, ended = child.markers("SAVE-BEGIN"), set(child.markers("SAVE-END"))
    return next((k for k in reversed(begun) if k not in ended), None)


# -- checkpoints ---------------------------------------------------------------------------------


def read_state(step_dir: Path) -> dict:
    """Every array of a checkpoint's train state, as numpy (keys as raw bits)."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    tree = ocp.PyTreeCheckpointer().restore(step_dir / "state")

    def host(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x)

    return {jax.tree_util.keystr(p): host(x) for p, x in jax.tree_util.tree_leaves_with_path(tree)}


def audit(ckpt_dir: Path, last_reported: int | None) -> dict:
    """Finalised steps, the ones that fail to restore, and whether a finished save vanished."""
    from memr1.train.checkpoint import COMMIT_MARKER

    steps = sorted(
        int(p.name) for p in ckpt_dir.iterdir() if p.name.isdigit() and (p / COMMIT_MARKER).exists()
    )
    unreadable = []
    for step in steps:
        try:
            read_state(ckpt_dir / str(step))
            json.loads((ckpt_dir / str(step) / "data" / "metadata").read_text())
        except Exception as err:  # any failure to read back counts as a lost checkpoint
            unreadable.append(f"{step}: {type(err).__name__}: {err}")
    vanished = last_reported is not None and (not steps or steps[-1] < last_reported)
    temporary = [p.name for p in ckpt_dir.iterdir() if ".orbax-checkpoint-tmp" in p.name]
    return {
        "finalised": steps,
        "unreadable": unreadable,
        "vanished": vanished,
        "temporary": temporary,
    }


def states_equal(a: Path, b: Path, only: str = "") -> bool:
    """Bitwise equality of two checkpoints' train states (or of the leaves under `only`)."""
    import numpy as np

    x, y = read_state(a), read_state(b)
    keys = [k for k in x if k.startswith(only)]
    return (
        bool(keys)
        and x.keys() == y.keys()
        and all(x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]) for k in keys)
    )


# -- the drill parts -----------------------------------------------------------------------------


def prepare(root: Path, seed: int) -> list[str]:
    """A tokenizer and SFT pairs; returns the train CLI arguments every run shares."""
    from memr1.models.tokenizer_train import train_bpe_tokenizer

    rng = random.Random(seed)
    names, cities = ["Ann", "Bo", "Cy", "Di", "Ed", "Flo"], ["Paris", "Rome", "Oslo", "Lima"]
    rows = []
    for _ in range(32):
        name, city = rng.choice(names), rng.choice(cities)
        ask = f"{name} moved to {city} last spring. Where does {name} live?"
        rows.append({"messages": [{"role": "user", "content": ask}], "target": city})
    train_bpe_tokenizer(
        [r["messages"][0]["content"] for r in rows] * 4, root / "tok", vocab_size=300
    )
    with open(root / "sft.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return [
        f"--config.tokenizer_dir={root / 'tok'}",
        f"--sft_data={root / 'sft.jsonl'}",
        "--config.train.sft_length=64",
        "--config.train.batch_size=2",
        f"--config.seed={seed}",
    ]


def launch(args: list[str], workdir: Path, stall_s: float) -> Child:
    env = {**ENV, "DRILL_STALL_S": str(stall_s)}
    cmd = [sys.executable, __file__, "--worker", "--", f"--config={TRAIN_CONFIG}", *args]
    cmd.append(f"--workdir={workdir}")
    return Child(cmd, workdir.parent / f"{workdir.name}.log", env)


def train_kills(root: Path, base: list[str], kills: int, steps: int, stall_s: float, rng) -> dict:
    args = [*base, f"--config.train.steps={steps}", "--config.train.checkpoint_every=2"]
    t0 = time.monotonic()
    ref = launch(args, root / "reference", stall_s)
    if ref.finish() != 0:
        raise RuntimeError(f"the uninterrupted run failed; see {root / 'reference.log'}")
    ref_s = time.monotonic() - t0
    begins = dict((int(line.split()[1]), t) for t, line in ref.lines if "SAVE-BEGIN" in line)
    ends = dict((int(line.split()[1]), t) for t, line in ref.lines if "SAVE-END" in line)
    save_s = sorted(ends[k] - begins[k] for k in ends)[len(ends) // 2]
    starts = sorted(begins.values())
    period_s = (starts[-1] - starts[0]) / max(len(starts) - 1, 1)  # one save and the steps after

    # Increasing target steps, so each kill lands later in the run than the one before. Half
    # the kills aim inside a save; the others land while steps run ("between_saves": after the
    # steps following a save began, so some are logged past the checkpoint) or anywhere.
    targets = sorted(rng.sample(range(2, steps - 2), kills))
    others = ["between_saves", "random"] * kills
    kinds = ["mid_save"] * math.ceil(kills / 2) + others[: kills // 2]
    rng.shuffle(kinds)
    work, events, reported, launches, resumes = root / "killed", [], None, 0, 0
    for target, kind in zip(targets, kinds):
        child = launch(args, work, stall_s)
        launches += 1
        if kind == "mid_save":
            seen = child.wait_for("SAVE-BEGIN", target + 1)
            delay = rng.uniform(0, save_s)
        elif kind == "between_saves":
            seen = child.wait_for("SAVE-END", target)
            delay = rng.uniform(0, max(period_s - save_s, 0.05))
        else:
            seen = child.wait_for("LOGGED", target)
            delay = rng.uniform(0, period_s)
        if seen is None:
            raise RuntimeError(f"the run ended before kill at step {target}; use more --steps")
        time.sleep(max(0.0, seen + delay - time.monotonic()))
        child.kill()
        resumes += bool(child.markers("RESTORED"))
        done = child.markers("SAVE-END") + ([] if reported is None else [reported])
        reported = max(done, default=None)
        event = {"target_step": target, "aimed": kind, "delay_s": round(delay, 3)}
        event["mid_save"] = open_save(child)
        event["last_logged"] = max(child.markers("LOGGED"), default=None)
        events.append({**event, **audit(work / "checkpoints", reported)})
    final = launch(args, work, stall_s)
    launches += 1
    rc = final.finish()
    resumes += bool(final.markers("RESTORED"))
    end = audit(work / "checkpoints", steps)
    lost = sum(len(e["unreadable"]) + e["vanished"] for e in events) + len(end["unreadable"])
    dirs = (work, root / "reference")
    same_log = len({(d / "logs" / "metrics.jsonl").read_text() for d in dirs}) == 1
    return {
        "kills": len(events),
        "kills_mid_save": sum(e["mid_save"] is not None for e in events),
        "launches": launches,
        "resumes": resumes,
        "final_exit": rc,
        "checkpoints_lost": lost + int(end["vanished"]),
        "final_state_equal": rc == 0 and states_equal(*(d / f"checkpoints/{steps}" for d in dirs)),
        "metrics_jsonl_equal": same_log,
        "temporary_dirs_left": end["temporary"],
        "reference_run_s": round(ref_s, 1),
        "median_save_s": round(save_s, 3),
        "checkpoint_period_s": round(period_s, 3),
        "events": events,
    }  # fmt: skip


def bank_kills(root: Path, kills: int, stall_s: float, rng) -> dict:
    import jax
    import numpy as np

    from memr1 import memory as mem

    leaves = jax.tree.leaves

    directory, events, reported = root / "bank", [], -1
    kinds = ["mid_save"] * math.ceil(kills / 2) + ["random"] * (kills // 2)
    rng.shuffle(kinds)
    for kind in kinds:
        env = {**ENV, "DRILL_STALL_S": str(stall_s)}
        cmd = [sys.executable, __file__, "--bank_worker", str(directory), str(reported + 1)]
        child = Child(cmd, root / "bank.log", env)
        first = child.wait_for("SAVE-END", reported + 1)
        if kind == "mid_save":
            seen, delay = child.wait_for("SAVE-BEGIN", reported + 2), rng.uniform(0, stall_s)
        else:
            seen, delay = first, rng.uniform(0, 3 * stall_s)
        time.sleep(max(0.0, seen + delay - time.monotonic()))
        child.kill()
        reported = max(child.markers("SAVE-END"))
        try:
            bank = mem.load_bank(directory)
            k = int(bank.next_id)
            whole = all(np.array_equal(x, y) for x, y in zip(leaves(bank), leaves(tagged_bank(k))))
            ok = whole and k >= reported
        except Exception as err:  # an unreadable bank is exactly what the drill looks for
            k, ok = f"{type(err).__name__}: {err}", False
        events.append({"aimed": kind, "mid_save": open_save(child), "reported": reported,
                       "loaded": k, "ok": ok})  # fmt: skip
        reported = k if isinstance(k, int) else reported
    return {
        "kills": len(events),
        "kills_mid_save": sum(e["mid_save"] is not None for e in events),
        "banks_lost": sum(not e["ok"] for e in events),
        "events": events,
    }


def nonfinite(root: Path, base: list[str]) -> dict:
    """NaN loss at step 3 and inf gradients at step 6 under skip; inf gradients at 3 under stop."""
    from memr1.train.metrics_log import read_jsonl

    args = [*base, "--config.train.steps=8", "--config.train.checkpoint_every=1",
            "--config.train.keep=100"]  # fmt: skip
    skip = launch([*args, "--inject_nonfinite=3:loss,6:grads"], root / "nan_skip", 0)
    skip_rc = skip.finish()
    records = read_jsonl(root / "nan_skip" / "logs" / "metrics.jsonl")
    ck = root / "nan_skip" / "checkpoints"
    # Checkpoint k holds the state after steps 0..k-1: a refused step k leaves k + 1 equal to k,
    # while the good step k - 1 before it moved the weights.
    same = lambda i, j: states_equal(ck / str(i), ck / str(j), only="['params']")
    weights_kept = all(same(k, k + 1) and not same(k - 1, k) for k in (3, 6))
    stop = launch([*args, "--inject_nonfinite=3:grads", "--config.train.on_nonfinite=stop"],
                  root / "nan_stop", 0)  # fmt: skip
    stop_rc = stop.finish()
    stop_log = (root / "nan_stop.log").read_text()
    message = next((line for line in stop_log.splitlines() if "stopped:" in line), "")
    stop_records = read_jsonl(root / "nan_stop" / "logs" / "metrics.jsonl")
    last = audit(root / "nan_stop" / "checkpoints", None)["finalised"]
    return {
        "skip": {
            "exit": skip_rc,
            "steps_logged": len(records),
            "refused_steps": [r["step"] for r in records if r["train/update_refused"] > 0],
            "refused_update_kept_weights": weights_kept,
        },
        "stop": {
            "exit": stop_rc,
            "message": message.strip(),
            "last_logged": stop_records[-1]["step"],
            "last_logged_refused": stop_records[-1]["train/update_refused"] > 0,
            "last_checkpoint": last[-1] if last else None,
        },
    }


def bad_settings(root: Path, base: list[str]) -> list[dict]:
    evaluate = ["-m", "memr1.evaluate", "--config=configs/memr1.py:system=mem0,runlocal"]
    sft = ["-m", "memr1.train", f"--config={TRAIN_CONFIG}", *base]
    manager = TRAIN_CONFIG.replace("sft,stage=answer", "grpo,stage=manager")
    cases = [
        ("mistyped override --config.train.stpes=3", [*sft, "--config.train.stpes=3"], {}),
        ("mesh tensor=3 on 3 devices", [*sft, "--config.mesh.tensor=3"],
         {"XLA_FLAGS": "--xla_force_host_platform_device_count=3"}),
        ("train.checkpoint_every=0", [*sft, "--config.train.checkpoint_every=0"], {}),
        ("manager stage, memory.capacity=0", ["-m", "memr1.train", f"--config={manager}",
         *base[:1], "--tuples=unused", "--config.memory.capacity=0"], {}),
        ("evaluate, memory.capacity=-1", evaluate + ["--config.memory.capacity=-1",
         f"--config.tokenizer_dir={root / 'tok'}", f"--config.data.path={root / 'sft.jsonl'}"], {}),
    ]  # fmt: skip
    out = []
    for i, (name, args, extra) in enumerate(cases):
        workdir = root / f"bad_{i}"
        cmd = [sys.executable, *args]
        t0 = time.monotonic()
        proc = subprocess.run([*cmd, f"--workdir={workdir}"], cwd=REPO, env={**ENV, **extra},
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        reason = next(
            (x for x in reversed(lines) if "error" in x.lower()), lines[-1] if lines else ""
        )
        case = {"case": name, "exit": proc.returncode, "seconds": round(time.monotonic() - t0, 1)}
        case.update(workdir_created=workdir.exists(), reason=reason.strip()[:240])
        out.append(case)
    return out


# -- report --------------------------------------------------------------------------------------


def table(report: dict) -> str:
    t, b, n = report["train_kills"], report["bank_kills"], report["nonfinite"]
    rows = [
        ("SIGKILL of SFT training", f"{t['kills']} ({t['kills_mid_save']} mid-save)",
         f"{t['resumes']} resumes; final state equal: {t['final_state_equal']}; "
         f"metrics.jsonl equal: {t['metrics_jsonl_equal']}",
         f"{t['checkpoints_lost']} checkpoints"),
        ("SIGKILL of bank saves", f"{b['kills']} ({b['kills_mid_save']} mid-save)",
         "latest bank whole and up to date after each kill", f"{b['banks_lost']} banks"),
        ("NaN loss + inf grads, skip", "2 steps",
         f"exit {n['skip']['exit']}, refused {n['skip']['refused_steps']}, weights kept: "
         f"{n['skip']['refused_update_kept_weights']}", "0 steps' updates (by design)"),
        ("inf grads, stop", "1 step", f"exit {n['stop']['exit']}, last checkpoint "
         f"{n['stop']['last_checkpoint']}, refused step logged: {n['stop']['last_logged_refused']}",
         "the run (stopped on purpose)"),
    ]  # fmt: skip
    for case in report["bad_settings"]:
        rows.append((case["case"], "1", f"exit {case['exit']} in {case['seconds']} s, "
                     f"workdir created: {case['workdir_created']}", "-"))  # fmt: skip
    widths = [max(len(str(r[i])) for r in rows) for i in range(3)]
    head = ("injected", "times", "what survived / outcome", "lost")
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, [*widths, 0]))]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, [*widths, 0])) for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        worker(argv[2:] if argv[1:2] == ["--"] else argv[1:])
        return 0
    if argv[:1] == ["--bank_worker"]:
        bank_worker(argv[1], int(argv[2]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=5, help="SIGKILLs of the training run")
    p.add_argument("--bank_kills", type=int, default=6, help="SIGKILLs of bank saves")
    p.add_argument("--steps", type=int, default=24, help="training steps (checkpoint every 2)")
    p.add_argument("--stall_s", type=float, default=0.5, help="extra seconds inside each save")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write the report here")
    p.add_argument("--workdir", type=Path, help="keep the runs here (default: a temp dir)")
    args = p.parse_args(argv)
    if args.steps < 2 * args.kills + 4:
        p.error(f"--steps must be at least 2 * kills + 4 = {2 * args.kills + 4}")
    root = Path(tempfile.mkdtemp(prefix="fault_drill-")) if args.workdir is None else args.workdir
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    t0 = time.monotonic()
    base = prepare(root, args.seed)
    report = {"seed": args.seed, "python": sys.version.split()[0]}
    report["train_kills"] = train_kills(root, base, args.kills, args.steps, args.stall_s, rng)
    report["bank_kills"] = bank_kills(root, args.bank_kills, args.stall_s, rng)
    report["nonfinite"] = nonfinite(root, base)
    report["bad_settings"] = bad_settings(root, base)
    report["wall_s"] = round(time.monotonic() - t0, 1)
    print(table(report))
    print(f"wall time {report['wall_s']} s; runs in {root}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.workdir is None:
        shutil.rmtree(root, ignore_errors=True)
    failed = verdict(report)
    print("drill passed" if not failed else "drill FAILED: " + "; ".join(failed))
    return 0 if not failed else 1


def verdict(report: dict) -> list[str]:
    """What went wrong, in words; empty when every part behaved as required."""
    t, b, n = report["train_kills"], report["bank_kills"], report["nonfinite"]
    checks = {
        "a checkpoint was lost": t["checkpoints_lost"] == 0,
        "the resumed run ended elsewhere": t["final_state_equal"] and t["final_exit"] == 0,
        "metrics.jsonl differs from the uninterrupted run": t["metrics_jsonl_equal"],
        "a bank was lost": b["banks_lost"] == 0,
        "skip mode misbehaved": n["skip"]["exit"] == 0
        and n["skip"]["refused_steps"] == [3, 6]
        and n["skip"]["refused_update_kept_weights"],
        "stop mode misbehaved": n["stop"]["exit"] == 3
        and n["stop"]["last_checkpoint"] == 3
        and n["stop"]["last_logged_refused"],
        "a bad setting was accepted or left a work directory": all(
            c["exit"] != 0 and not c["workdir_created"] for c in report["bad_settings"]
        ),
    }
    return [name for name, ok in checks.items() if not ok]


if __name__ == "__main__":
    sys.exit(main())
