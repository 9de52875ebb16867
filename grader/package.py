#!/usr/bin/env python3
"""Build the two things an instructor hands out.

    python3 grader/package.py student    [--out kit-student.zip]   # what students get
    python3 grader/package.py gradescope [--out autograder.zip]    # Gradescope's autograder

student:    the files git tracks, minus the reference solution and the grader internals:
            starter (stubs), given code, public tests, handout, plots, scripts, cmake,
            CMakeLists.txt and grader/rubric.json (CMake reads it).
gradescope: setup.sh and run_autograder at the zip's root, and the kit (with grader/, without
            solution/ and wrong submissions) under kit/. setup.sh installs the packages with
            scripts/install_deps.sh and builds the kit once, so grading is an incremental build;
            run_autograder grades /autograder/submission into /autograder/results/results.json.
"""
import argparse
import subprocess
import sys
import zipfile
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent
GRADER_PUBLIC = {"grader/rubric.json"}

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once when the image is built.
set -euo pipefail
cd /autograder/source
bash kit/scripts/install_deps.sh
# Build the kit once with the starter stubs: each submission is then an incremental build.
python3 kit/grader/grade.py --build-only --work /autograder/work --out /tmp/prebuild.json kit
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission.
mkdir -p /autograder/results
python3 /autograder/source/kit/grader/grade.py /autograder/submission \\
    --work /autograder/work --out /autograder/results/results.json
"""


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=KIT, check=True, capture_output=True).stdout
    return [f for f in out.decode().split("\0") if f and (KIT / f).is_file()]


def student_files():
    keep = []
    for f in tracked_files():
        top = f.split("/", 1)[0]
        if top in ("solution", ".ci") or (top == "grader" and f not in GRADER_PUBLIC):
            continue
        keep.append(f)
    return keep


def gradescope_files():
    return [f for f in tracked_files()
            if f.split("/", 1)[0] not in ("solution", ".ci") and not f.startswith("grader/wrong_submissions/")
            and not f.startswith("grader/tests/")]


def write_zip(out: Path, files, prefix, extra=None):
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            info = zipfile.ZipInfo.from_file(KIT / f, prefix + f)
            info.date_time = (2020, 1, 1, 0, 0, 0)  # reproducible
            z.writestr(info, (KIT / f).read_bytes(), zipfile.ZIP_DEFLATED)
        for name, text in (extra or {}).items():
            info = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o755 << 16
            z.writestr(info, text, zipfile.ZIP_DEFLATED)
    print(f"wrote {out} ({len(files) + len(extra or {})} files)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["student", "gradescope"])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--list", action="store_true", help="print the file list, write nothing")
    args = ap.parse_args(argv)
    if args.what == "student":
        files = student_files()
        if args.list:
            print("\n".join(files))
            return 0
        write_zip(args.out or Path("kit-student.zip"), files, "kit/")
    else:
        files = gradescope_files()
        if args.list:
            print("\n".join(files))
            return 0
        write_zip(args.out or Path("autograder.zip"), files, "kit/",
                  {"setup.sh": SETUP_SH, "run_autograder": RUN_AUTOGRADER})
    return 0


if __name__ == "__main__":
    sys.exit(main())
