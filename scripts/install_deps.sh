#!/usr/bin/env bash
# Installs the Debian (bookworm) packages the kit needs. Idempotent: installs only
# what is missing, and runs apt-get update only when something is.
#   sudo scripts/install_deps.sh            # or as root
#   scripts/install_deps.sh --check         # list what is missing, install nothing
#   sudo scripts/install_deps.sh --python   # also python3-torch: the tests that check the kit's
#                                           # checkpoints in Python (scripts/test.sh uses it)
#   sudo scripts/install_deps.sh --bench    # the same, for bench/baseline.py
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config python3 zip unzip
  git                   # grader/package.py lists the checkout's files with it (and its test)
  libtorch-dev          # LibTorch 1.13 (CPU) with c10d
  libgloo-dev           # c10d's Gloo backend (CPU process groups)
  libopenblas0-openmp   # fast GEMM: without it LibTorch falls back to reference BLAS (~15x slower)
  libgtest-dev          # GoogleTest
  libcli11-dev          # command-line flags
  nlohmann-json3-dev    # metrics JSON
  libsentencepiece-dev  # the BPE tokenizer
  libgnuplot-iostream-dev gnuplot-nox  # figures
)

for arg in "$@"; do
  case "$arg" in
    # PyTorch for Python, on the same LibTorch 1.13: the checkpoint tests' torch.load and
    # torch.save, and bench/baseline.py. Students' default install goes without it.
    --python|--bench) PACKAGES+=(python3-torch) ;;
    --check) ;;
    *) echo "error: unknown option $arg (use --check, --python and/or --bench)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ " $* " == *" --check "* ]]; then
  if ((${#missing[@]})); then echo "missing: ${missing[*]}"; exit 1; fi
  echo "all kit packages are installed"; exit 0
fi

# Root only when something must change: with everything installed it runs as any user
# (scripts/test.sh calls it; inside the container the user is not root).
SUDO=""
need_root() {
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then SUDO=sudo; else
      echo "error: installing packages needs root: run as root or install sudo" >&2; exit 1
    fi
  fi
}

if ((${#missing[@]})); then
  need_root
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "all kit packages are installed"
fi

# Several BLAS packages may be installed; make sure LibTorch gets OpenBLAS (OpenMP build).
for alt in libblas.so.3 liblapack.so.3; do
  name="$alt-$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
  target=$(update-alternatives --list "$name" 2>/dev/null | grep openblas-openmp | head -n1 || true)
  if [[ -n "$target" ]] && [[ "$(readlink -f "/etc/alternatives/$name")" != "$(readlink -f "$target")" ]]; then
    need_root
    $SUDO update-alternatives --set "$name" "$target"
  fi
done
