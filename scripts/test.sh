#!/usr/bin/env bash
# The kit's test command.
#
# In a student bundle (grader/bundle.json, no solution/): install what is missing, build your
# code (starter/), run the given tests (everything but your assignment's rubric items and the
# tests that need your problems done: labels p<problem>_... and needs_a<K>), then grade your
# build on the public cases with the instructor's rubric (python3 grader/grade.py --local).
# The given tests pass on the untouched starter; each problem's own command is in the handout.
#   scripts/test.sh [build-dir]                      (default build dir: build)
#   KIT_CMAKE_ARGS="-D..." adds configure options (CI points KIT_PREBUILT at its main build);
#   KIT_CTEST_ARGS="..." adds ctest options to the given tests (CI, whose main build already ran
#   them on the same objects, runs every fourth: -I ,,4).
#
# In the instructor's kit: install what is missing, build the reference solution, run every
# test and the grader's self-tests of the CI tier: for every assignment the solution (every
# graded case, which must all pass) and the known-wrong submissions whose expected.json says
# "in_ci": true (grader/assignment<N>/wrong_submissions/ for assignment N). Each graded case
# runs once, inside the solution self-tests (ctest -LE leaves out the cases they run, which
# tests/CMakeLists.txt labels in_solution_selftest).
#   scripts/test.sh [--quick|--full] [build-dir]     (default build dir: build)
#   --quick   no grader self-tests and no tests labelled slow (the 3D grid's runs of up to 8
#             processes): every case runs in ctest itself
#   --full    every grader self-test: each known-wrong submission, the dishonest ones included,
#             and the starters (about 40 minutes in all on 2 cores); run it before a release and
#             after changing a rubric, a test the rubrics grade or the grader
# It installs python3-torch too and requires it: the tests that read the kit's checkpoints
# with Python's torch.load fail here, instead of skipping, when PyTorch is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(scripts/jobs.sh)   # cores, bounded by free memory

if [[ -f grader/bundle.json && ! -d solution ]]; then
  BUILD=${1:-build}
  N=$(python3 -c 'import json; print(json.load(open("grader/bundle.json"))["assignment"])')
  scripts/install_deps.sh
  # shellcheck disable=SC2086  # KIT_CMAKE_ARGS is a list of options
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release ${KIT_CMAKE_ARGS:-}
  cmake --build "$BUILD" -j "$JOBS"
  echo "== the given tests (your problems' tests: the handout's command for each)"
  # shellcheck disable=SC2086  # KIT_CTEST_ARGS is a list of options
  ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" -LE "^(p[0-9].*|needs_a[$N-9])\$" ${KIT_CTEST_ARGS:-}
  echo "== your assignment $N, graded on the public cases"
  python3 grader/grade.py --local "$BUILD" --assignment "$N" --jobs "$JOBS"
  exit 0
fi

SELFTESTS=ON
SKIP=(-LE '^(in_solution_selftest|grader_selftest_full)$')   # ctest takes one -LE: what this run leaves out
case "${1:-}" in
  --quick) SELFTESTS=OFF; SKIP=(-LE '^slow$'); shift ;;
  --full) SKIP=(-LE '^in_solution_selftest$'); shift ;;
esac
BUILD=${1:-build}

scripts/install_deps.sh --python
export KIT_REQUIRE_TORCH_PYTHON=1   # read by tests/foundation/checkpoint_test_util.h
cmake -S . -B "$BUILD" -DKIT_SOLUTION=ON -DCMAKE_BUILD_TYPE=Release -DKIT_GRADER_SELFTESTS=$SELFTESTS
cmake --build "$BUILD" -j "$JOBS"
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" "${SKIP[@]}"
