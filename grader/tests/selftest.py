#!/usr/bin/env python3
"""Grader self-test: grade one known submission and check every targeted item's points.

    python3 grader/tests/selftest.py solution|starter|<wrong submission> --work DIR [--assignment N]

Grades assignment N (default 1; its rubric is grader/assignment<N>/rubric.json):
solution: the reference solution plus valid figures must score full marks (the rubric's total).
starter:  the stubs and no figures must score 0 (and build, and finish without a grader error).
<name>:   a known-wrong submission: grader/assignment<N>/wrong_submissions/<name>/. Its
          expected.json says what is wrong and what it scores:
              {"why": "<what is wrong>",
               "edits": [{"file": "pipeline/pipe.cpp", "replace": "<text>", "with": "<text>"}, ...],
               "items": {"<item name substring>": expected points, ...},
               "test_timeout": seconds per case (optional), "output_contains": ["..."] (optional),
               "grade_args": ["--symbol-action", "flag"] (optional: more grade.py options),
               "watch_after_s": S (optional: results.json must not change in the S seconds after
                                   the grader returned),
               "then_solution": true (optional: the solution graded next in the same work dir
                                      must still score full marks),
               "base": "starter" (optional: the edits apply to the starter's stubs instead of the
                                  solution, and the figures are left out),
               "stub_files": ["pipeline_training/step.cpp", ...] (optional: these student files
                             are the starter's stubs, the others the solution: a submission that
                             leaves one problem undone must keep the other problems' points),
               "in_ci": true (optional: in the tier scripts/test.sh runs; the others run with
                              scripts/test.sh --full, tests/CMakeLists.txt)}
          The submission is the solution files with those edits (each "replace" text must occur
          exactly once in solution/<file>, so an edit that no longer fits the solution is an
          error, not a silently correct submission) plus figures; only the listed items are graded.
All self-tests, of every assignment, share one --work dir, so each is an incremental rebuild;
with --prebuilt BUILD (ctest passes the main build) the work dir links BUILD's given and test
objects instead of compiling them (grade.py --prebuilt). Each grades through
grade.py's command line (results.json written into the work dir, where a submission's leftover
processes would look for it), and fails when any process runs a program from the work dir
after the grader returned.
"""
import argparse
import os
import json
import shutil
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

GRADER = Path(__file__).resolve().parent.parent
KIT = GRADER.parent
sys.path.insert(0, str(GRADER))
import grade  # noqa: E402


def tiny_png(w=4, h=3):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + b"\x20\x40\x80" * w for _ in range(h))
    return (grade.PNG_SIGNATURE + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def make_submission(dst: Path, rubric, with_solution: bool, edits=(), base="solution", stub_files=()):
    if base == "starter":
        for f in rubric["student_files"]:
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(KIT / "starter" / f, dst / f)
    elif with_solution:
        for f in rubric["student_files"]:
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(KIT / "solution" / f, dst / f)
        figs = dst / "submit_figures"
        figs.mkdir()
        for it in rubric["items"]:
            for name in it.get("figures", []):
                (figs / name).write_bytes(tiny_png())
    for f in stub_files:
        if f not in rubric["student_files"]:
            raise SystemExit(f"stub_files: {f} is not one of the rubric's student files {rubric['student_files']}")
        shutil.copy(KIT / "starter" / f, dst / f)
    for e in edits:
        path = dst / e["file"]
        text = path.read_text()
        if text.count(e["replace"]) != 1:
            raise SystemExit(f"edit of {e['file']}: the text to replace occurs {text.count(e['replace'])} times "
                             f"in the {base}, not once; update the edit:\n{e['replace']}")
        path.write_text(text.replace(e["replace"], e["with"]))


def leftovers(work: Path):
    """Processes running a program from the work dir (the test programs and their children)."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                exe = os.readlink(f"/proc/{d}/exe")
            except OSError:
                continue
            if exe.startswith(str(work) + "/"):
                found.append(f"{d} {exe}")
    return found


def wrong_submissions_dir(assignment: int) -> Path:
    return GRADER / f"assignment{assignment}" / "wrong_submissions"


def grade_once(sub: Path, work: Path, jobs: int, items, test_timeout, assignment=1, extra=(), prebuilt=None):
    out = work / "selftest-results.json"
    argv = grade.check_argv(sub, work, out, jobs, assignment, items, test_timeout, prebuilt)
    grade.main(argv + list(extra))
    return out, out.read_bytes()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help="solution, starter, or the folder name of a wrong submission")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--assignment", type=int, default=1, metavar="N",
                    help="which assignment's rubric, solution and wrong submissions (default 1)")
    ap.add_argument("--prebuilt", type=Path, metavar="BUILD",
                    help="grade.py --prebuilt: link the given and test objects of BUILD, a finished build of "
                         "this checkout (ctest passes the main build), instead of compiling them again")
    args = ap.parse_args(argv)
    if args.assignment not in grade.assignments():
        ap.error(f"there is no assignment {args.assignment}: this kit has assignments "
                 + ", ".join(map(str, grade.assignments())))
    work = args.work.resolve()
    work = grade.reachable_work(work)
    rubric = grade.enabled_items(grade.load_rubric(assignment=args.assignment))  # as the grader sees it
    spec = {}
    if args.name not in ("solution", "starter"):
        path = wrong_submissions_dir(args.assignment) / args.name / "expected.json"
        if not path.is_file():
            ap.error(f"no {path}: assignment {args.assignment}'s wrong submissions are in "
                     f"{wrong_submissions_dir(args.assignment)}/<name>/expected.json")
        spec = json.loads(path.read_text())
    expected, edits = spec.get("items", {}), spec.get("edits", [])
    items = list(expected) or None
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="grader-selftest-") as tmp:
        sub = Path(tmp) / "submission"
        sub.mkdir()
        make_submission(sub, rubric, args.name != "starter", edits, spec.get("base", "solution"),
                        spec.get("stub_files", []))
        out, written = grade_once(sub, work, args.jobs, items, spec.get("test_timeout"), args.assignment,
                                  spec.get("grade_args", []), args.prebuilt)
    results = json.loads(written)
    bad = []
    if spec.get("watch_after_s"):
        time.sleep(spec["watch_after_s"])
        if out.read_bytes() != written:
            bad.append(f"results.json changed in the {spec['watch_after_s']} s after the grader returned")
    # Only a dishonest submission may be caught by the symbol check: the solution, the starter
    # and every submission that is merely wrong compile to calls on the allowlist.
    symbol = [t for t in results["tests"] if t["name"].startswith("Symbol check")]
    if not args.name.startswith("cheat_"):
        if len(symbol) != 1 and (args.name in ("solution", "starter") or symbol):
            bad.append(f"the results have {len(symbol)} symbol check items, not 1")
        elif symbol and symbol[0]["status"] != "passed":
            bad.append("the symbol check found something in a submission that is not dishonest:\n"
                       + symbol[0]["output"][:3000])
    left = leftovers(work)
    if left:
        bad.append("processes left running after grading:\n  " + "\n  ".join(left[:20]))
    full = sum(item["points"] for item in rubric["items"])
    if args.name == "solution":
        if abs(results["score"] - full) > 1e-6:
            bad.append(f"the solution scored {results['score']}, not the rubric's {full}")
    elif args.name == "starter":
        if results["score"] != 0:
            bad.append(f"the starter scored {results['score']}, not 0")
        if results["output"].startswith("grader error"):  # a 0 that graded nothing proves nothing
            bad.append("the grader failed instead of grading the starter: " + results["output"][:3000])
        # The starter's stubs must compile (CI compiles them nowhere else when the self-tests run).
        text = results["output"] + "".join(t["output"] for t in results["tests"])
        for sign in ("the kit did not build", " does not compile:"):
            if sign in text:
                bad.append(f"the starter does not build ('{sign.strip()}'): " + text[text.find(sign) - 200:][:3000])
    else:
        for key, pts in expected.items():
            got = [t for t in results["tests"] if key in t["name"]]
            if len(got) != 1:
                bad.append(f"'{key}' matches {len(got)} rubric items, not 1")
            elif abs(got[0]["score"] - pts) > 1e-6:
                bad.append(f"{got[0]['name']}: scored {got[0]['score']}, expected {pts}\n{got[0]['output'][:3000]}")
        text = json.dumps(results)
        for c in spec.get("output_contains", []):
            if c not in text:
                bad.append(f"the results do not mention {c!r}")
    if spec.get("then_solution"):
        with tempfile.TemporaryDirectory(prefix="grader-selftest-") as tmp:
            sub = Path(tmp) / "submission"
            sub.mkdir()
            make_submission(sub, rubric, True)
            _, written = grade_once(sub, work, args.jobs, None, None, args.assignment, prebuilt=args.prebuilt)
        after = json.loads(written)
        if abs(after["score"] - full) > 1e-6:
            bad.append(f"the solution graded next in the same work dir scored {after['score']}, not {full}:\n"
                       + after["output"][-3000:])
    print(f"self-test {args.name} (assignment {args.assignment}): {time.time() - t0:.0f} s")
    for b in bad:
        print("FAIL: " + b)
    if bad:
        print(results["output"][-4000:])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
