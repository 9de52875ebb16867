#!/usr/bin/env bash
# For PyTorch's CUDA wheel on a machine without a CUDA toolkit: its CMake files need nvcc and
# the CUDA libraries to configure anything (cmake/WheelCuda.cmake says so and points here).
# Installs NVIDIA's own nvcc packages from PyPI into the wheel's venv, at the wheel's CUDA
# release, and lays them out as a toolkit in site-packages/nvidia/kit-cuda-toolkit (bin,
# include, lib with the unversioned .so names CMake's FindCUDA looks for), which the kit's
# CMake then finds by itself. Nothing of it runs on a GPU: the programs load the wheel's
# CUDA libraries. Idempotent.
#
#   scripts/cuda_toolkit_from_pip.sh <venv>/bin/python
set -euo pipefail
PY=${1:?"usage: $0 <the python of the venv that holds torch>"}
read -r cuda site < <("$PY" -c '
import os, warnings; warnings.filterwarnings("ignore")
import torch; print(torch.version.cuda or "none", os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null) \
  || { echo "error: $PY cannot import torch" >&2; exit 1; }
if [[ "$cuda" == none ]]; then echo "the torch wheel is the CPU build: it needs no CUDA toolkit"; exit 0; fi
major=${cuda%%.*}
from=$site/nvidia/cu$major
if [[ ! -d "$from/lib" ]]; then
  echo "error: the wheel's CUDA $cuda libraries are not in $from (CUDA 12 wheels lay them out per" \
       "library): install the CUDA $cuda toolkit instead, or use the CPU wheel" >&2
  exit 1
fi
# The compiler, its front end's headers and NVVM, at the release of the wheel's runtime.
"$PY" -m pip install -q "nvidia-cuda-nvcc==$cuda.*" "nvidia-cuda-crt==$cuda.*" "nvidia-nvvm==$cuda.*"
[[ -x "$from/bin/nvcc" ]] || { echo "error: pip installed no $from/bin/nvcc" >&2; exit 1; }

view=$site/nvidia/kit-cuda-toolkit
rm -rf "$view"
mkdir -p "$view/lib"
for d in bin include nvvm; do [[ -e "$from/$d" ]] && ln -s "$from/$d" "$view/$d"; done
ln -s lib "$view/lib64"
for f in "$from"/lib/*; do
  b=$(basename "$f")
  ln -s "$f" "$view/lib/$b"
  [[ "$b" == *.so.* ]] && ln -sf "$f" "$view/lib/${b%%.so.*}.so"   # libcudart.so.13 -> libcudart.so
done
"$view/bin/nvcc" --version | tail -1
echo "CUDA toolkit for CMake: $view (the kit's CMake finds it next to the wheel)"
