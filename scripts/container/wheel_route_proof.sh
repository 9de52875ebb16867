#!/usr/bin/env bash
# Proves the user-space route on a system that has none of the kit's Debian packages: a
# minbase Debian bookworm (debootstrap) with only a compiler, CMake, git and Python; no
# libtorch-dev, no libgloo-dev, no GoogleTest/CLI11/json packages. As a user inside, LibTorch
# comes from a venv's torch wheel (PyPI) and CMake downloads the rest at pinned versions
# (cmake/FetchDeps.cmake), Gloo's headers included, so Assignment 1's CPU data parallelism
# (Gloo) builds and its tests pass. Also the stand-in for a distribution whose own LibTorch
# is absent or too old (the route setup.sh takes there). Not part of CI.
#
#   sudo scripts/container/wheel_route_proof.sh DIR      (DIR: new or empty; several GB)
#
# Environment: JOBS (default 2), KIT_MIRROR (default http://deb.debian.org/debian),
# TORCH_SPEC (what the user pip-installs into ~/torch inside; default torch, PyPI's current
# wheel). A DIR from an earlier run is reused: its system and its venv.
set -euo pipefail
DIR=${1:?usage: sudo $0 DIR}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
source "$REPO/scripts/container/chroot_lib.sh"

bootstrap

# ---- 2. a compiler, CMake, git and Python: nothing of the kit's own packages ---------------
phase_start "compiler, cmake, python (root)"
chroot "$DIR" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
  bash -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends \
    g++ make cmake git python3 python3-venv ca-certificates >/dev/null && apt-get clean'
# The point of the proof: none of what scripts/install_deps.sh would install is there.
for p in libtorch-dev libgloo-dev libgtest-dev libcli11-dev nlohmann-json3-dev libsentencepiece-dev; do
  if chroot "$DIR" dpkg -s "$p" >/dev/null 2>&1; then echo "error: $p is installed in $DIR" >&2; exit 1; fi
done
for d in /usr/include/gloo /usr/include/torch /usr/include/gtest; do
  [[ ! -e "$DIR$d" ]] || { echo "error: $DIR$d exists" >&2; exit 1; }
done
echo "none of libtorch-dev libgloo-dev libgtest-dev libcli11-dev nlohmann-json3-dev libsentencepiece-dev is installed"
phase_end

copy_kit "$REPO"

# ---- 3. the torch wheel in a venv --------------------------------------------------------
phase_start "torch wheel in a venv (user kit)"
VENV=/home/kit/torch
as_user "[[ -x $VENV/bin/python ]] || python3 -m venv $VENV; $VENV/bin/python -c 'import torch' 2>/dev/null ||
  $VENV/bin/pip install -q '${TORCH_SPEC:-torch}'"
as_user "$VENV/bin/python -c 'import warnings; warnings.filterwarnings(\"ignore\"); import torch; print(\"torch\", torch.__version__)'"
# PyPI's torch is the CUDA build: its CMake files need nvcc, from PyPI as well (nothing for
# the CPU wheel).
as_user "scripts/cuda_toolkit_from_pip.sh $VENV/bin/python"
phase_end

# ---- 4. configure (downloads the pinned dependencies), build, Assignment 1's data-parallel tests
phase_start "configure (user kit)"
as_user "prefix=\$($VENV/bin/python -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null) &&
  cmake -S . -B build -DKIT_SOLUTION=ON -DCMAKE_BUILD_TYPE=Release -DKIT_GRADER_SELFTESTS=OFF \
    -DCMAKE_PREFIX_PATH=\"\$prefix\" > build-configure.log 2>&1 || { tail -40 build-configure.log; exit 1; }
  grep -E '^-- (LibTorch|c10d)|Downloading|downloaded' build-configure.log || true
  grep -q 'c10d Gloo backend: yes' build-configure.log || { echo 'error: no Gloo backend'; exit 1; }"
phase_end

build_and_test test_data_parallel "--target test_data_parallel" '-R "^data_parallel\."' \
  "the wheel-only route passes Assignment 1's data-parallel tests (Gloo)"
