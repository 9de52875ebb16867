#!/usr/bin/env python3
"""Build the two things an instructor hands out, for one assignment.

    python3 grader/package.py student    [--assignment N] [--out kit-student.zip]  # what students get
    python3 grader/package.py gradescope [--assignment N] [--out autograder.zip]   # Gradescope's autograder

An assignment is a rubric: assignment N is grader/assignment<N>/rubric.json. Its own material is
that rubric's folder, the test suites its items name (tests/<suite>/, grader/hidden_tests/<suite>/)
and its handout chapter (handout/assignment<N>.md; handout/README.md, the index and what every
assignment shares, ships with each). A package of assignment N leaves out every other
assignment's own material, except Assignment 1's rubric, which every package carries (CMake and
grade.py learn Assignment 1's student files from it where there is no grader/bundle.json, as in a
Gradescope kit); given code, shared tests and the starter stubs of every student file ship with
each (the programs share them).

student:    the files git tracks, minus the reference solution, the grader internals and the
            other assignments' own material: starter (stubs), given code, public tests, handout,
            plots, scripts, cmake, CMakeLists.txt, grader/assignment1/rubric.json,
            grader/assignment<N>/rubric.json (CMake reads them), and what grades locally: grade.py with its sandbox
            and checks (python3 grader/grade.py --local build: the public cases; the bundle has
            no hidden tests) and grader/bundle.json (which assignment, which solutions it holds).
            starter/ holds the reference solution of every earlier assignment's student files
            (verbatim, markers included), because assignment N's programs and tests run them
            (Assignment 2's pipelines run Assignment 1's Pipe, the 3D grid runs Assignment 2's
            code); --stubs-of K ships assignment K's stubs instead, for a course that does not
            release K's solution (its students then copy their own files of K into starter/).
gradescope: setup.sh and run_autograder at the zip's root, both passing --assignment N, and the
            kit (with grader/, assignment N's rubric and hidden tests, without solution/ and wrong
            submissions) under kit/. setup.sh installs the dependencies by the route that works
            on the image (scripts/autograder_setup.sh: Debian's packages or the torch wheel)
            and builds the kit once, so grading is an incremental build; run_autograder grades
            /autograder/submission into /autograder/results/results.json.
"""
import argparse
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

KIT = Path(__file__).resolve().parent.parent

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once when the image is built: the install route that works on this
# base image (it prints which and why), then the kit built once with the starter stubs, so
# each submission is an incremental build.
set -euo pipefail
bash /autograder/source/kit/scripts/autograder_setup.sh {n}
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for every submission.
mkdir -p /autograder/results
source /autograder/source/kit/build_env.sh   # the LibTorch setup.sh installed (its route)
python3 /autograder/source/kit/grader/grade.py /autograder/submission --assignment {n} \\
    --work /autograder/work --out /autograder/results/results.json
"""


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=KIT, check=True, capture_output=True).stdout
    return [f for f in out.decode().split("\0") if f and (KIT / f).is_file()]


# ---------------------------------------------------------------- assignments
def rubric_path(n: int) -> str:
    return f"grader/assignment{n}/rubric.json"


# Shipped in every package although it belongs to Assignment 1: where there is no
# grader/bundle.json (a Gradescope kit), CMake and grade.py learn Assignment 1's student files,
# whose stubs every later assignment builds, from it.
SHARED_RUBRIC = rubric_path(1)


def assignments():
    """N for every grader/assignment<N>/rubric.json, in order."""
    found = [int(m.group(1)) for p in (KIT / "grader").glob("assignment*/rubric.json")
             if (m := re.fullmatch(r"assignment([0-9]+)", p.parent.name)) and int(m.group(1)) >= 1]
    return sorted(found)


def rubric(n: int):
    if n not in assignments():
        raise SystemExit(f"error: there is no assignment {n}: this kit has assignments "
                         + ", ".join(map(str, assignments()))
                         + " (assignment N is grader/assignment<N>/rubric.json)")
    return json.loads((KIT / rubric_path(n)).read_text())


def suites(n: int):
    """The test suites assignment n's rubric items name (a test name is <suite>.<gtest name>),
    plus its ungraded ones ("own_suites": tests of its given code that need its student files)."""
    r = rubric(n)
    return {t.split(".")[0] for it in r["items"] for t in it.get("tests", [])} | set(r.get("own_suites", []))


def own_material(n: int, keep_suites=()):
    """Path prefixes that belong to assignment n alone (suites in keep_suites are shared)."""
    prefixes = [f"handout/assignment{n}.md", f"handout/assignment{n}/", f"grader/assignment{n}/"]
    for s in sorted(suites(n) - set(keep_suites)):
        prefixes += [f"tests/{s}/", f"grader/hidden_tests/{s}/"]
    return prefixes


def without_other_assignments(files, n: int):
    """files minus every other assignment's own material. A test file that a file still in the
    list includes (a shared test helper) stays."""
    others = [p for k in assignments() if k != n for p in own_material(k, keep_suites=suites(n))]
    keep = [f for f in files if f == SHARED_RUBRIC or not f.startswith(tuple(others))]
    dropped = set(files) - set(keep)
    todo = [f for f in keep if f.startswith(("tests/", "grader/hidden_tests/"))]
    while todo:
        f = todo.pop()
        for inc in re.findall(r'^\s*#\s*include\s*"([^"]+)"', (KIT / f).read_text(errors="replace"), re.M):
            for cand in (str(Path(f).parent / inc), "tests/" + inc):
                if cand in dropped:
                    dropped.discard(cand)
                    keep.append(cand)
                    todo.append(cand)
    return sorted(keep, key=files.index)


# ---------------------------------------------------------------- the two packages
# The grader's files a student bundle carries: the grader itself, so that students grade their own
# build on the public cases (python3 grader/grade.py --local build), and the speed gates' harness,
# so that they can time their code as the grader would (python3 grader/perf_gates.py --build build).
PUBLIC_GRADER_FILES = ("grader/grade.py", "grader/rubric.py", "grader/submission.py", "grader/cases.py",
                       "grader/cpp_source.py", "grader/objects.py", "grader/sandbox.py", "grader/symbols.py",
                       "grader/symbols.json", "grader/perf/perf_worker.cpp", "grader/perf_gates.py")
BUNDLE_INFO = "grader/bundle.json"


def student_files(assignment=1):
    public = {SHARED_RUBRIC, rubric_path(assignment), *PUBLIC_GRADER_FILES}  # CMake reads the rubrics
    keep = []
    for f in tracked_files():
        top = f.split("/", 1)[0]
        if top in ("solution", ".ci") or (top == "grader" and f not in public):
            continue
        keep.append(f)
    return without_other_assignments(keep, assignment)


def earlier_solutions(assignment, stubs_of=()):
    """The earlier assignments whose reference solution a student bundle of `assignment` carries:
    every one but those in stubs_of."""
    for k in stubs_of:
        if k not in assignments() or k >= assignment:
            raise SystemExit(f"error: --stubs-of {k}: name an earlier assignment than {assignment} "
                             f"(this kit has {', '.join(map(str, assignments()))})")
    return [k for k in assignments() if k < assignment and k not in stubs_of]


def solutions_of(earlier):
    """{starter/<f>: reference text} for the student files of each earlier assignment, verbatim
    (the BEGIN/END SOLUTION markers show what the problem was; and the file is then byte for
    byte the one a KIT_SOLUTION build compiled, which a build with KIT_PREBUILT links)."""
    out = {}
    for k in earlier:
        for f in rubric(k)["student_files"]:
            src = KIT / "solution" / f
            if not src.is_file():
                raise SystemExit(f"error: {src} does not exist: a student bundle of a later assignment needs "
                                 "the instructor's checkout (or --stubs-of " + str(k) + ")")
            out["starter/" + f] = src.read_text()
    return out


def bundle_info(assignment, earlier):
    """grader/bundle.json: which assignment, whose solutions starter/ holds, and every assignment's
    student files (the bundle lacks the other rubrics; CMake and grade.py read the lists here)."""
    return json.dumps({"assignment": assignment, "solutions_of": earlier,
                       "stubs_of": [k for k in assignments() if k < assignment and k not in earlier],
                       "student_files": {str(k): rubric(k)["student_files"] for k in assignments()}},
                      indent=1) + "\n"


# The bundle's README.md is the student's (grader/student_README.md, filled in per assignment);
# the instructor's README.md stays in the repository. Times measured on 2 cores.
STUDENT_README = "grader/student_README.md"
README_FILLS = {
    1: {"title": "Assignment 1: data parallelism and pipeline parallelism",
        "first_build": "about 6 minutes (366 s measured: configure and build, packages installed)",
        "grade_time": "about 20 seconds for the grade (given tests before it: a few minutes)",
        "measure": "`scripts/main_job.sh`: the four runs of Problems 1.3 and 2 in the handout's configuration, "
                   "then `plot_figures`", "measure_time": "about 12 minutes (742 s measured)"},
    2: {"first_build": "about 9 minutes (517 s measured on 2 cores: configure and build, packages installed)",
        "grade_time": "about a minute for the grade with the stubs (57 s measured; `scripts/test.sh` with the "
                      "given tests before it 136 s), a few minutes with every function done (it prints its time)",
        "measure": "each problem's command in the handout (`scripts/pipeline_job.sh` for Problem 3.3, "
                   "`bench/*.py` for Problems 4 and 5)", "measure_time": "stated beside each command"},
    3: {"first_build": "about 8 minutes (483 s measured: configure and build, packages installed)",
        "grade_time": "about 20 seconds with the stubs (16 s measured), longer with every function done "
                      "(it prints its time)",
        "measure": "each problem's command in the handout (`bench/*.py`)", "measure_time": "stated beside each command"},
}


def student_readme(assignment, earlier) -> str:
    fill = dict(README_FILLS.get(assignment, {}))
    fill.setdefault("title", rubric(assignment).get("title", f"Assignment {assignment}"))
    for k in ("first_build", "grade_time", "measure", "measure_time"):
        fill.setdefault(k, "see the handout")
    fill["earlier"] = ("" if not earlier else
                       "\n\n`starter/` also holds the reference solution of the student files of assignment"
                       + ("s " if len(earlier) > 1 else " ") + ", ".join(map(str, earlier))
                       + ": this assignment's programs and tests run them. They are not yours to submit.")
    return (KIT / STUDENT_README).read_text().format(n=assignment, **fill)


def handout_index(assignment) -> str:
    """handout/README.md with the other assignments' handouts named, not linked: the bundle has
    only its own."""
    text = (KIT / "handout/README.md").read_text()
    for k in assignments():
        if k != assignment:
            text = text.replace(f"[assignment{k}.md](assignment{k}.md)", f"assignment{k}.md (not in this bundle)")
    return text


def gradescope_files(assignment=1):
    files = [f for f in tracked_files()
             if f.split("/", 1)[0] not in ("solution", ".ci") and not f.startswith("grader/tests/")
             and not re.match(r"grader/assignment[0-9]+/wrong_submissions/", f)]
    return without_other_assignments(files, assignment)


def write_zip(out: Path, files, prefix, extra=None, replace=None):
    """files from the kit under prefix, with replace[f] as f's content where given, and extra
    {name: text} executables at the zip's root."""
    out.parent.mkdir(parents=True, exist_ok=True)
    replace = replace or {}
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            if (KIT / f).is_file():
                info = zipfile.ZipInfo.from_file(KIT / f, prefix + f)
            else:  # written by the packager (grader/bundle.json)
                info = zipfile.ZipInfo(prefix + f)
                info.external_attr = 0o644 << 16
            info.date_time = (2020, 1, 1, 0, 0, 0)  # reproducible
            data = replace[f].encode() if f in replace else (KIT / f).read_bytes()
            z.writestr(info, data, zipfile.ZIP_DEFLATED)
        for name, text in (extra or {}).items():
            info = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o755 << 16
            z.writestr(info, text, zipfile.ZIP_DEFLATED)
    print(f"wrote {out} ({len(files) + len(extra or {})} files)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("what", choices=["student", "gradescope"])
    ap.add_argument("--assignment", type=int, default=1, metavar="N",
                    help="which assignment (default 1; its rubric is grader/assignment<N>/rubric.json)")
    ap.add_argument("--stubs-of", type=int, action="append", default=[], metavar="K",
                    help="student bundle only: starter/ gets the stubs of earlier assignment K's student files "
                         "instead of their reference solution (repeatable; the default ships every earlier "
                         "assignment's solution, which the later programs and tests run)")
    ap.add_argument("--out", type=Path, help="the zip to write (default: kit-student.zip / autograder.zip for "
                                              "assignment 1, kit-student-a<N>.zip / autograder-a<N>.zip for N)")
    ap.add_argument("--list", action="store_true", help="print the file list, write nothing")
    args = ap.parse_args(argv)
    n = args.assignment
    rubric(n)  # a clear error for an assignment that does not exist
    if args.what == "student":
        earlier = earlier_solutions(n, args.stubs_of)
        files, replace = student_files(n) + [BUNDLE_INFO], solutions_of(earlier)
        replace[BUNDLE_INFO] = bundle_info(n, earlier)
        replace["README.md"] = student_readme(n, earlier)
        replace["handout/README.md"] = handout_index(n)
        if args.list:
            print("\n".join(f + ("  (reference solution)" if f in replace and f != BUNDLE_INFO else "")
                            for f in files))
            return 0
        write_zip(args.out or Path("kit-student.zip" if n == 1 else f"kit-student-a{n}.zip"), files, "kit/",
                  replace=replace)
    else:
        if args.stubs_of:
            ap.error("--stubs-of applies to the student bundle only")
        files = gradescope_files(n)
        if args.list:
            print("\n".join(files))
            return 0
        write_zip(args.out or Path("autograder.zip" if n == 1 else f"autograder-a{n}.zip"), files, "kit/",
                  {"setup.sh": SETUP_SH.format(n=n), "run_autograder": RUN_AUTOGRADER.format(n=n)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
