#!/usr/bin/env python3
"""Runs a suite's cases as the grader does, subject + judge (tests/judge/judge.h), on a build
of this kit: for a test writer checking a converted case before the self-tests.

    python3 grader/tests/run_judged.py --build build --suite pipeline
    python3 grader/tests/run_judged.py --build build --suite pipeline --filter 'SplitModule.*' -v

Each case: the subject (test_<suite>, with the build's student code) writes its records, then the
judge (test_<suite>_judge, the given code and the starter's stubs) judges them. In a solution
build every graded case must pass; a case that passes in a plain run but fails here computes an
expected value with a student function (the judge has only stubs) or depends on something the
subject did not record. Exit status 1 when any case failed.
"""
import argparse
import fnmatch
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import cases as grader_cases  # noqa: E402
import grade  # noqa: E402
from sandbox import Sandbox  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, required=True)
    ap.add_argument("--suite", required=True)
    ap.add_argument("--filter", default="*", help="fnmatch pattern over gtest names (Suite.Case)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=0, help="per case (0: the suite's)")
    ap.add_argument("--one-by-one", action="store_true",
                    help="each case in processes of its own, no batches (as the grader falls back to)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every failed case's output in full")
    args = ap.parse_args(argv)
    programs = grade.suite_programs(args.build.resolve(), [args.suite])
    info = programs[args.suite]
    if "judge" not in info:
        print(f"{args.suite} has no judge: add JUDGE to its kit_add_test_suite in tests/CMakeLists.txt")
        return 2
    sandbox = Sandbox(args.jobs, separate_users=False)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="run-judged-") as scratch:
        scratch = Path(scratch)
        log = []
        cases = grade.list_cases(sandbox, programs, scratch, log)
        wanted = {n: c for n, c in cases.items() if fnmatch.fnmatchcase(c[1], args.filter)
                  and not c[1].startswith("RankRole.")}
        if args.one_by_one:
            grader_cases.BATCH_CASES = 0  # run_tests reads it there
        results = grade.run_tests(sandbox, programs, wanted, args.jobs, 24 * 3600, args.timeout, [], scratch, log)
        print(log[-1])
        for name in sorted(results):
            verdict, out = results[name]
            print(f"{verdict.upper():5} {wanted[name][1]}", flush=True)
            if verdict != "pass":
                failed += 1
                print("    " + (out if args.verbose else grade.failure_message(out, 1200)).replace("\n", "\n    "))
        sandbox.sweep()
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
