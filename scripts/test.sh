#!/usr/bin/env bash
# The kit's test command: install what is missing, build the reference solution,
# run every test, the grader's self-tests included (they grade, for every assignment, the
# solution, the starter and each known-wrong submission: grader/wrong_submissions/ for
# Assignment 1, grader/assignment<N>/wrong_submissions/ for assignment N). Each graded case runs
# once, inside the solution self-tests (ctest -LE leaves out the cases they run, which
# tests/CMakeLists.txt labels in_solution_selftest); with --quick every case runs in ctest.
#   scripts/test.sh [--quick] [build-dir]     (default build dir: build)
#   --quick   skip the grader self-tests (about 28 minutes of the total on 2 cores) and the
#             tests labelled slow (the 3D grid's runs of up to 8 processes)
# It installs python3-torch too and requires it: the tests that read the kit's checkpoints
# with Python's torch.load fail here, instead of skipping, when PyTorch is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
SELFTESTS=ON
SKIP=(-LE '^in_solution_selftest$')   # ctest takes one -LE: what this run leaves out
if [[ "${1:-}" == "--quick" ]]; then SELFTESTS=OFF; SKIP=(-LE '^slow$'); shift; fi
BUILD=${1:-build}
JOBS=$(nproc 2>/dev/null || echo 2)

scripts/install_deps.sh --python
export KIT_REQUIRE_TORCH_PYTHON=1   # read by tests/foundation/checkpoint_test_util.h
cmake -S . -B "$BUILD" -DKIT_SOLUTION=ON -DCMAKE_BUILD_TYPE=Release -DKIT_GRADER_SELFTESTS=$SELFTESTS
cmake --build "$BUILD" -j "$JOBS"
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" "${SKIP[@]}"
