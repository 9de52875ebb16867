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
JOBS=${JOBS:-2}
MIRROR=${KIT_MIRROR:-http://deb.debian.org/debian}
[[ $(id -u) -eq 0 ]] || { echo "error: debootstrap and chroot need root: sudo $0 $DIR" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "error: debootstrap not found: apt-get install debootstrap" >&2; exit 1; }
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
[[ "$DIR" != / ]] || { echo "error: DIR must not be /" >&2; exit 1; }

# ---- mounts, undone on any exit -----------------------------------------------------
MOUNTED=()
cleanup() {
  local i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTED[i]}" 2>/dev/null || umount -l "${MOUNTED[i]}" || echo "warning: could not unmount ${MOUNTED[i]}" >&2
  done
  MOUNTED=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM   # runs the EXIT trap
mount_in() {   # mount_in <target under DIR> <mount arguments...>
  mkdir -p "$DIR$1"
  mount "${@:2}" "$DIR$1"
  MOUNTED+=("$DIR$1")
  # Private: with shared propagation (systemd's default) a mount made under a bind of the
  # host's /dev would also appear in the host's /dev.
  mount --make-private "$DIR$1"
}

# ---- phases and their times ---------------------------------------------------------
TIMES=()
T0=$(date +%s)
phase_start() { PHASE=$1; PT=$(date +%s); printf '\n== %s (%s)\n' "$PHASE" "$(date -u +%H:%M:%S)"; }
phase_end() {
  local s=$(($(date +%s) - PT))
  TIMES+=("$(printf '%-34s %5d s' "$PHASE" "$s")")
  printf '== %s: %d s\n' "$PHASE" "$s"
}
report() {
  printf '\n== times\n'
  printf '  %s\n' "${TIMES[@]}"
  printf '  %-34s %5d s\n' total $(($(date +%s) - T0))
}

# As the user `kit` inside DIR, with a clean environment (what a cluster user would have).
as_user() {
  chroot --userspec=kit:kit "$DIR" /usr/bin/env -i HOME=/home/kit USER=kit LOGNAME=kit LANG=C.UTF-8 \
    PATH=/usr/local/bin:/usr/bin:/bin JOBS="$JOBS" KIT_REQUIRE_TORCH_PYTHON=1 \
    bash -c "cd /home/kit/kit && $1"
}

# ---- 1. debootstrap ------------------------------------------------------------------
phase_start "debootstrap bookworm (minbase)"
if [[ -x "$DIR/usr/bin/apt-get" && -f "$DIR/etc/debian_version" ]]; then
  echo "reusing the system already in $DIR"
else
  debootstrap --variant=minbase bookworm "$DIR" "$MIRROR" > "$DIR.debootstrap.log" 2>&1 \
    || { tail -20 "$DIR.debootstrap.log"; echo "error: debootstrap failed (log: $DIR.debootstrap.log)" >&2; exit 1; }
fi
cat "$DIR/etc/debian_version"
phase_end

mount_in /proc -t proc proc
mount_in /sys --bind -o ro /sys
mount_in /dev --bind /dev
mount_in /dev/pts --bind /dev/pts
mount_in /dev/shm -t tmpfs -o mode=1777 shm   # the processes of a test share memory
cp /etc/resolv.conf "$DIR/etc/resolv.conf"
cp /etc/hosts "$DIR/etc/hosts"

# ---- 2. the recipe's %post: the kit's own install script, as root ----------------------
phase_start "install_deps.sh --python (root)"
mkdir -p "$DIR/opt/kit"
cp "$REPO/scripts/install_deps.sh" "$DIR/opt/kit/install_deps.sh"
chroot "$DIR" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  bash /opt/kit/install_deps.sh --python
chroot "$DIR" apt-get clean
phase_end

# ---- 3. a user, and the kit (the working tree: tracked and new files) ----------------------
phase_start "user kit, copy the kit"
chroot "$DIR" id kit >/dev/null 2>&1 || chroot "$DIR" useradd --create-home --shell /bin/bash kit
rm -rf "$DIR/home/kit/kit"
mkdir -p "$DIR/home/kit/kit"
git -C "$REPO" ls-files -z --cached --others --exclude-standard \
  | (cd "$REPO" && tar --null --files-from=- --ignore-failed-read -cf -) \
  | tar -xf - -C "$DIR/home/kit/kit"
chroot "$DIR" chown -R kit:kit /home/kit/kit
# A checkout, as the user's own would be (grader/package.py lists its files with git).
as_user 'git init -q .'
as_user 'id; scripts/install_deps.sh --check'   # all there, and no root needed to know it
phase_end

# ---- 4. as that user: what scripts/test.sh --quick runs ---------------------------------
phase_start "configure (user kit)"
as_user 'scripts/install_deps.sh --python &&
  cmake -S . -B build -DKIT_SOLUTION=ON -DCMAKE_BUILD_TYPE=Release -DKIT_GRADER_SELFTESTS=OFF > build-configure.log 2>&1 ||
  { tail -40 build-configure.log; exit 1; }
  grep -E "^-- (LibTorch|c10d)|Downloading|downloaded" build-configure.log || true'
phase_end

phase_start "build -j$JOBS (user kit)"
as_user 'cmake --build build -j "$JOBS" > build.log 2>&1 || { grep -E "error" build.log | head -40; exit 1; }'
phase_end

phase_start "ctest, quick set (user kit)"
rc=0
as_user 'ctest --test-dir build --output-on-failure -j "$JOBS" > ctest.log 2>&1; rc=$?
  grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|Total Test time" ctest.log; exit $rc' || rc=$?
phase_end

report
echo "logs: $DIR/home/kit/kit/{build-configure.log,build.log,ctest.log}"
if ((rc)); then echo "RESULT: tests FAILED (ctest exit $rc)"; else echo "RESULT: all quick tests passed"; fi
exit "$rc"
