#!/usr/bin/env bash
# The pipeline-schedule job (Problem 3): install what is missing, build, measure one process,
# Assignment 1's model-parallel and Pipe runs and the three schedules across two processes
# (bench/pipeline_schedules.py), then draw the two figures.
#   scripts/pipeline_job.sh                          # cpu-small, batch 32 x 128, m = 8: a few minutes on 2 cores
#   STEPS=10 scripts/pipeline_job.sh                 # more timed steps
#   PIPELINE_ARGS="--preset cpu-base" scripts/pipeline_job.sh
# Figures land in submit_figures/ (pp_schedule_timelines.png, pp_schedule_throughput.png);
# the runs, summary.json and summary.md in runs/pipeline_training/.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
STEPS=${STEPS:-5}
WARMUP=${WARMUP:-2}
OUT=${OUT:-runs/pipeline_training}
# shellcheck source=scripts/job_steps.sh
. scripts/job_steps.sh
start=$(date +%s)

install_and_build 4 bench train_parallel schedule plot_figures

step "3/4 measure: single, model parallel, Pipe, GPipe, 1F1B, interleaved"
move_aside "$OUT"   # an earlier job's runs, kept under runs/earlier-<time>/
# shellcheck disable=SC2086  # PIPELINE_ARGS is a list of flags
python3 bench/pipeline_schedules.py --build "$BUILD" --steps "$STEPS" --warmup "$WARMUP" --out "$OUT" ${PIPELINE_ARGS:-}

step "4/4 figures"
"$BUILD/plot_figures" --pipeline-runs "$OUT" --out submit_figures
echo "figures: submit_figures/pp_schedule_*.png   runs: $OUT/   total $(( $(date +%s) - start )) s"
