#!/usr/bin/env bash
# Does by hand what the container recipe (kit.def) does, on a machine without Apptainer:
# debootstrap Debian bookworm (minbase, as Apptainer's `Bootstrap: debootstrap`) into DIR,
# run the kit's own scripts/install_deps.sh inside it as root (the recipe's %post), then,
# as a user created inside (as on a cluster, where the container runs as you), configure,
# build and run the quick tests: the commands of `scripts/test.sh --quick`, one phase at a
# time, so that each phase's time is printed. Not part of CI.
#
#   sudo scripts/container/debootstrap_proof.sh DIR      (DIR: new or empty; several GB)
#
# Environment: JOBS (build and test jobs, default 2), KIT_MIRROR (default
# http://deb.debian.org/debian). A DIR that already holds a bootstrapped system is reused
# (its debootstrap phase is then skipped). /proc, /sys, /dev, /dev/pts and /dev/shm are
# mounted into DIR and always unmounted on exit, whatever happens.
set -euo pipefail
DIR=${1:?usage: sudo $0 DIR}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
source "$REPO/scripts/container/chroot_lib.sh"
USER_ENV=(KIT_REQUIRE_TORCH_PYTHON=1)

# ---- 1. debootstrap ------------------------------------------------------------------
bootstrap

# ---- 2. the recipe's %post: the kit's own install script, as root ----------------------
phase_start "install_deps.sh --python (root)"
mkdir -p "$DIR/opt/kit"
cp "$REPO/scripts/install_deps.sh" "$DIR/opt/kit/install_deps.sh"
chroot "$DIR" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  bash /opt/kit/install_deps.sh --python
chroot "$DIR" apt-get clean
phase_end

# ---- 3. a user, and the kit (the working tree: tracked and new files) ----------------------
copy_kit "$REPO"
as_user 'id; scripts/install_deps.sh --check'   # all there, and no root needed to know it

# ---- 4. as that user: what scripts/test.sh --quick runs ---------------------------------
phase_start "configure (user kit)"
as_user 'scripts/install_deps.sh --python &&
  cmake -S . -B build -DKIT_SOLUTION=ON -DCMAKE_BUILD_TYPE=Release -DKIT_GRADER_SELFTESTS=OFF > build-configure.log 2>&1 ||
  { tail -40 build-configure.log; exit 1; }
  grep -E "^-- (LibTorch|c10d)|Downloading|downloaded" build-configure.log || true'
phase_end

build_and_test "(all)" "" '-j "$JOBS"' "all quick tests passed"
