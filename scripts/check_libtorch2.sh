#!/usr/bin/env bash
# Checks that the kit builds and passes its tests against an official LibTorch 2.x
# (the pip wheel), next to the Debian LibTorch 1.13 build that CI uses. Not part of CI:
# it downloads several GB. Idempotent: reuses the virtual environment and build
# directory, so running it again after a change rebuilds only what changed.
#
#   scripts/check_libtorch2.sh [ctest arguments...]     e.g. -L foundation
#
# Environment:
#   TORCH2_VENV   virtual environment for the wheel (default: ../torch2x-venv, outside the repo)
#   TORCH2_SPEC   what to pip-install (default: torch, PyPI's current wheel)
#   BUILD2X       build directory (default: build-2x)
#   JOBS          parallel build jobs (default: 2)
#   KIT_SOLUTION  ON (default) builds the reference solution, OFF the starter
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
VENV=${TORCH2_VENV:-$(dirname "$REPO")/torch2x-venv}
SPEC=${TORCH2_SPEC:-torch}
BUILD=${BUILD2X:-build-2x}
JOBS=${JOBS:-2}
SOLUTION=${KIT_SOLUTION:-ON}
case "$VENV" in "$REPO"|"$REPO"/*) echo "error: TORCH2_VENV=$VENV is inside the repository; put it outside" >&2; exit 2;; esac

say() { printf '\n== %s\n' "$*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

# ---- 1. the wheel ---------------------------------------------------------------
say "LibTorch 2.x wheel in $VENV"
if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv "$VENV" || fail "python3 -m venv $VENV (Debian: apt-get install python3-venv)"
fi
PY="$VENV/bin/python"
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
  "$PY" -m pip install -q --upgrade pip || fail "pip upgrade"
  "$PY" -m pip install "$SPEC" || fail "pip install $SPEC"
fi
read -r TORCH_VERSION TORCH_CUDA PREFIX < <("$PY" -c '
import warnings; warnings.filterwarnings("ignore")
import torch; print(torch.__version__, torch.version.cuda or "none", torch.utils.cmake_prefix_path)' 2>/dev/null) \
  || fail "the wheel in $VENV does not import"
echo "torch $TORCH_VERSION (CUDA $TORCH_CUDA), CMake files in $PREFIX"

# ---- 2. configure and build -----------------------------------------------------
say "configure $BUILD"
mkdir -p "$BUILD"
LOG="$BUILD/check_libtorch2"   # logs stay in the build directory
t0=$(date +%s)
cmake -S . -B "$BUILD" -DKIT_SOLUTION="$SOLUTION" -DCMAKE_PREFIX_PATH="$PREFIX" >"$LOG.configure.log" 2>&1 \
  || { tail -40 "$LOG.configure.log"; fail "configure (full log: $LOG.configure.log)"; }
grep -E "^-- (LibTorch|c10d)|Gloo|nccl.h" "$LOG.configure.log" | sed 's/^/  /'
t1=$(date +%s)
say "build $BUILD (-j$JOBS)"
cmake --build "$BUILD" -j"$JOBS" >"$LOG.build.log" 2>&1 \
  || { grep -E "error|Error" "$LOG.build.log" | head -40; fail "build (full log: $LOG.build.log)"; }
warnings=$(grep -c "warning:" "$LOG.build.log")
t2=$(date +%s)
echo "configure $((t1 - t0)) s, build $((t2 - t1)) s, $warnings compiler warnings (log: $LOG.build.log)"

# ---- 3. the kit must not carry its own copy of a Gloo type ------------------------
# Official LibTorch ships no Gloo headers; the kit compiles against libgloo-dev's, which
# is safe only while no Gloo class layout or vtable is compiled into libkit.so.
say "Gloo ABI check on $BUILD/libkit.so"
bad=$(nm -DC --defined-only "$BUILD/libkit.so" | grep -E "^[0-9a-f]+ [A-Za-z] ((vtable|VTT|typeinfo|typeinfo name) for )?(gloo::|c10d::ProcessGroupGloo::GlooStore)" || true)
if [[ -n "$bad" ]]; then
  echo "$bad" | head -20
  fail "libkit.so defines Gloo symbols: code in the kit uses Gloo types directly (only call ProcessGroupGloo's functions)"
fi
echo "ok: libkit.so defines no Gloo symbol"
# ...and must load the libraries LibTorch was built with (the wheel's NCCL and CUDA runtime).
if ldd "$BUILD/libkit.so" | grep -E "not found|libc10\.so\.1\.13|libtorch\.so\.1\.13"; then
  fail "libkit.so loads missing or foreign libraries (see above)"
fi
ldd "$BUILD/libkit.so" | grep -E "libnccl|libcudart|libc10\.so" | sed 's/^\s*/  /'

# ---- 4. tests ---------------------------------------------------------------------
say "ctest in $BUILD $*"
# The checkpoint test compares against PyTorch in Python: use the wheel's.
export KIT_TORCH_PYTHON="$PY"
t3=$(date +%s)
ctest --test-dir "$BUILD" --output-on-failure "$@" 2>&1 | tee "$LOG.ctest.log"
rc=${PIPESTATUS[0]}
t4=$(date +%s)

say "report"
echo "torch $TORCH_VERSION (CUDA $TORCH_CUDA); configure $((t1 - t0)) s, build $((t2 - t1)) s, tests $((t4 - t3)) s"
grep -E "tests passed|tests failed" "$LOG.ctest.log" | tail -1
echo "skipped: $(grep -c "\*\*\*Skipped" "$LOG.ctest.log")"
exit "$rc"
