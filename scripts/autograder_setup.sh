#!/usr/bin/env bash
# Gradescope's setup.sh calls this once, as root, when the autograder image is built:
#   bash kit/scripts/autograder_setup.sh N
# 1. picks the install route for this base image (scripts/setup_route.py says which and why:
#    Debian's packages where the distribution's LibTorch will do, else PyPI's torch wheel in
#    a venv with the other dependencies downloaded by CMake at pinned versions);
# 2. installs it, and writes kit/build_env.sh, which run_autograder sources so that grading
#    configures against the same LibTorch;
# 3. builds assignment N's kit once with the starter stubs, so each submission is an
#    incremental build.
# Environment: KIT_SETUP_ROUTE=packages|wheel forces a route; KIT_TORCH_SPEC (default
# torch==2.15.0, the wheel scripts/check_libtorch2.sh last passed with) and KIT_TORCH_INDEX
# (default PyTorch's CPU-only index, a few hundred MB; PyPI's default torch is the CUDA build,
# several GB, and is tried when that index cannot be reached); KIT_TORCH_VENV (default
# /opt/kit-torch); KIT_WORK (default /autograder/work).
set -euo pipefail
N=${1:?usage: autograder_setup.sh <assignment number>}
KIT=$(cd "$(dirname "$0")/.." && pwd)
cd "$KIT"
VENV=${KIT_TORCH_VENV:-/opt/kit-torch}
SPEC=${KIT_TORCH_SPEC:-torch==2.15.0}
INDEX=${KIT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
ENV_FILE=$KIT/build_env.sh
export DEBIAN_FRONTEND=noninteractive

fail() { echo "autograder setup FAILED: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || fail "run as root (Gradescope runs setup.sh as root)"
command -v apt-get >/dev/null || fail "no apt-get: use a Debian or Ubuntu base image (Gradescope's are Ubuntu)"

# The route: apt's lists must be current for apt-cache to know the candidates.
apt-get update -qq
command -v python3 >/dev/null || apt-get install -y -qq --no-install-recommends python3 >/dev/null
out=$(python3 scripts/setup_route.py) || fail "no install route works on this image (message above)"
echo "$out"
route=$(sed -n 's/^route: //p' <<<"$out")
apt_pkgs=$(sed -n 's/^apt: //p' <<<"$out")
python=$(sed -n 's/^python: //p' <<<"$out")

echo "# Written by scripts/autograder_setup.sh ($route route); sourced by run_autograder." > "$ENV_FILE"
case "$route" in
  packages)
    bash scripts/install_deps.sh
    ;;
  wheel)
    # shellcheck disable=SC2086  # a list of package names
    apt-get install -y -qq --no-install-recommends $apt_pkgs >/dev/null || fail "apt-get install $apt_pkgs"
    [[ -x "$VENV/bin/python" ]] || "$python" -m venv "$VENV" || fail "$python -m venv $VENV"
    if ! "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
      "$VENV/bin/pip" install -q --index-url "$INDEX" "$SPEC" \
        || { echo "$INDEX failed; trying PyPI's default index (the CUDA build: several GB)"
             "$VENV/bin/pip" install -q "$SPEC"; } \
        || fail "pip install $SPEC (needs network access to $INDEX or pypi.org)"
    fi
    # The CUDA wheel (PyPI's default, where the CPU index was unreachable) needs nvcc to
    # configure; nothing happens for the CPU wheel.
    bash scripts/cuda_toolkit_from_pip.sh "$VENV/bin/python" || fail "scripts/cuda_toolkit_from_pip.sh"
    prefix=$("$VENV/bin/python" -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null) \
      || fail "the torch wheel in $VENV does not import"
    cat >> "$ENV_FILE" <<ENV
export CMAKE_PREFIX_PATH="$prefix"
export KIT_TORCH_PYTHON="$VENV/bin/python"
ENV
    ;;
  *) fail "scripts/setup_route.py printed no route" ;;
esac
echo "setup route: $route (written to $ENV_FILE)"

# shellcheck source=/dev/null
source "$ENV_FILE"
python3 grader/grade.py --assignment "$N" --build-only --work "${KIT_WORK:-/autograder/work}" \
  --out /tmp/prebuild.json "$KIT"
