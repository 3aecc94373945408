#!/usr/bin/env bash
# The GPU check in one process: memr1's rollout (32 prompts x G = 2, new tokens/s), the
# sampler-vs-trainer log-prob gap of that rollout on GRPO's packed path, and one GRPO update on it
# (MFU over the real tokens, beside XLA's FLOPs/s), at the Qwen2.5-3B shape with random bf16
# weights, on one 80 GB GPU, in under 7 minutes. tools/gpu_check.py does the work and documents the
# JSON, which it rewrites after every phase.
#
#   tools/gpu_check.sh [--out FILE]          # on a GPU machine (default $OUT/gpu_check.json)
#   tools/gpu_check.sh --dry-run [--out F]   # the same code, tiny sizes, CPU (also
#                                            # MEMR1_GPU_CHECK_DRY=1); tests/tools runs it
#   tools/gpu_check.sh --preflight           # versions and the device only
#
# Where JAX sees no GPU it exits 3 naming the reason, unless dry.
#
# The lent machine (Python 3.12 with its own jax, 0.11 with CUDA 13 when last seen, and flax;
# no network) cannot `pip install -e .` (memr1 pins jax 0.10.2), so memr1 is used from this
# checkout through PYTHONPATH, and nothing else is installed except wheels carried in the
# git-ignored folder .whl/ (64 MiB a call at most), and of those only the distributions that
# python3 does not already have (MEMR1_GPU_CHECK_FORCE_WHEELS=1 installs every one, to override
# the image's version). The check imports nothing the image lacks, so .whl/ may stay empty. A
# session with a lent GPU calls the device tool's run with
#   command: bash tools/gpu_check.sh      carry: [".whl"] (only if .whl/ holds wheels)
#   timeout_s: 480
# and copies the numbers from the returned gpu_check.json into docs/benchmarks.md.
#
# Environment: MEMR1_PYTHON (default python3), MEMR1_GPU_CHECK_WHEELS (default <repo>/.whl),
# MEMR1_GPU_CHECK_SITE (where carried wheels go; default /tmp/memr1-gpu-check-site).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${MEMR1_PYTHON:-python3}
WHEELS=${MEMR1_GPU_CHECK_WHEELS:-$REPO/.whl}
SITE=${MEMR1_GPU_CHECK_SITE:-/tmp/memr1-gpu-check-site}

die() {
  echo "gpu_check.sh: error: $*" >&2
  exit 2
}

command -v "$PY" >/dev/null || die "no Python interpreter '$PY' (set MEMR1_PYTHON)"

# ---- carried wheels: install only the distributions python3 lacks ------------------------------
shopt -s nullglob
carried=("$WHEELS"/*.whl)
install=()
for wheel in "${carried[@]}"; do
  dist=$(basename "$wheel")
  dist=${dist%%-*} # NAME-VERSION-...whl
  if [[ ${MEMR1_GPU_CHECK_FORCE_WHEELS:-0} == 1 ]] ||
    ! "$PY" -c 'import importlib.metadata as m, sys; m.version(sys.argv[1])' "$dist" 2>/dev/null; then
    install+=("$wheel")
  else
    echo "gpu_check.sh: $dist is already installed; not installing $(basename "$wheel")"
  fi
done
if ((${#install[@]})); then
  echo "gpu_check.sh: installing ${#install[@]} carried wheel(s) into $SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "${install[@]}" || die "pip could not install the wheels of $WHEELS"
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
fi

# memr1 from this checkout, ahead of anything installed.
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
exec "$PY" "$REPO/tools/gpu_check.py" "$@"
