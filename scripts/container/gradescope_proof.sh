#!/usr/bin/env bash
# Grades on an Ubuntu system as Gradescope would: debootstraps Ubuntu (minbase; default 24.04
# "noble", or 22.04 "jammy") into DIR, unpacks the Gradescope zip of assignment N
# (grader/package.py gradescope) into /autograder/source, runs its setup.sh as root (the
# install route scripts/setup_route.py picks there, then the prebuild), then grades the
# reference solution's student files through run_autograder and checks that
# /autograder/results/results.json gives every item with tests full marks (figure items are
# graded by hand from submit_figures/, which this proof does not upload). Not part of CI.
#
#   sudo scripts/container/gradescope_proof.sh DIR [noble|jammy] [N]
#
# Environment: JOBS (default 2), KIT_UBUNTU_MIRROR (default http://archive.ubuntu.com/ubuntu).
# KIT_SETUP_ROUTE, KIT_TORCH_SPEC and KIT_TORCH_INDEX
# pass through to setup.sh. A DIR from an earlier run is reused (its system, its venv);
# KIT_PROOF_KEEP_WORK=1 also keeps its /autograder/work.
set -euo pipefail
DIR=${1:?usage: sudo $0 DIR [noble|jammy] [N]}
SUITE=${2:-noble}
N=${3:-1}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
source "$REPO/scripts/container/chroot_lib.sh"
MIRROR=${KIT_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}

# ---- 1. Ubuntu, checked against its archive key ----------------------------------------
# Debian's debootstrap has no Ubuntu key: take it from Ubuntu's own ubuntu-keyring package.
keyring=$DIR.keyring.gpg
if [[ ! -s "$keyring" ]]; then
  deb=$(mktemp -d)
  curl -fsSL "$MIRROR/dists/$SUITE/main/binary-amd64/Packages.xz" | xzcat \
    | awk '/^Package: ubuntu-keyring$/{p=1} p && !done && /^Filename:/{print $2; done=1}' > "$deb/name"
  curl -fsSL -o "$deb/k.deb" "$MIRROR/$(cat "$deb/name")"
  (cd "$deb" && ar x k.deb && tar -xf data.tar.* ./usr/share/keyrings/ubuntu-archive-keyring.gpg)
  cp "$deb/usr/share/keyrings/ubuntu-archive-keyring.gpg" "$keyring"
  rm -rf "$deb"
fi
[[ -e /usr/share/debootstrap/scripts/$SUITE ]] \
  || DEBOOTSTRAP_SCRIPT=/usr/share/debootstrap/scripts/gutsy   # every Ubuntu release since
bootstrap "$SUITE" --keyring="$keyring" --components=main,universe
# As Ubuntu's own images: main and universe, with -updates and -security.
cat > "$DIR/etc/apt/sources.list" <<SRC
deb $MIRROR $SUITE main universe
deb $MIRROR $SUITE-updates main universe
deb $MIRROR $SUITE-security main universe
SRC

# ---- 2. the autograder zip, unpacked where Gradescope puts it ------------------------------
phase_start "package.py gradescope --assignment $N"
zip=$(mktemp --suffix=.zip)
python3 "$REPO/grader/package.py" gradescope --assignment "$N" --out "$zip" >/dev/null
# Fresh, as on Gradescope; KIT_PROOF_KEEP_WORK=1 keeps /autograder/work (the prebuild) of a
# run before, to try a change without the cold build.
if [[ "${KIT_PROOF_KEEP_WORK:-0}" == 1 ]]; then
  rm -rf "$DIR/autograder/source" "$DIR/autograder/submission" "$DIR/autograder/results"
else
  rm -rf "$DIR/autograder"
fi
mkdir -p "$DIR/autograder/source" "$DIR/autograder/submission"
(cd "$DIR/autograder/source" && unzip -q "$zip")
rm -f "$zip"
phase_end

in_root() {   # as root in DIR, Gradescope's environment: nothing of the host's
  chroot "$DIR" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 ${KIT_SETUP_ROUTE:+KIT_SETUP_ROUTE=$KIT_SETUP_ROUTE} ${KIT_TORCH_SPEC:+KIT_TORCH_SPEC=$KIT_TORCH_SPEC} \
    ${KIT_TORCH_INDEX:+KIT_TORCH_INDEX=$KIT_TORCH_INDEX} bash -c "$1"
}

# ---- 3. setup.sh: the route, the install, the prebuild --------------------------------------
phase_start "setup.sh (root)"
rc=0
in_root 'cd /autograder/source && bash setup.sh' > "$DIR.setup.log" 2>&1 || rc=$?
grep -E "^(route|reason|python|setup route):|FAILED|grader error|stopped after" "$DIR.setup.log" || true
((rc == 0)) || { tail -30 "$DIR.setup.log"; echo "error: setup.sh failed, exit $rc (log: $DIR.setup.log)" >&2; exit 1; }
phase_end

# ---- 4. the reference solution graded through run_autograder -----------------------------
phase_start "run_autograder, reference solution"
python3 - "$REPO" "$N" "$DIR/autograder/submission" <<'PY'
import json, shutil, sys
from pathlib import Path
repo, n, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
rubric = repo / f"grader/assignment{n}/rubric.json"
for f in json.loads(rubric.read_text())["student_files"]:
    src = repo / "solution" / f
    (out / f).parent.mkdir(parents=True, exist_ok=True)
    (out / f).write_bytes(src.read_bytes())
PY
in_root 'bash /autograder/source/run_autograder' > "$DIR.run_autograder.log" 2>&1 || true
phase_end

report
python3 - "$DIR/autograder/results/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad = 0
for t in r["tests"]:
    full = abs(t.get("score", 0) - t.get("max_score", 0)) < 1e-6
    figures = "figure" in t["name"].lower()
    bad += not full and not figures
    print(f"  {t.get('score', 0):6g} / {t.get('max_score', 0):<6g} {t['name']}" + ("" if full or figures else "   <- not full marks"))
print("RESULT: " + ("every item with tests has full marks" if not bad and r["tests"] else f"{bad} item(s) below full marks"))
sys.exit(1 if bad or not r["tests"] else 0)
PY
