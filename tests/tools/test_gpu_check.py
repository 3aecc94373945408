"""tools/gpu_check.sh: the one-command GPU check. Its dry run (tiny sizes, CPU, HF included) goes
through the whole pipeline and writes the one JSON; without a GPU it stops with a named reason;
the benches run with the packages the lent machine lacks made unimportable; carried wheels are
installed only for what is missing; the summaries pick the right rows and judge the goals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from argparse import Namespace
from pathlib import Path

import pytest

from tests.tool import load_tool

# Compiles models or runs whole commands: tens of seconds on 2 cores (make test-fast skips it).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_check.sh"


def _script(args, tmp_path, timeout=60, **env):
    run_env = {**os.environ, "MEMR1_PYTHON": sys.executable, **env}
    run_env.setdefault("MEMR1_GPU_CHECK_WHEELS", str(tmp_path / "no-wheels"))
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=run_env, capture_output=True, text=True,
        timeout=timeout, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.slow
def test_dry_run_writes_one_json_of_both_benches(tmp_path):
    out = tmp_path / "out" / "gpu_check.json"
    proc = _script(["--out", str(out)], tmp_path, timeout=900, MEMR1_GPU_CHECK_DRY="1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mode"] == "dry-run" and report["ok"] and report["errors"] == []
    assert report["versions"]["jax"] and report["versions"]["torch"]
    for name in ("generate", "train"):
        bench = report["benches"][name]
        assert bench["returncode"] == 0 and "report" in bench
        assert (out.parent / bench["log"]).read_text(), f"{name}'s log is empty"
    rollout = report["rollout"]
    assert (rollout["batch"], rollout["prompt_len"], rollout["new_tokens"]) == (4, 8, 4)
    for side in ("memr1", "hf"):
        assert rollout[side]["new_tok_per_s"] > 0
    assert rollout["memr1"]["engine"] == "memr1"
    assert rollout["hf"]["engine"].startswith("hf-transformers")
    ratio = rollout["memr1"]["new_tok_per_s"] / rollout["hf"]["new_tok_per_s"]
    assert rollout["ratio_memr1_over_hf"]["new_tok_per_s"] == pytest.approx(ratio)
    # bf16 weights on both sides: the copy into HF is exact up to bf16 arithmetic.
    assert rollout["max_logit_gap"] < 0.1
    # A G > 1 rollout's tokens scored by the trainer: bf16 rounding only (float32: ~1e-7).
    gap = rollout["logprob_gap"]
    assert gap["samples"] >= 2 and gap["tokens"] > 0 and 0 <= gap["mean"] < 1e-2
    update = report["update"]
    assert (update["batch"], update["length"], update["peak_tflops"]) == (4, 16, 989.0)
    for side in ("memr1", "hf"):
        s = update[side]
        assert s["tok_per_s"] > 0 and s["mfu"] == pytest.approx(
            6 * report["benches"]["train"]["report"]["n_params"] * s["tok_per_s"] / 989e12
        )
    assert update["loss_check"]["ok"]
    # The compared loss is far from zero (bench_train.make_batch), so its relative tolerance
    # measures the two steps' agreement, not rounding noise around zero.
    assert abs(update["loss_check"]["loss"]["torch"]) > 0.05
    assert update["memr1"]["compile_s"] > 0 and update["memr1"]["xla_temp_bytes"] > 0
    for goal in (rollout["goal"], update["goal"]):
        assert goal["met"] is None and goal["target"] and goal["hf_reference"]
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "gpu_check.generate.log", "gpu_check.json", "gpu_check.train.log",
    ]  # fmt: skip
    assert "goal >= 15,000 new tok/s" in proc.stdout and "goal >= 50% MFU" in proc.stdout


def test_without_a_gpu_it_stops_naming_the_reason(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed: no driver' >&2\nexit 9\n")
    smi.chmod(0o755)
    path = f"{fake}:{os.environ['PATH']}"
    proc = _script(["--out", str(tmp_path / "r.json")], tmp_path, PATH=path)
    assert proc.returncode == 3, proc.stderr
    assert "no GPU: nvidia-smi lists no GPU (NVIDIA-SMI has failed: no driver)" in proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_nvidia_smi_missing_is_named(monkeypatch):
    tool = load_tool("gpu_check")
    monkeypatch.setattr(tool.shutil, "which", lambda name: None)
    with pytest.raises(tool.NoGPU, match="nvidia-smi is not on PATH"):
        tool.find_gpu()


def test_env_switch_selects_the_dry_run(tmp_path):
    proc = _script(["--preflight"], tmp_path, MEMR1_GPU_CHECK_DRY="1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["mode"] == "dry-run"


def test_benches_run_without_the_packages_the_device_lacks(tmp_path, monkeypatch):
    # nltk and scann are installed here; a bench run by the check must not see them.
    probe = tmp_path / "bench_probe.py"
    probe.write_text(
        textwrap.dedent("""
        import importlib.util
        import sys
        try:
            import nltk  # noqa: F401
            print("nltk imported")
        except ModuleNotFoundError:
            print("nltk blocked")
        print("scann spec", importlib.util.find_spec("scann"))
        print("args", sys.argv[1:])
        """)
    )
    code = (
        "import sys; from pathlib import Path; from tests.tool import load_tool; "
        f"tool = load_tool('gpu_check'); tool.BENCHES = Path({str(tmp_path)!r}); "
        "tool.main(['bench', 'probe', '--x', '1'])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["nltk blocked", "scann spec None", "args ['--x', '1']"]


def _wheel(folder: Path, dist: str, version: str, module: str) -> Path:
    """A minimal pure-Python wheel holding `module/__init__.py`."""
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": "VALUE = 1\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(f"{info}/RECORD", record)
    return path


def test_only_missing_carried_wheels_are_installed(tmp_path):
    wheels = tmp_path / "whl"
    wheels.mkdir()
    _wheel(wheels, "gpucheck_probe", "1.0", "gpucheck_probe")
    _wheel(wheels, "numpy", "0.0.1", "numpy")  # installed here: must not shadow the real one
    site = tmp_path / "site"
    proc = _script(
        ["--preflight", "--dry-run"], tmp_path, timeout=120,
        MEMR1_GPU_CHECK_WHEELS=str(wheels), MEMR1_GPU_CHECK_SITE=str(site),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "numpy is already installed; not installing numpy-0.0.1" in proc.stdout
    assert "installing 1 carried wheel(s)" in proc.stdout
    assert (site / "gpucheck_probe" / "__init__.py").exists()
    assert not (site / "numpy").exists()
    assert json.loads(proc.stdout[proc.stdout.index("{") :])["versions"]["numpy"] != "0.0.1"


def _generate_report(hf_rows):
    common = {"batch": 64, "samples": 1}
    rows = [{"engine": "memr1", **common, "new_tok_per_s": 16_000.0,
             "peak_device_bytes": 30 * 2**30, "compile_s": 40.0}]  # fmt: skip
    for name, value in hf_rows:
        rows.append({"engine": name, **common, "new_tok_per_s": value,
                     "peak_device_bytes": 10 * 2**30, "max_logit_gap": 0.01})  # fmt: skip
    return {"model": "qwen2.5-3b", "prompt_len": 512, "new_tokens": 128, "rows": rows}


def _train_report(mfu, ok=True):
    return {
        "model": "qwen2.5-3b", "batch": 8, "length": 1024, "args": {"peak_tflops": 989.0},
        "rows": [
            {"engine": "memr1 (JAX)", "tok_per_s": 30_000.0, "mfu": mfu,
             "peak_device_bytes": 60 * 2**30, "compile_s": 90.0, "xla_memory": {"temp": 5}},
            {"engine": "PyTorch + transformers", "tok_per_s": 12_000.0, "mfu": 0.3,
             "peak_device_bytes": 40 * 2**30},
        ],
        "loss_check": {"ok": ok},
    }  # fmt: skip


def test_summaries_pick_the_fastest_peer_and_judge_the_goals():
    tool = load_tool("gpu_check")
    rollout = tool.rollout_summary(
        _generate_report([("hf-transformers (1 thr)", 500.0), ("hf-transformers (2 thr)", 800.0)]),
        gpu=True,
    )
    assert rollout["hf"]["engine"] == "hf-transformers (2 thr)"
    assert rollout["ratio_memr1_over_hf"] == {"new_tok_per_s": 20.0, "peak_device_bytes": 3.0}
    assert rollout["goal"]["met"] is True and rollout["goal"]["hf_reference"] == 644.0
    update = tool.update_summary(_train_report(mfu=0.45), gpu=True)
    assert update["ratio_memr1_over_hf"] == {"tok_per_s": 2.5, "peak_device_bytes": 1.5}
    assert update["goal"]["met"] is False and update["goal"]["target"] == 0.5
    assert update["memr1"]["xla_temp_bytes"] == 5
    assert tool.update_summary(_train_report(mfu=0.5), gpu=True)["goal"]["met"] is True
    assert tool.update_summary(_train_report(mfu=0.6), gpu=False)["goal"]["met"] is None


def test_a_failed_bench_or_a_loss_mismatch_makes_the_report_fail():
    tool = load_tool("gpu_check")
    benches = {
        "generate": {"returncode": None, "error": "bench_generate ran past its limit of 180 s"},
        "train": {"returncode": 1, "report": _train_report(mfu=0.6, ok=False)},
    }
    report = tool.build_report(Namespace(mode="gpu"), benches, ["NVIDIA H200"], 200.0)
    assert report["ok"] is False and report["rollout"] is None
    assert report["errors"] == [
        "generate: bench_generate ran past its limit of 180 s",
        "train: memr1's and PyTorch's first steps disagree (see update.loss_check)",
    ]
    assert report["update"]["goal"]["met"] is True and report["within_budget"] is True


def test_a_bench_that_fails_or_overruns_is_named_in_its_record(tmp_path, monkeypatch):
    tool = load_tool("gpu_check")
    monkeypatch.setitem(tool.BENCH_ARGS["dry-run"], "generate", ["--new-tokens", "1"])
    args = Namespace(mode="dry-run", out=tmp_path / "r.json", timeouts={"generate": 300})
    record = tool.run_bench("generate", args, tmp_path)
    assert record["returncode"] == 2 and "report" not in record
    assert record["error"] == (
        "bench_generate exited with status 2: "
        "bench_generate.py: error: --new-tokens must be at least 2 to time decode steps"
    )
    assert "--new-tokens must be at least 2" in (tmp_path / "r.generate.log").read_text()
    args.timeouts = {"train": 0.5}  # killed while it imports
    record = tool.run_bench("train", args, tmp_path)
    assert record["returncode"] is None
    assert record["error"] == "bench_train ran past its limit of 0.5 s and was killed"
