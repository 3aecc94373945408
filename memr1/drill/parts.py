"""The drill's four parts, each in fresh subprocesses of the real command lines.

train_kills  SIGKILLs a tiny SFT run of `python -m memr1.train`, half of the kills inside a
             checkpoint save, resumes it after each, and compares it with an uninterrupted run
bank_kills   SIGKILLs a loop of `memr1.memory.save_bank`, half mid-save, and loads the bank
nonfinite    a NaN loss and inf gradients injected under train.on_nonfinite=skip and =stop
bad_settings settings the CLIs must refuse before any model is loaded
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

from memr1.drill.checks import audit, log_differences, states_equal
from memr1.drill.child import ENV, REPO, Child, open_save

TRAIN_CONFIG = "configs/memr1.py:runlocal,algo=sft,stage=answer"
WORKERS = [sys.executable, "-m", "memr1.drill.workers"]


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
    """The train CLI with markers (`workers.train_worker`), logging to `<workdir>.log`."""
    env = {**ENV, "DRILL_STALL_S": str(stall_s)}
    cmd = [*WORKERS, "train", "--", f"--config={TRAIN_CONFIG}", *args, f"--workdir={workdir}"]
    return Child(cmd, workdir.parent / f"{workdir.name}.log", env)


def _reference(root: Path, args: list[str], stall_s: float) -> dict:
    """The uninterrupted run, and the timings the kills are aimed with."""
    t0 = time.monotonic()
    ref = launch(args, root / "reference", stall_s)
    if ref.finish() != 0:
        raise RuntimeError(f"the uninterrupted run failed; see {root / 'reference.log'}")
    begins, ends = ref.times("SAVE-BEGIN"), ref.times("SAVE-END")
    starts = sorted(begins.values())
    return {
        "run_s": time.monotonic() - t0,
        "save_s": sorted(ends[k] - begins[k] for k in ends)[len(ends) // 2],
        # One save and the steps after it.
        "period_s": (starts[-1] - starts[0]) / max(len(starts) - 1, 1),
    }


def _kill_once(child: Child, target: int, kind: str, timing: dict, rng) -> float:
    """Waits for the moment `kind` aims at past step `target`, kills there; the delay used."""
    save_s, period_s = timing["save_s"], timing["period_s"]
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
    return delay


def train_kills(root: Path, base: list[str], kills: int, steps: int, stall_s: float, rng) -> dict:
    """Kills and resumes the SFT run `kills` times; compares it with an uninterrupted run."""
    args = [*base, f"--config.train.steps={steps}", "--config.train.checkpoint_every=2"]
    timing = _reference(root, args, stall_s)
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
        delay = _kill_once(child, target, kind, timing, rng)
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
    dirs = (root / "reference", work)
    log_diff = log_differences(*(d / "logs" / "metrics.jsonl" for d in dirs))
    return {
        "kills": len(events),
        "kills_mid_save": sum(e["mid_save"] is not None for e in events),
        "launches": launches,
        "resumes": resumes,
        "final_exit": rc,
        "checkpoints_lost": lost + int(end["vanished"]),
        "final_state_equal": rc == 0 and states_equal(*(d / f"checkpoints/{steps}" for d in dirs)),
        "metrics_jsonl_equal": not log_diff,
        "metrics_jsonl_differences": log_diff[:10],
        "temporary_dirs_left": end["temporary"],
        "reference_run_s": round(timing["run_s"], 1),
        "median_save_s": round(timing["save_s"], 3),
        "checkpoint_period_s": round(timing["period_s"], 3),
        "events": events,
    }


def bank_kills(root: Path, kills: int, stall_s: float, rng) -> dict:
    """Kills a loop of bank saves `kills` times; the latest bank must load whole and current."""
    import jax
    import numpy as np

    from memr1 import memory as mem
    from memr1.drill.workers import tagged_bank

    leaves = jax.tree.leaves

    directory, events, reported = root / "bank", [], -1
    kinds = ["mid_save"] * math.ceil(kills / 2) + ["random"] * (kills // 2)
    rng.shuffle(kinds)
    for kind in kinds:
        env = {**ENV, "DRILL_STALL_S": str(stall_s)}
        cmd = [*WORKERS, "bank", str(directory), str(reported + 1)]
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
    """Settings the CLIs must refuse (exit non-zero, naming why) before creating a workdir."""
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
