#!/usr/bin/env python3
"""A student's path, checked from the bundles package.py makes: for each assignment, the student
bundle is packaged, unzipped and built, and its README's test command (scripts/test.sh) runs in
it as written: the given tests must pass on the starter, and the local grade it ends with
(grader/grade.py --local) must give every item 0, each test item with "not implemented"
messages, never a crash or a grader error. With --with-solution the reference solution of the
assignment's files is then copied into the bundle's starter/ and graded again: every test item
must get full marks on the public cases.

    python3 grader/tests/bundle_check.py --prebuilt build [--assignment N ...] [--with-solution]

--prebuilt BUILD (a finished KIT_SOLUTION build of this checkout, as CI has) is passed to the
bundle's configure through KIT_CMAKE_ARGS as KIT_PREBUILT, with every student file in
KIT_PREBUILT_STUBS and no precompiled header: the given code, tests and programs link that
build's objects and every student file (a stub, or an earlier assignment's solution shipped
verbatim) links that build's object of the same file, so a bundle builds in about a minute
instead of half an hour, and the bundle runs every sixth given test (ctest -I ,,6; the prebuilt
build ran them all on the same objects; --every-test runs them all). Without it the bundle builds
from scratch and runs every test, as a student's does.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(KIT / "grader"))
import grade  # noqa: E402


def check_results(results, want_full: bool) -> list:
    """What is wrong with a local grade of the starter (want_full False) or of the solution."""
    problems = []
    if "grader error" in results["output"]:
        problems.append("grader error: " + results["output"][-2000:])
    for t in results["tests"]:
        if t["max_score"] == 0:
            continue
        tested = "test cases passed" in t["output"] or "FAILED" in t["output"] or "no test case ran" in t["output"]
        if want_full:
            if tested and t["score"] != t["max_score"]:
                problems.append(f"{t['name']}: {t['score']} / {t['max_score']} for the reference solution:\n"
                                + t["output"][-1500:])
        else:
            if t["score"] != 0:
                problems.append(f"{t['name']}: {t['score']} points for the starter")
            if tested and "not implemented" not in t["output"]:
                problems.append(f"{t['name']}: no 'not implemented' message for the starter:\n" + t["output"][-800:])
            if "speed gate" not in t["name"].lower() and not tested and "submit_figures" not in t["output"]:
                problems.append(f"{t['name']}: neither cases nor figures graded:\n" + t["output"][-800:])
    return problems


def run_logged(cmd, cwd, env, log: Path, timeout):
    t0 = time.time()
    with open(log, "ab") as out:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    return p.returncode, time.time() - t0


def check_bundle(n: int, scratch: Path, prebuilt, with_solution: bool, timeout: int, every_test: bool = True) -> list:
    out = scratch / f"kit-student-a{n}.zip"
    subprocess.run([sys.executable, str(KIT / "grader/package.py"), "student", "--assignment", str(n),
                    "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    root = scratch / f"a{n}"
    with zipfile.ZipFile(out) as z:
        z.extractall(root)
        for m in z.infolist():  # as unzip does: zipfile's extractall drops the mode bits
            if (m.external_attr >> 16) & 0o111:
                os.chmod(root / m.filename, 0o755)
    kit = root / "kit"
    env = dict(os.environ)
    env.pop("KIT_REQUIRE_TORCH_PYTHON", None)
    if prebuilt:
        files = grade.all_student_files(KIT)
        env["KIT_CMAKE_ARGS"] = (f"-DKIT_PREBUILT={prebuilt} -DKIT_PREBUILT_STUBS={';'.join(files)} "
                                 "-DKIT_PCH=OFF -DCMAKE_CXX_FLAGS_RELEASE=-O1")
        if not every_test:  # the prebuilt build ran them all on these objects: a sixth checks the bundle's files
            # ctest -I Start,End,Stride: an empty End is the last test ("0,0,3" selected none at all).
            env["KIT_CTEST_ARGS"] = "-I ,,6"
    log = scratch / f"a{n}.log"
    rc, seconds = run_logged(["scripts/test.sh"], kit, env, log, timeout)
    print(f"assignment {n}: scripts/test.sh exit {rc}, {seconds:.0f} s (log {log})", flush=True)
    text = log.read_text(errors="replace")
    if "No tests were found" in text:
        return [f"assignment {n}: the bundle's given tests did not run (ctest found none; log {log})"]
    if rc != 0:
        return [f"assignment {n}: scripts/test.sh failed (exit {rc}):\n" + text[-5000:]]
    problems = check_results(json.loads((kit / "build/results.json").read_text()), want_full=False)
    if with_solution:
        for f in grade.load_rubric(KIT, n)["student_files"]:
            shutil.copyfile(KIT / "solution" / f, kit / "starter" / f)
        rc, seconds = run_logged([sys.executable, "grader/grade.py", "--local", "build", "--out", "build/solution.json"],
                                 kit, env, log, timeout)
        print(f"assignment {n}: local grade of the reference solution exit {rc}, {seconds:.0f} s", flush=True)
        results = json.loads((kit / "build/solution.json").read_text())
        problems += check_results(results, want_full=True)
        print(f"assignment {n}: reference solution {results['score']} points on the public cases", flush=True)
    return [f"assignment {n}: {p}" for p in problems]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prebuilt", type=Path, help="a finished KIT_SOLUTION build of this checkout to link from")
    ap.add_argument("--assignment", type=int, action="append", help="default: every assignment")
    ap.add_argument("--with-solution", action="store_true", help="also grade the reference solution copied in")
    ap.add_argument("--keep", type=Path, help="unzip the bundles here and keep them (default: a temporary dir)")
    ap.add_argument("--timeout", type=int, default=1500, help="seconds per command")
    ap.add_argument("--parallel", type=int, default=2, help="bundles checked at once (default 2; CI: 1, beside other tests)")
    ap.add_argument("--every-test", action="store_true",
                    help="with --prebuilt, run every given test in the bundle (default: every sixth, "
                         "ctest -I ,,6: the prebuilt build already ran them all on the same objects)")
    args = ap.parse_args(argv)
    prebuilt = str(args.prebuilt.resolve()) if args.prebuilt else ""
    problems = []
    with tempfile.TemporaryDirectory(prefix="bundle-check-") as tmp:
        scratch = args.keep.resolve() if args.keep else Path(tmp)
        scratch.mkdir(parents=True, exist_ok=True)
        # Two bundles at a time: much of a bundle's time is one core's (configure, link, package).
        # The longest first, so that the other two share the second worker.
        order = sorted(args.assignment or grade.assignments(KIT), key=lambda n: (n != 2, n))
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel) as pool:
            for found in pool.map(lambda n: check_bundle(n, scratch, prebuilt, args.with_solution, args.timeout,
                                                         args.every_test), order):
                problems += found
    for p in problems:
        print("PROBLEM " + p)
    print("BUNDLES_OK" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
