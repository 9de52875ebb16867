#!/usr/bin/env python3
"""Proof of the speed gates on this machine: grade the reference solution and each known-wrong
submission of grader/tests/perf_wrong_submissions/ several times with every gate on, and print each
verdict, the ratios' spread and whether every verdict was the expected one.

    python3 grader/tests/perf_proof.py                    # 5 gradings of the solution, 2 of each wrong one
    python3 grader/tests/perf_proof.py --runs 10 --wrong-runs 3 --work /tmp/perf-proof

Not a CI test (it times things): run it on the machine whose verdicts you want to know.
Only the speed gates are graded (--items "Speed gate"); the first grading builds the kit.
"""
import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import grade  # noqa: E402
import selftest  # noqa: E402

WRONG = HERE / "perf_wrong_submissions"


def gate_entries(results):
    """{item name: (score, max, median ratio or None)} of the speed-gate items."""
    out = {}
    for t in results["tests"]:
        if t["name"].startswith("Speed gate"):
            m = re.findall(r"median speed-up ([0-9.]+)x", t["output"])  # the last attempt's
            out[t["name"]] = (t["score"], t["max_score"], float(m[-1]) if m else None, t["output"])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="gradings of the solution (default 5)")
    ap.add_argument("--wrong-runs", type=int, default=2, help="gradings of each wrong submission (default 2)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "kit-perf-proof",
                    help="the grader's work dir (kept: later runs are warm)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--show", action="store_true", help="print every gate's full output")
    args = ap.parse_args(argv)
    rubric = grade.load_rubric()
    gates = [it for it in rubric["items"] if "performance" in it]
    plan = [("solution", {}, {it["name"]: it["points"] for it in gates})] * args.runs
    for d in sorted(p for p in WRONG.iterdir() if (p / "expected.json").is_file()):
        spec = json.loads((d / "expected.json").read_text())
        expected = {it["name"]: pts for it in gates for key, pts in spec["items"].items() if key in it["name"]}
        plan += [(d.name, spec, expected)] * args.wrong_runs
    ratios, wrong_verdicts, lines = {}, 0, []
    for k, (name, spec, expected) in enumerate(plan, 1):
        with tempfile.TemporaryDirectory() as tmp:
            sub = Path(tmp) / "sub"
            sub.mkdir()
            selftest.make_submission(sub, rubric, True, spec.get("edits", []))
            t0 = time.time()
            results = grade.grade(sub, args.work.resolve(), args.jobs, ["Speed gate"], perf_gates=True)
        took = time.time() - t0
        for item, (score, full, median, output) in sorted(gate_entries(results).items()):
            ok = abs(score - expected[item]) < 1e-6
            wrong_verdicts += not ok
            ratios.setdefault((name, item), []).append(median)
            lines.append(f"{k:>3} {name:<26} {item[:62]:<62} {score:>4}/{full}  median "
                         f"{'-' if median is None else f'{median:.2f}'}  {'as expected' if ok else 'UNEXPECTED'}"
                         f"  ({took:.0f} s)")
            print(lines[-1], flush=True)
            if args.show or not ok:
                print(output + "\n", flush=True)
        if not gate_entries(results):
            print(results["output"][-3000:])
            wrong_verdicts += 1
    print("\nratios (reference time / submission time), per submission and gate:")
    for (name, item), rs in sorted(ratios.items()):
        got = [r for r in rs if r is not None]
        if got:
            print(f"  {name:<26} {item[:62]:<62} n={len(got)} min {min(got):.2f} median "
                  f"{statistics.median(got):.2f} max {max(got):.2f}")
    print(f"\n{len(lines) - wrong_verdicts} of {len(lines)} verdicts as expected")
    return 1 if wrong_verdicts else 0


if __name__ == "__main__":
    sys.exit(main())
