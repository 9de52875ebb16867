#!/usr/bin/env bash
# An interactive GPU job on a SLURM cluster: a shell on a node with N GPUs.
#   scripts/slurm/interactive.sh [N_GPUS=2] [TIME=1:00:00]
#   KIT_SIF=kit-cuda.sif scripts/slurm/interactive.sh 2    # the shell inside the kit's container
#                                                         # (apptainer shell --nv; scripts/container/)
# Your cluster's partition and account, as for the batch scripts (sbatch reads the same two):
#   export SBATCH_PARTITION=<gpu partition> SBATCH_ACCOUNT=<account>
# (unset: the cluster's defaults; `sinfo -s` lists the partitions, `sacctmgr show assoc user=$USER`
# your accounts).
# Inside the job, build against an official LibTorch with CUDA (see handout/README.md; in the
# container: cmake -S . -B build-cuda && cmake --build build-cuda -j 8) and run e.g.
#   ./build-cuda/run_data_parallel --world-size 1 --backend nccl     # one GPU: the baseline
#   ./build-cuda/run_data_parallel --world-size 2 --backend nccl     # one rank per GPU
#   ./build-cuda/run_pipeline --mode pipeline_parallel --stages 2 --device cuda
set -euo pipefail
GPUS=${1:-2}
TIME=${2:-1:00:00}
command -v srun >/dev/null || { echo "error: srun not found: run this on a SLURM login node" >&2; exit 1; }
WHERE=()
[[ -n "${SBATCH_PARTITION:-}" ]] && WHERE+=(--partition="$SBATCH_PARTITION")
[[ -n "${SBATCH_ACCOUNT:-}" ]] && WHERE+=(--account="$SBATCH_ACCOUNT")
[[ ${#WHERE[@]} -gt 0 ]] || echo "note: no SBATCH_PARTITION / SBATCH_ACCOUNT set: the cluster's default partition and account" >&2
SHELL_CMD=(bash -l)
if [[ -n "${KIT_SIF:-}" ]]; then
  [[ -f "$KIT_SIF" ]] || { echo "error: KIT_SIF=$KIT_SIF not found: apptainer build --fakeroot $KIT_SIF scripts/container/kit-cuda.def" >&2; exit 1; }
  SHELL_CMD=(apptainer shell --nv "$KIT_SIF")
fi
exec srun "${WHERE[@]}" --nodes=1 --ntasks=1 --cpus-per-task=$((4 * GPUS)) \
  --gres="gpu:$GPUS" --time="$TIME" --pty "${SHELL_CMD[@]}"
