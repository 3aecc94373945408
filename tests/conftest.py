"""Settings of the whole test run: one persistent XLA compilation cache for every process in it.

Most of the suite's time is XLA compiling the same tiny programs again: in both pytest-xdist
workers, in each `python -m memr1.train / evaluate / tuples` subprocess a test starts, and in the
next run of the suite. JAX's persistent cache lets every one of those processes reuse what
another compiled. It lives in the checkout's `.cache/jax-tests/` (git ignores it, `make clean`
removes it), so a second `make test` in the working loop compiles only what changed. An entry's
key is a hash of the program, the compile options, the XLA flags (`--xla_cpu_max_isa=AVX2`
among them, so a capped and an uncapped run never share an entry), the backend's platform and
the jax/jaxlib versions: an entry is only ever read by a process that would have compiled the
same executable, so nothing a test checks changes, only the time (a test that counts compiles
counts JAX's in-memory jit cache, which a persistent hit fills as a compile does). No size limit is
set: JAX's eviction (`jax_compilation_cache_max_size`) takes a lock shared by every process
and lists the whole cache on each write, which cost this suite ~25% more CPU (2,460 s against
1,974 s) with its ~3,700 entries; a run adds ~60 MB where its programs changed, and `make
clean` (or deleting the folder) empties it.

XLA:CPU's LLVM backend compiles the run's programs at optimisation level 0
(`--xla_backend_optimization_level=0` added to XLA_FLAGS unless they set a level): compiling is
most of the suite's time and level 0 takes about half of it, while the programs XLA optimises
are the same (their optimised HLO, buffer assignment and FLOP counts are identical, so XLA's
memory and FLOP figures the tests read do not move) and only their machine code is less
optimised (a tiny SFT step runs in 3.5 ms instead of 1.5). Values agree bitwise or to the last
bit of float32 (LLVM fuses fewer multiply-adds). `XLA_FLAGS=--xla_backend_optimization_level=3
make test` runs the suite on the optimised code a user's run compiles.

MEMR1_TEST_COMPILE_CACHE=run keeps the cache for this run only (under pytest's base temp: what a
fresh clone and CI measure), =0 turns it off; a run that sets JAX_COMPILATION_CACHE_DIR itself
keeps its own setting. The settings travel as environment variables: the xdist workers (started
after this hook) and every subprocess inherit them, and JAX reads them when it is imported.

The order of the files: `--dist loadfile` hands each worker one file at a time from a queue that
pytest-xdist sorts by the number of tests in a file, so the end-to-end files (one or two tests of
minutes each: the quick demo, the launch script, the CLIs) came last and one worker ran them
alone at the end. Here the files with slow-marked tests go first, the others after them (most
tests first, as xdist would), so the short files fill both workers' time while the long ones run.
A file of one or two tests that still compiles for ~20 s (not slow: `make test-fast` runs it) is
marked `queue_early` and goes right after the slow files: by test count it came last, and one
worker ran it alone at the end (test_remat_memory and test_lora_cli_export, ~45 CPU s together:
~5 s of the suite's wall time, from the per-file CPU of a run replayed on two workers).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import pytest

CACHE_ENV = {
    # Cache every program: the suite's are small, each compiles in well under JAX's default 1 s.
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
}
ROOT = Path(__file__).resolve().parents[1]
OPT_LEVEL = "--xla_backend_optimization_level"


@pytest.hookimpl(trylast=True)  # after pytest's tmp_path plugin has set up the base temp
def pytest_configure(config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # xdist's queue keeps the order below
        config.option.loadscopereorder = False
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller has set the environment it inherited
    flags = os.environ.get("XLA_FLAGS", "").split()
    if not any(f.split("=")[0] == OPT_LEVEL for f in flags):  # read when XLA's backend starts
        os.environ["XLA_FLAGS"] = " ".join([*flags, f"{OPT_LEVEL}=0"])
    mode = os.environ.get("MEMR1_TEST_COMPILE_CACHE", "1")
    if mode not in ("0", "1", "run"):
        raise pytest.UsageError(f"MEMR1_TEST_COMPILE_CACHE={mode!r}: expected 1, run or 0")
    if mode == "0" or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    if mode == "run":
        factory = getattr(config, "_tmp_path_factory", None)  # pytest's own; xdist uses it too
        base = factory.getbasetemp() if factory is not None else Path(tempfile.mkdtemp())
        cache = base / "jax-compilation-cache"
    else:
        cache = ROOT / ".cache" / "jax-tests"
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(cache)
    for key, value in CACHE_ENV.items():
        os.environ.setdefault(key, value)
    if "jax" in sys.modules:  # imported by a plugin before this hook: its config read the env
        import jax

        jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def pytest_collection_modifyitems(config, items) -> None:
    """Files with a slow-marked test first (in collection order), then those marked queue_early,
    then the rest, most tests first; each file's own tests keep their order. Every worker
    computes the same order."""
    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::")[0], []).append(item)

    def marked(name: str) -> set[str]:
        return {f for f, tests in by_file.items() if any(t.get_closest_marker(name) for t in tests)}

    slow, early = marked("slow"), marked("queue_early")
    first = slow | early
    order = sorted(
        by_file,
        key=lambda f: (f not in slow, f not in early, 0 if f in first else -len(by_file[f])),
    )
    items[:] = [item for f in order for item in by_file[f]]


def _cpu_seconds() -> float:
    """User + system CPU of this process and of the subprocesses it has waited for."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With MEMR1_TEST_TIMES=DIR, appends each test's wall and CPU seconds (setup, call and
    teardown; the CPU of the subprocesses it ran included) to DIR/<worker>.jsonl. CPU time is
    what a test costs the machine whatever else runs beside it: wall times on a shared machine
    are not comparable, CPU seconds are (tools/bench/suite_times.py sums them per file)."""
    out = os.environ.get("MEMR1_TEST_TIMES")
    if not out:
        yield
        return
    wall, cpu = time.perf_counter(), _cpu_seconds()
    yield
    record = {
        "test": item.nodeid,
        "wall_s": time.perf_counter() - wall,
        "cpu_s": _cpu_seconds() - cpu,
    }
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(out).mkdir(parents=True, exist_ok=True)
    with open(Path(out) / f"{worker}.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
