#!/usr/bin/env bash
# The Memory-R1 recipe on a multi-host TPU pod slice: run the SAME command on every host.
#
#   gcloud compute tpus tpu-vm ssh "$TPU" --zone "$ZONE" --worker=all --command '
#     cd ~/memr1 && MEMR1_RUN_DIR=/mnt/shared/qwen7b MEMR1_HF_DIR=/mnt/shared/Qwen2.5-7B-Instruct \
#     MEMR1_LOCOMO=/mnt/shared/locomo10.json \
#     JAX_COORDINATOR_ADDRESS=10.0.0.2:8476 JAX_NUM_PROCESSES=4 JAX_PROCESS_ID=${HOSTNAME##*-w-} \
#     experiments/tpu_pod.sh answer'
#
# Stages are those of experiments/gpu_node.sh, which this script calls after setting up the
# multi-host environment. The training stages (answer, manager) run on every host as one JAX
# program; `tuples` and `export` need no accelerator and run on process 0 only, on its CPU (the
# other hosts return at once); `evaluate` is a one-process job: run
# `experiments/gpu_node.sh evaluate` on a single-host machine (a GPU node or a single-host TPU VM)
# with the same MEMR1_RUN_DIR. MEMR1_RUN_DIR must be a POSIX file system every host sees at the
# same path (NFS / Filestore): every process writes its shards of each checkpoint, which Orbax
# commits with an atomic directory rename that a gcsfuse mount does not provide (see
# experiments/README.md, "Checkpoints on a bucket").
#
# How the processes find each other: memr1.train calls
# memr1.train.mesh.maybe_initialize_distributed(), which reads either
#   JAX_COORDINATOR_ADDRESS (host:port of process 0), JAX_NUM_PROCESSES and JAX_PROCESS_ID, or
#   TPU_WORKER_HOSTNAMES (comma-separated, every host) with TPU_WORKER_ID (this host's index),
# as set on GKE. From the second form this script derives the first (coordinator = the first
# host, port MEMR1_COORDINATOR_PORT, default 8476), so both paths end in the same explicit call.
# On a plain TPU VM, worker i's hostname ends in "-w-<i>", hence ${HOSTNAME##*-w-} above.
#
# Every MEMR1_* variable is passed through to gpu_node.sh unchanged; the mesh and micro-batch
# sizes are computed in Python from the slice's devices (configs/memr1.py recipe=paper).
set -euo pipefail
shopt -s inherit_errexit

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROG=$(basename "$0")

die() {
  echo "$PROG: error: $*" >&2
  exit 2
}

(($# > 0)) || die "name the stage(s) to run: tuples answer manager export (evaluate: see header)"
for stage in "$@"; do
  case $stage in
  tuples | answer | manager | export) ;;
  evaluate) die "evaluate is a one-process job: run experiments/gpu_node.sh evaluate on one host" ;;
  *) die "unknown stage '$stage' (stages: tuples answer manager export)" ;;
  esac
done

# ---- the process group --------------------------------------------------------------------------
if [[ -n ${JAX_COORDINATOR_ADDRESS:-} ]]; then
  [[ -n ${JAX_NUM_PROCESSES:-} ]] ||
    die "JAX_COORDINATOR_ADDRESS is set but JAX_NUM_PROCESSES is not"
  JAX_PROCESS_ID=${JAX_PROCESS_ID:-${TPU_WORKER_ID:-}}
  [[ -n $JAX_PROCESS_ID ]] ||
    die "JAX_PROCESS_ID is not set (each host needs its own id in [0, $JAX_NUM_PROCESSES))"
elif [[ -n ${TPU_WORKER_HOSTNAMES:-} ]]; then
  IFS=, read -r -a hosts <<<"$TPU_WORKER_HOSTNAMES"
  [[ -n ${TPU_WORKER_ID:-} ]] || die "TPU_WORKER_HOSTNAMES is set but TPU_WORKER_ID is not"
  JAX_COORDINATOR_ADDRESS=${hosts[0]}:${MEMR1_COORDINATOR_PORT:-8476}
  JAX_NUM_PROCESSES=${#hosts[@]}
  JAX_PROCESS_ID=$TPU_WORKER_ID
else
  die "no process group: set JAX_COORDINATOR_ADDRESS (process 0's host:port), JAX_NUM_PROCESSES" \
    "and JAX_PROCESS_ID on every host, or run where TPU_WORKER_HOSTNAMES and TPU_WORKER_ID are set"
fi
[[ $JAX_NUM_PROCESSES =~ ^[0-9]+$ && $JAX_PROCESS_ID =~ ^[0-9]+$ ]] ||
  die "JAX_NUM_PROCESSES=$JAX_NUM_PROCESSES and JAX_PROCESS_ID=$JAX_PROCESS_ID must be integers"
((JAX_PROCESS_ID < JAX_NUM_PROCESSES)) ||
  die "JAX_PROCESS_ID=$JAX_PROCESS_ID is not below JAX_NUM_PROCESSES=$JAX_NUM_PROCESSES"
export JAX_COORDINATOR_ADDRESS JAX_NUM_PROCESSES JAX_PROCESS_ID

# One log per host: the processes write at the same time.
export MEMR1_LOG_SUFFIX=-host$JAX_PROCESS_ID

# ---- stages -------------------------------------------------------------------------------------
for stage in "$@"; do
  case $stage in
  answer | manager)
    "$HERE/gpu_node.sh" "$stage"
    ;;
  tuples | export)
    if ((JAX_PROCESS_ID == 0)); then
      # A plain one-process job: keep it off the TPU and out of the process group.
      env -u JAX_COORDINATOR_ADDRESS -u JAX_NUM_PROCESSES -u JAX_PROCESS_ID JAX_PLATFORMS=cpu \
        "$HERE/gpu_node.sh" "$stage"
    else
      echo "$stage: runs on process 0 only; host $JAX_PROCESS_ID has nothing to do"
    fi
    ;;
  esac
done
