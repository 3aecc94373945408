#!/usr/bin/env bash
# The main sweep: every run of configs/memr1.py's sweep() (each paper backbone x {ppo, grpo}).
#
#   MEMR1_SWEEP_DIR=/runs/sweep MEMR1_HF_ROOT=/ckpt MEMR1_LOCOMO=/data/locomo10.json \
#   experiments/sweep.sh [STAGE ...]
#
# The tuples are built once into $MEMR1_SWEEP_DIR/tuples (they do not depend on the backbone);
# then each run "backbone=B,algo=A" goes through STAGE ... (default: answer manager evaluate
# export) with the runner, in $MEMR1_SWEEP_DIR/B (answer-A, manager-A, eval-A, export/ inside).
# Every stage is resumable (see gpu_node.sh), so rerunning the sweep continues where it stopped.
#
# Required:
#   MEMR1_SWEEP_DIR  where the sweep's runs go
#   MEMR1_HF_ROOT    holds one local HF checkpoint per backbone, named by its memr1 size name:
#                    $MEMR1_HF_ROOT/qwen2.5-7b, $MEMR1_HF_ROOT/llama3.1-8b, ... (symlinks are fine)
#   MEMR1_LOCOMO     LoCoMo's locomo10.json
# Optional:
#   MEMR1_RUNNER     default experiments/gpu_node.sh (experiments/tpu_pod.sh on a pod slice, where
#                    the sweep itself then runs on every host)
#   MEMR1_ONLY       an extended regex; only runs whose arg string matches, e.g. 'qwen2.5-(3|7)b'
#   MEMR1_KEEP_GOING=1  go on after a failed run and list the failures at the end
#   MEMR1_PYTHON, MEMR1_DRY_RUN and the other MEMR1_* settings of gpu_node.sh pass through.
set -euo pipefail
shopt -s inherit_errexit

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PROG=$(basename "$0")
PY=${MEMR1_PYTHON:-$REPO/.venv/bin/python}
RUNNER=${MEMR1_RUNNER:-$HERE/gpu_node.sh}

die() {
  echo "$PROG: error: $*" >&2
  exit 2
}

for var in MEMR1_SWEEP_DIR MEMR1_HF_ROOT MEMR1_LOCOMO; do
  [[ -n ${!var:-} ]] || die "$var is not set (see the header of $0)"
done
[[ -d $MEMR1_HF_ROOT ]] || die "MEMR1_HF_ROOT=$MEMR1_HF_ROOT is not a directory"
[[ -f $MEMR1_LOCOMO ]] || die "MEMR1_LOCOMO=$MEMR1_LOCOMO is not a file"
(($# > 0)) || set -- answer manager evaluate export

# The sweep's arg strings, one per line, straight from the config file.
listing=$(cd "$REPO" && "$PY" -c 'from configs.memr1 import sweep; print("\n".join(sweep()))')
runs=()
while IFS= read -r arg; do
  [[ -z $arg ]] && continue
  if [[ -n ${MEMR1_ONLY:-} && ! $arg =~ $MEMR1_ONLY ]]; then continue; fi
  runs+=("$arg")
done <<<"$listing"
((${#runs[@]} > 0)) || die "no sweep run matches MEMR1_ONLY='${MEMR1_ONLY:-}'"

# "backbone=B,algo=A" -> B and A; any other key would change the run in a way this script does
# not pass on, so it is refused rather than ignored.
parse() {
  local arg=$1 item key value backbone="" algo="" items
  IFS=, read -r -a items <<<"$arg"
  for item in "${items[@]}"; do
    key=${item%%=*}
    value=${item#*=}
    case $key in
    backbone) backbone=$value ;;
    algo) algo=$value ;;
    *) die "sweep run '$arg': key '$key' is not handled by $PROG" ;;
    esac
  done
  [[ -n $backbone && -n $algo ]] || die "sweep run '$arg' lacks backbone= or algo="
  echo "$backbone $algo"
}

# Check every run before starting any, so a missing checkpoint fails now rather than hours in.
# (parse's output is captured first: a failure inside a here-string would go unnoticed.)
for arg in "${runs[@]}"; do
  parsed=$(parse "$arg")
  read -r backbone algo <<<"$parsed"
  [[ -d $MEMR1_HF_ROOT/$backbone ]] ||
    die "run '$arg' needs the HF checkpoint $MEMR1_HF_ROOT/$backbone (a directory or symlink)"
done

export MEMR1_TUPLES=$MEMR1_SWEEP_DIR/tuples
export MEMR1_VAL_TUPLES=$MEMR1_SWEEP_DIR/tuples-validation
if [[ ! -d $MEMR1_TUPLES || ! -d $MEMR1_VAL_TUPLES ]]; then
  # Built through the runner with both unset, so that it builds (what is missing) rather than
  # reuses; with MEMR1_EVAL_EVERY=0 it builds no validation tuples, and the runs read none.
  env -u MEMR1_TUPLES -u MEMR1_VAL_TUPLES MEMR1_RUN_DIR="$MEMR1_SWEEP_DIR" "$RUNNER" tuples
fi

failed=()
for arg in "${runs[@]}"; do
  parsed=$(parse "$arg")
  read -r backbone algo <<<"$parsed"
  echo "==== $arg ===="
  status=0
  MEMR1_BACKBONE=$backbone MEMR1_ALGO=$algo MEMR1_HF_DIR=$MEMR1_HF_ROOT/$backbone \
    MEMR1_RUN_DIR=$MEMR1_SWEEP_DIR/$backbone "$RUNNER" "$@" || status=$?
  if ((status != 0)); then
    [[ ${MEMR1_KEEP_GOING:-0} == 1 ]] || exit "$status"
    failed+=("$arg (exit $status)")
  fi
done
if ((${#failed[@]} > 0)); then
  printf '%s: failed: %s\n' "$PROG" "${failed[@]}" >&2
  exit 1
fi
echo "sweep done: ${#runs[@]} runs in $MEMR1_SWEEP_DIR"
