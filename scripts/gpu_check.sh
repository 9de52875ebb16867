#!/usr/bin/env bash
# The kit on one GPU in one go: configure (offline, from the pinned archives), build what the
# check runs, then the cases that compute on CUDA, ZeRO's mixed-precision bytes counted on the
# GPU and the GPU benchmark at one size.
#
#   scripts/gpu_check.sh          # on a GPU node: python3 with PyPI's CUDA torch wheel, nvcc, cmake
#
# Environment:
#   BUILD                  build directory (default build-gpu)
#   JOBS                   compile jobs (default: every core)
#   KIT_DEPS_DOWNLOAD_DIR  the pinned dependency archives (cmake/FetchDeps.cmake), for a node
#                          without network: copy them from a build that downloaded them
#                          (its _deps/downloads)
#   BENCH_ARGS             extra arguments of bench/gpu.py (default: GPT-2 124M, T = 1024, batch 16)
#   OUT                    where the logs and the benchmark's summary go (default runs/gpu_check)
#   SUITES                 1 (default): also build every suite and run it with KIT_TEST_DEVICE=cuda
#                          (every rank of a multi-process case on the GPU, over Gloo); 0: skip
# Each step prints its time; the whole check is meant to fit in 8 minutes on 16 cores.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-$(nproc)}
OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"
start=$(date +%s)
failed=()
step() { printf '\n== %s (%d s so far)\n' "$*" $(( $(date +%s) - start )); }

step "the GPU and the wheel"
nvidia-smi -L || { echo "no GPU visible (nvidia-smi -L failed): run this on a GPU node"; exit 2; }
PREFIX=$(python3 -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"; print(torch.utils.cmake_prefix_path)') \
  || { echo "python3 has no CUDA torch: pip install torch (PyPI's default wheel is the CUDA build)"; exit 2; }

step "configure $BUILD"
cmake -S . -B "$BUILD" -DKIT_SOLUTION=ON -DCMAKE_BUILD_TYPE=Release -DKIT_PLOTS=OFF \
  -DCMAKE_PREFIX_PATH="$PREFIX" ${KIT_DEPS_DOWNLOAD_DIR:+-DKIT_DEPS_DOWNLOAD_DIR="$KIT_DEPS_DOWNLOAD_DIR"} \
  > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
grep -E "^-- (LibTorch|c10d)" "$OUT/configure.log"

step "build (-j$JOBS)"
cmake --build "$BUILD" -j "$JOBS" --target doctor train_parallel test_foundation test_pipeline > "$OUT/build.log" 2>&1 \
  || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
grep -c "warning:" "$OUT/build.log" | sed 's/^/compiler warnings: /'

step "doctor"
"$BUILD/doctor" | tee "$OUT/doctor.txt"

step "the cases that compute on CUDA"
# Memory from the caching allocator, the fused attention and AdamW against their CPU
# references, the model, and Assignment 1's pipe with a stage per GPU.
ctest --test-dir "$BUILD" --output-on-failure --timeout 300 \
  -R '^foundation\.(MemoryCounter|Attention|KitAdamW|GPT2Model)\.|^pipeline\.PipeDevices\.' \
  > "$OUT/ctest.log" 2>&1 || failed+=("ctest (log: $OUT/ctest.log)")
grep -E "tests passed|Failed|Skipped" "$OUT/ctest.log"

if [[ ${SUITES:-1} == 1 ]]; then
  step "every suite with KIT_TEST_DEVICE=cuda"
  # The ranks and programs the multi-process cases start compute on the one GPU, sharing it
  # over Gloo (tests/test_device.h); the single-process cases keep their CPU tensors.
  cmake --build "$BUILD" -j "$JOBS" > "$OUT/build_suites.log" 2>&1 \
    || { grep -E "error" "$OUT/build_suites.log" | head -30; failed+=("build of the suites ($OUT/build_suites.log)"); }
  KIT_TEST_DEVICE=cuda ctest --test-dir "$BUILD" -j "$(( JOBS / 2 > 1 ? JOBS / 2 : 1 ))" --timeout 300 \
    -L '^(foundation|data_parallel|pipeline|pipeline_training|tensor_parallel|zero|terapipe|grid|grid3d|precision|planner|programs)$' \
    > "$OUT/ctest_cuda.log" 2>&1 || failed+=("the suites on CUDA (log: $OUT/ctest_cuda.log)")
  grep -E "tests passed|\(Failed\)|\(Timeout\)" "$OUT/ctest_cuda.log" | head -40
fi

step "ZeRO in mixed precision on the GPU"
# One NCCL rank: bf16 parameters with the fp32 master (ZeRO-1, ZeRO-3), every byte count read
# from the CUDA caching allocator and the tensors, against the paper's 2 + 2 + 12 bytes.
for opt in zero1 zero3; do
  "$BUILD/train_parallel" --dp 1 --backend nccl --optimizer "$opt" --precision bf16 --preset tiny --steps 2 \
    --warmup 1 --no-progress --out "$OUT/zero_$opt.{rank}.json" > "$OUT/zero_$opt.log" 2>&1 \
    || { failed+=("train_parallel --optimizer $opt --precision bf16 (log: $OUT/zero_$opt.log)"); continue; }
  python3 - "$OUT/zero_$opt.0.json" <<'PY' || failed+=("ZeRO $opt bytes on the GPU ($OUT/zero_$opt.0.json)")
import json, sys
m = json.load(open(sys.argv[1]))
counted = m["parameter_bytes"] + m["gradient_bytes"] + m["optimizer_state_bytes"]
formula = m["formula_bytes"]["total"]
ok = m["master_weights"] and abs(counted - formula) <= 16 * (m["n_layer"] + 1) and m["activation_bytes"] is not None
print(f"{sys.argv[1]}: counted {counted} B, formula {formula:.0f} B ({m['formula_bytes']['accounting']}), "
      f"activations {m['activation_bytes']} B ({m['activation_measure'][:40]}...): {'ok' if ok else 'WRONG'}")
sys.exit(0 if ok else 1)
PY
done

step "bench/gpu.py"
# shellcheck disable=SC2086  # BENCH_ARGS is a list of arguments
timeout 600 python3 bench/gpu.py --build "$BUILD" --out "$OUT/bench" ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1 \
  || failed+=("bench/gpu.py (log: $OUT/bench.log)")
cat "$OUT/bench/summary.md" 2>/dev/null

step "done"
if (( ${#failed[@]} )); then printf 'FAILED: %s\n' "${failed[@]}"; exit 1; fi
echo "GPU check passed: $OUT"
