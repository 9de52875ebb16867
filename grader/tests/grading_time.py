#!/usr/bin/env python3
"""How long grading an assignment's graded cases takes, three ways, in one run on one build:
one process per case playing both roles (as cases ran before the judge existed), subject +
judge in a process each, one case at a time, and in batches (what the grader does,
grader/README.md). Every case must pass each way on a solution build.

    python3 grader/tests/grading_time.py --build build --assignment 1

Runs as root with the grader's sandbox users (do not run two gradings at once).
"""
import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import cases  # noqa: E402
import grade  # noqa: E402
from sandbox import Sandbox  # noqa: E402

WAYS = ("one process", "subject + judge, one by one", "batches")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, required=True, help="a KIT_SOLUTION build")
    ap.add_argument("--assignment", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    rubric = grade.load_rubric(grade.KIT, args.assignment)
    programs = grade.suite_programs(args.build.resolve(), grade.graded_suites(rubric))
    sandbox, times, failed = Sandbox(args.jobs), {}, 0
    with tempfile.TemporaryDirectory(prefix="grading-time-") as scratch:
        scratch = Path(scratch)
        os.chmod(scratch, 0o755)
        log = []
        wanted = grade.wanted_cases(grade.list_cases(None, programs, scratch, log), rubric["items"], rubric)
        batch = cases.BATCH_CASES
        for way in WAYS:
            progs = {s: dict(p) for s, p in programs.items()}
            if way == "one process":
                for p in progs.values():
                    p.pop("judge", None)
            cases.BATCH_CASES = batch if way == "batches" else 0  # run_tests reads it there
            t0 = time.time()
            res = grade.run_tests(sandbox, progs, wanted, args.jobs, 24 * 3600, None, rubric.get("may_skip", []),
                                  scratch, log)
            times[way] = time.time() - t0
            bad = sorted(k for k, (v, _) in res.items() if v not in ("pass", "skip"))
            failed += len(bad)
            print(f"{way}: {len(res)} cases in {times[way]:.1f} s" + (f", {len(bad)} not passed: {bad[:3]}" if bad else ""),
                  flush=True)
        cases.BATCH_CASES = batch
    print(json.dumps({"seconds": {k: round(v, 1) for k, v in times.items()},
                      "ratio to one process": {k: round(v / times[WAYS[0]], 2) for k, v in times.items()}}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
