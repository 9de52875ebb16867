# Shared by the proofs that build the kit in a Debian chroot (debootstrap_proof.sh,
# wheel_route_proof.sh): debootstrap, mounts that are always undone, timed phases, and
# running a command as the user `kit` inside. Sourced, not run; the caller sets DIR.

[[ $(id -u) -eq 0 ]] || { echo "error: debootstrap and chroot need root: sudo $0 ${DIR:-DIR}" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "error: debootstrap not found: apt-get install debootstrap" >&2; exit 1; }
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
[[ "$DIR" != / ]] || { echo "error: DIR must not be /" >&2; exit 1; }
MIRROR=${KIT_MIRROR:-http://deb.debian.org/debian}
JOBS=${JOBS:-2}

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
# Extra VAR=value words for the environment go in USER_ENV.
USER_ENV=()
as_user() {
  chroot --userspec=kit:kit "$DIR" /usr/bin/env -i HOME=/home/kit USER=kit LOGNAME=kit LANG=C.UTF-8 \
    PATH=/usr/local/bin:/usr/bin:/bin JOBS="$JOBS" "${USER_ENV[@]}" \
    bash -c "cd /home/kit/kit && $1"
}

# bootstrap [suite [debootstrap options...]]: a minbase system (default Debian bookworm from
# MIRROR; DEBOOTSTRAP_SCRIPT names debootstrap's script for a suite it does not know) in DIR,
# reused when one is there; the mounts a build and its tests need, and the
# host's name resolution.
bootstrap() {
  local suite=${1:-bookworm}
  phase_start "debootstrap $suite (minbase)"
  if [[ -x "$DIR/usr/bin/apt-get" && -f "$DIR/etc/os-release" ]]; then
    echo "reusing the system already in $DIR"
  else
    debootstrap --variant=minbase "${@:2}" "$suite" "$DIR" "$MIRROR" ${DEBOOTSTRAP_SCRIPT:-} > "$DIR.debootstrap.log" 2>&1 \
      || { tail -20 "$DIR.debootstrap.log"; echo "error: debootstrap failed (log: $DIR.debootstrap.log)" >&2; exit 1; }
  fi
  grep PRETTY_NAME "$DIR/etc/os-release"
  phase_end
  mount_in /proc -t proc proc
  mount_in /sys --bind -o ro /sys
  mount_in /dev --bind /dev
  mount_in /dev/pts --bind /dev/pts
  mount_in /dev/shm -t tmpfs -o mode=1777 shm   # the processes of a test share memory
  cp /etc/resolv.conf "$DIR/etc/resolv.conf"
  cp /etc/hosts "$DIR/etc/hosts"
  trust_host_cas
}

# The host's own certificate authorities (/usr/local/share/ca-certificates: e.g. a proxy that
# inspects TLS) trusted inside too, by the system store and by pip (whose own bundle would
# not have them). Nothing to do on a machine without any.
trust_host_cas() {
  local cas=(/usr/local/share/ca-certificates/*.crt)
  [[ -e "${cas[0]}" ]] || return 0
  mkdir -p "$DIR/usr/local/share/ca-certificates"
  cp "${cas[@]}" "$DIR/usr/local/share/ca-certificates/"
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "$DIR/etc/pip.conf"
  # ca-certificates, once installed, adds them; where it already is, add them now.
  if [[ -x "$DIR/usr/sbin/update-ca-certificates" ]]; then chroot "$DIR" update-ca-certificates >/dev/null; fi
  echo "trusting the host's own certificate authorities inside: ${cas[*]##*/}"
}

# copy_kit <repo>: the user `kit`, and the working tree (tracked and new files) in its home,
# as a git checkout (grader/package.py lists its files with git).
copy_kit() {
  phase_start "user kit, copy the kit"
  chroot "$DIR" id kit >/dev/null 2>&1 || chroot "$DIR" useradd --create-home --shell /bin/bash kit
  rm -rf "$DIR/home/kit/kit"
  mkdir -p "$DIR/home/kit/kit"
  git -C "$1" ls-files -z --cached --others --exclude-standard \
    | (cd "$1" && tar --null --files-from=- --ignore-failed-read -cf -) \
    | tar -xf - -C "$DIR/home/kit/kit"
  chroot "$DIR" chown -R kit:kit /home/kit/kit
  if chroot "$DIR" sh -c 'command -v git' >/dev/null; then as_user 'git init -q .'; fi
  phase_end
}

# build_and_test <what> <cmake --build args> <ctest args> <result when they pass>: as the user
# kit, builds and runs the tests (each a timed phase), prints the times and the result, and
# exits with ctest's status.
build_and_test() {
  phase_start "build $1 -j$JOBS (user kit)"
  as_user "cmake --build build -j \"\$JOBS\" $2 > build.log 2>&1 || { grep -E 'error' build.log | head -40; exit 1; }"
  phase_end
  phase_start "ctest $1 (user kit)"
  local rc=0
  as_user "ctest --test-dir build --output-on-failure $3 > ctest.log 2>&1; rc=\$?
    grep -E 'tests passed|tests failed|\(Failed\)|\(Timeout\)|Not Run|Total Test time' ctest.log; exit \$rc" || rc=$?
  phase_end
  report
  echo "logs: $DIR/home/kit/kit/{build-configure.log,build.log,ctest.log}"
  if ((rc)); then echo "RESULT: tests FAILED (ctest exit $rc)"; else echo "RESULT: $4"; fi
  exit "$rc"
}
