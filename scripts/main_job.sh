#!/usr/bin/env bash
# The main job: install what is missing, build the reference solution (or, in a student's
# bundle, the student's code), run the four
# benchmark configurations on the generated toy corpus, and draw the figures.
#   scripts/main_job.sh                 # 742 s measured on a 2-core machine (the build already done)
# Its configuration is the one the handout and plots/README.md give for every figure (a test keeps
# them alike); EPOCHS, N_TRAIN, ... change it for an experiment of your own.
# Figures and summary.json land in submit_figures/; the runs' JSON in runs/.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PRESET=${PRESET:-cpu-small}
EPOCHS=${EPOCHS:-3}       # the first is a warm-up and is dropped from the figures
N_TRAIN=${N_TRAIN:-1280}  # 20 batches of 64 per epoch
N_VALID=${N_VALID:-200}
COMMON=(--preset "$PRESET" --epochs "$EPOCHS" --n-train "$N_TRAIN" --n-valid "$N_VALID" --threads 1 --no-progress)
# shellcheck source=scripts/job_steps.sh
. scripts/job_steps.sh
start=$(date +%s)

install_and_build 7 run_data_parallel run_pipeline plot_figures doctor

step "3/7 what this machine can give: GEMM rate of one process, then of two at once"
one=$("$BUILD/doctor" --gemm-only --seconds 2)
"$BUILD/doctor" --gemm-only --seconds 2 >/tmp/kit_gemm_a.$$ & a=$!
"$BUILD/doctor" --gemm-only --seconds 2 >/tmp/kit_gemm_b.$$ & b=$!
wait $a $b
mkdir -p runs
python3 - "$one" /tmp/kit_gemm_a.$$ /tmp/kit_gemm_b.$$ > runs/machine.json <<'PY'
import json, sys
one = json.loads(sys.argv[1])["gflops"]
two = [json.load(open(p))["gflops"] for p in sys.argv[2:]]
print(json.dumps({"gemm_gflops_one_process": one, "gemm_gflops_two_processes": two,
                  "two_process_scaling": sum(two) / one, "cores": __import__("os").cpu_count()}))
PY
rm -f /tmp/kit_gemm_a.$$ /tmp/kit_gemm_b.$$
python3 -c "import json;m=json.load(open('runs/machine.json'));print(f\"one process: {m['gemm_gflops_one_process']:.1f} GFLOP/s; two at once: {sum(m['gemm_gflops_two_processes']):.1f} GFLOP/s together = {m['two_process_scaling']:.2f}x one ({m['cores']} cores)\")"

move_aside runs/data_parallel runs/pipeline   # an earlier job's runs, kept under runs/earlier-<time>/
step "4/7 data parallel, world 1, batch 64"
"$BUILD/run_data_parallel" --world-size 1 --batch-size 64 "${COMMON[@]}"
step "5/7 data parallel, world 2, batch 128"
"$BUILD/run_data_parallel" --world-size 2 --batch-size 128 "${COMMON[@]}"
step "6/7 model parallel and pipeline parallel, 2 stages, batch 64"
"$BUILD/run_pipeline" --mode model_parallel --stages 2 --batch-size 64 "${COMMON[@]}" --out runs/pipeline/model_parallel.json
"$BUILD/run_pipeline" --mode pipeline_parallel --stages 2 --batch-size 64 --chunks 4 "${COMMON[@]}" --out runs/pipeline/pipeline_parallel.json

step "7/7 figures"
"$BUILD/plot_figures" --out submit_figures
python3 - <<'PY'
import json
m = json.load(open("runs/machine.json"))
print(f"\nOn this machine two processes together get {m['two_process_scaling']:.2f}x the GEMM throughput of one "
      f"({m['cores']} cores). Data parallelism can speed training up by at most about that much here;\n"
      "on a node with one GPU per rank the bound is the number of GPUs.")
PY
echo "figures: submit_figures/   runs: runs/   total $(( $(date +%s) - start )) s"
