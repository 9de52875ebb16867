#!/usr/bin/env bash
# The kit's test command: install what is missing, build the reference solution,
# run every test. Usage: scripts/test.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
JOBS=$(nproc 2>/dev/null || echo 2)

scripts/install_deps.sh
cmake -S . -B "$BUILD" -DKIT_SOLUTION=ON -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "$JOBS"
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS"
