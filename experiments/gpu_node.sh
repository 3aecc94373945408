#!/usr/bin/env bash
# The Memory-R1 recipe on one node: tuples -> Answer Agent -> Memory Manager -> evaluate -> export.
#
#   MEMR1_LOCOMO=/data/locomo10.json MEMR1_HF_DIR=/ckpt/Qwen2.5-7B-Instruct \
#   MEMR1_RUN_DIR=/runs/qwen7b experiments/gpu_node.sh [STAGE ...]
#
# STAGE is any of: tuples answer manager evaluate export (default: all five, in that order).
# Every stage is its own process and is skipped when its output is already complete, so the
# script can be rerun after a failure or a pre-emption; the two training stages also resume
# from their last checkpoint. A scheduler can submit one job per stage with the same
# environment. Logs go to $MEMR1_RUN_DIR/logs/<stage>.log. Nothing is downloaded: the
# checkpoint, the data and the sentence encoder (the pinned MiniLM package) must be local.
# experiments/tpu_pod.sh runs the same stages on every host of a TPU pod slice.
#
# Required (only for the stages that use them):
#   MEMR1_RUN_DIR     where tuples, runs, evaluation and exports go (created if missing)
#   MEMR1_LOCOMO      LoCoMo's locomo10.json (tuples, evaluate)
#   MEMR1_HF_DIR      local HF checkpoint of the backbone (answer, manager, evaluate, export)
# Optional:
#   MEMR1_BACKBONE    memr1 size name matching MEMR1_HF_DIR (default qwen2.5-7b)
#   MEMR1_ALGO        grpo | ppo (default grpo)
# The training settings are configs/memr1.py's recipe=paper (see experiments/README.md); these
# override it when set:
#   MEMR1_MESH        data,fsdp,tensor (recipe: 1,-1,1, every device on the FSDP axis)
#   MEMR1_MICRO_ROWS  rows per data x fsdp shard per micro-batch (recipe: 1; the paper used 2)
#   MEMR1_BATCH       prompts per update (recipe: 128); MEMR1_GROUP G (default 8)
#   MEMR1_STEPS       updates per stage; MEMR1_MAX_RESPONSE both agents' reply budget (2048),
#                     in training, the manager stage's reward and evaluation
#   MEMR1_TUPLES      an existing tuples folder to use instead of building one
#   MEMR1_VAL_TUPLES  the same for the validation tuples (default: built from LoCoMo's
#                     validation split, conv-30, into $MEMR1_RUN_DIR/tuples-validation)
#   MEMR1_EVAL_EVERY  validate every this many steps, before the first and after the last
#                     (recipe: 10; 0 = off). Validating keeps each stage's best checkpoint,
#                     and the later stages then load DIR:best instead of the latest step
#   MEMR1_TEACHER_HF_DIR  build manager banks with this local teacher model (default: the
#                     dataset's own observations, no model)
#   MEMR1_JUDGE_URL / MEMR1_JUDGE_MODEL  an OpenAI-compatible judge for the J score
#   MEMR1_TRAIN_ARGS / MEMR1_EVAL_ARGS   extra flags, e.g. "--config.train.kl_beta=0.01"
#   MEMR1_PYTHON      interpreter (default: the repository's .venv/bin/python)
#   MEMR1_LOG_SUFFIX  appended to log names (tpu_pod.sh: one log per host)
#   MEMR1_DRY_RUN=1   print the commands instead of running them
set -euo pipefail
shopt -s inherit_errexit # a failure inside $(...) stops the script too

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROG=$(basename "$0")
STAGES=(tuples answer manager evaluate export)

die() {
  echo "$PROG: error: $*" >&2
  exit 2
}

# need VAR "what it is": stops with a message naming the variable when it is unset or empty.
need() {
  [[ -n "${!1:-}" ]] || die "$1 is not set: $2"
}

need_path() {
  need "$1" "$2"
  [[ -e "${!1}" ]] || die "$1=${!1} does not exist ($2)"
}

# ---- settings ---------------------------------------------------------------------------------
PY=${MEMR1_PYTHON:-$REPO/.venv/bin/python}
BACKBONE=${MEMR1_BACKBONE:-qwen2.5-7b}
ALGO=${MEMR1_ALGO:-grpo}
DRY_RUN=${MEMR1_DRY_RUN:-0}
[[ $ALGO == grpo || $ALGO == ppo ]] || die "MEMR1_ALGO=$ALGO: expected grpo or ppo"

if (($# == 0)); then set -- "${STAGES[@]}"; fi
for stage in "$@"; do
  [[ " ${STAGES[*]} " == *" $stage "* ]] || die "unknown stage '$stage' (stages: ${STAGES[*]})"
done

need MEMR1_RUN_DIR "the run directory (tuples, checkpoints, results and exports go there)"
RUN=$MEMR1_RUN_DIR
TUPLES=${MEMR1_TUPLES:-$RUN/tuples}
VAL_TUPLES=${MEMR1_VAL_TUPLES:-$RUN/tuples-validation}
EVAL_EVERY=${MEMR1_EVAL_EVERY:-}
[[ -z $EVAL_EVERY || $EVAL_EVERY =~ ^[0-9]+$ ]] ||
  die "MEMR1_EVAL_EVERY=$EVAL_EVERY: expected an integer >= 0"
# Validation is on unless MEMR1_EVAL_EVERY=0 (the recipe's train.eval_every otherwise). Which
# step of a trained stage the later stages load: its best validated one, or the latest.
VALIDATE=1
if [[ $EVAL_EVERY =~ ^0+$ ]]; then VALIDATE=0; fi
PICK=""
if ((VALIDATE)); then PICK=":best"; fi
ANSWER_RUN=$RUN/answer-$ALGO
MANAGER_RUN=$RUN/manager-$ALGO
EVAL_DIR=$RUN/eval-$ALGO
EXPORT_DIR=$RUN/export

# run STAGE CMD...: runs (or prints) one stage's command, teeing its output to the stage's log.
run() {
  local log=$RUN/logs/$1${MEMR1_LOG_SUFFIX:-}.log
  shift
  if [[ $DRY_RUN == 1 ]]; then
    printf '%q ' "$@"
    echo
    return 0
  fi
  mkdir -p "$(dirname "$log")"
  echo "[$(date -u +%FT%TZ)] $*" >>"$log"
  "$@" 2>&1 | tee -a "$log"
}

# The paper's training recipe (configs/memr1.py recipe=paper: lr, batch, temperature, budgets,
# remat, and micro-batches sized from the mesh at run time), plus the MEMR1_* overrides that are
# set. Python owns every number; this only passes the user's choices on.
train_flags() {
  local stage=$1 data fsdp tensor
  local flags=(
    --config "$REPO/configs/memr1.py:backbone=$BACKBONE,algo=$ALGO,stage=$stage,dataset=locomo,recipe=paper"
  )
  if [[ -n ${MEMR1_MESH:-} ]]; then
    IFS=, read -r data fsdp tensor <<<"$MEMR1_MESH"
    [[ -n $tensor ]] || die "MEMR1_MESH=$MEMR1_MESH: expected data,fsdp,tensor (e.g. 1,-1,1)"
    flags+=(--config.mesh.data="$data" --config.mesh.fsdp="$fsdp" --config.mesh.tensor="$tensor")
  fi
  if [[ -n ${MEMR1_MICRO_ROWS:-} ]]; then flags+=(--config.train.micro_rows="$MEMR1_MICRO_ROWS"); fi
  if [[ -n ${MEMR1_BATCH:-} ]]; then flags+=(--config.train.batch_size="$MEMR1_BATCH"); fi
  if [[ -n ${MEMR1_GROUP:-} ]]; then flags+=(--config.train.group_size="$MEMR1_GROUP"); fi
  if [[ -n ${MEMR1_STEPS:-} ]]; then flags+=(--config.train.steps="$MEMR1_STEPS"); fi
  budget_flags
  printf '%s\n' "${flags[@]}"
}

# Each agent's one reply budget (recipe=paper: 2,048), set alike for its training, the manager
# stage's reward (the frozen Answer Agent) and evaluation: appends to the caller's `flags`.
budget_flags() {
  if [[ -n ${MEMR1_MAX_RESPONSE:-} ]]; then
    flags+=(--config.agents.answer_max_new_tokens="$MEMR1_MAX_RESPONSE"
      --config.agents.manager_max_new_tokens="$MEMR1_MAX_RESPONSE")
  fi
}

# ---- stages -------------------------------------------------------------------------------------
# build_tuples SPLIT OUT VAR: the tuples of one split of the config's 1:1:8 split by
# conversation (train: conv-26, validation: conv-30), unless VAR names an existing folder.
build_tuples() {
  local split=$1 out=$2 var=$3
  if [[ -n ${!var:-} ]]; then
    need_path "$var" "a tuples folder from python -m memr1.tuples"
    echo "tuples: using $out"
    return 0
  fi
  # The tool writes into a temporary folder and renames it, so an existing folder is complete.
  if [[ -d $out ]]; then
    echo "tuples: $out exists, skipped"
    return 0
  fi
  need_path MEMR1_LOCOMO "LoCoMo's locomo10.json"
  local extra=()
  if [[ -n ${MEMR1_TEACHER_HF_DIR:-} ]]; then
    need_path MEMR1_TEACHER_HF_DIR "a local HF checkpoint of the teacher manager"
    extra=(--config.tuples.builder=teacher --hf_dir "$MEMR1_TEACHER_HF_DIR")
  fi
  run tuples "$PY" -m memr1.tuples \
    --config "$REPO/configs/memr1.py:backbone=$BACKBONE,dataset=locomo" \
    --config.data.path="$MEMR1_LOCOMO" --config.data.split="$split" "${extra[@]}" --out "$out"
}

stage_tuples() {
  build_tuples train "$TUPLES" MEMR1_TUPLES
  if ((VALIDATE)); then build_tuples validation "$VAL_TUPLES" MEMR1_VAL_TUPLES; fi
}

# train STAGE WORKDIR [FLAGS...]: one agent, resumed from its checkpoints, marked DONE at the end.
train() {
  local stage=$1 workdir=$2
  shift 2
  if [[ -f $workdir/DONE ]]; then
    echo "$stage: $workdir/DONE exists, skipped"
    return 0
  fi
  need_path MEMR1_HF_DIR "the local HF checkpoint of $BACKBONE"
  [[ -d $TUPLES || $DRY_RUN == 1 ]] || die "no tuples at $TUPLES: run the tuples stage first"
  local text flags
  text=$(train_flags "$stage") # not mapfile < <(...): its failure would go unnoticed
  mapfile -t flags <<<"$text"
  if ((VALIDATE)); then
    [[ -d $VAL_TUPLES || $DRY_RUN == 1 ]] ||
      die "no validation tuples at $VAL_TUPLES: run the tuples stage first (or MEMR1_EVAL_EVERY=0)"
    flags+=(--val_tuples "$VAL_TUPLES")
  fi
  if [[ -n $EVAL_EVERY ]]; then flags+=(--config.train.eval_every="$EVAL_EVERY"); fi
  # shellcheck disable=SC2086  # MEMR1_TRAIN_ARGS is a list of flags
  run "$stage" "$PY" -m memr1.train "${flags[@]}" --hf_dir "$MEMR1_HF_DIR" \
    --tuples "$TUPLES" --workdir "$workdir" "$@" ${MEMR1_TRAIN_ARGS:-}
  [[ $DRY_RUN == 1 ]] || date -u +%FT%TZ >"$workdir/DONE"
}

stage_answer() {
  train answer "$ANSWER_RUN"
}

stage_manager() {
  # The Answer Agent trained above stays frozen and supplies the manager's reward.
  [[ -f $ANSWER_RUN/DONE || $DRY_RUN == 1 ]] ||
    die "the Answer Agent is not trained yet ($ANSWER_RUN/DONE missing): run the answer stage"
  train manager "$MANAGER_RUN" --answer_checkpoint "$ANSWER_RUN/checkpoints$PICK"
}

stage_evaluate() {
  if [[ -f $EVAL_DIR/results.json ]]; then
    echo "evaluate: $EVAL_DIR/results.json exists, skipped"
    return 0
  fi
  need_path MEMR1_LOCOMO "LoCoMo's locomo10.json"
  need_path MEMR1_HF_DIR "the local HF checkpoint of $BACKBONE"
  local judge=()
  if [[ -n ${MEMR1_JUDGE_URL:-} ]]; then
    need MEMR1_JUDGE_MODEL "the judge model's name at MEMR1_JUDGE_URL"
    judge=(--config.judge.kind=openai --config.judge.base_url="$MEMR1_JUDGE_URL"
      --config.judge.model="$MEMR1_JUDGE_MODEL")
  fi
  # The agents' budgets are the recipe's (and MEMR1_MAX_RESPONSE's), as in training.
  local flags=()
  budget_flags
  # Greedy answers on the test split (the 8 conversations after train and validation).
  # shellcheck disable=SC2086  # MEMR1_EVAL_ARGS is a list of flags
  run evaluate "$PY" -m memr1.evaluate \
    --config "$REPO/configs/memr1.py:system=memory_r1,dataset=locomo,backbone=$BACKBONE,recipe=paper" \
    --config.data.path="$MEMR1_LOCOMO" --config.data.split=test "${judge[@]}" "${flags[@]}" \
    --hf_dir "$MEMR1_HF_DIR" --manager_checkpoint "$MANAGER_RUN/checkpoints$PICK" \
    --answer_checkpoint "$ANSWER_RUN/checkpoints$PICK" --workdir "$EVAL_DIR" ${MEMR1_EVAL_ARGS:-}
}

# tools/export_hf.py reads HF checkpoints and bare Orbax parameter trees, not training
# checkpoints (which hold the whole train state), and takes its shapes from the size table. So
# the policy is restored here on the host and handed to the exporter that tool calls
# (memr1.models.hf_export.export_hf), with the backbone's own config.json: the export then has
# exactly the trained architecture (RoPE base, norms, tying) and the backbone's tokenizer.
EXPORT_PY='
import sys
import jax
from memr1.models.hf_export import export_hf
from memr1.models.hf_io import config_from_hf
from memr1.models.transformer import abstract_model
from memr1.train.checkpoint import restore_params

hf_dir, ckpt_dir, out = sys.argv[1:4]  # ckpt_dir: DIR, DIR:STEP or DIR:best
cfg = config_from_hf(hf_dir, param_dtype="float32")
host = jax.sharding.SingleDeviceSharding(jax.devices()[0])
like = jax.tree.map(
    lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=host), abstract_model(cfg)[1]
)
params = restore_params(ckpt_dir, like)
print("wrote", export_hf(cfg, params, out, hf_dir, dtype="bfloat16"))
'

stage_export() {
  need_path MEMR1_HF_DIR "the local HF checkpoint of $BACKBONE (config and tokenizer)"
  local agent run_dir out
  for agent in answer manager; do
    run_dir=$RUN/$agent-$ALGO
    out=$EXPORT_DIR/$agent-$ALGO
    # The exporter writes into a temporary folder and renames it: an existing one is complete.
    if [[ -d $out ]]; then
      echo "export: $out exists, skipped"
      continue
    fi
    [[ -f $run_dir/DONE || $DRY_RUN == 1 ]] || die "$run_dir is not finished: train it first"
    # On the host, so that exporting needs no accelerator memory.
    JAX_PLATFORMS=cpu run export "$PY" -c "$EXPORT_PY" "$MEMR1_HF_DIR" \
      "$run_dir/checkpoints$PICK" "$out"
  done
}

cd "$REPO"
for stage in "$@"; do
  echo "== $stage ($BACKBONE, $ALGO) =="
  "stage_$stage"
done
