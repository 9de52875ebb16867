#!/usr/bin/env python3
"""Grader self-test: grade one known submission and check every targeted item's points.

    python3 grader/tests/selftest.py solution|starter|<wrong submission> --work DIR

solution: the reference solution plus valid figures must score 100.
starter:  the stubs and no figures must score 0 (and finish without a grader error).
<name>:   grader/wrong_submissions/<name>/expected.json says what is wrong and what it scores:
              {"edits": [{"file": "pipeline/pipe.cpp", "replace": "<text>", "with": "<text>"}, ...],
               "items": {"<item name substring>": expected points, ...},
               "test_timeout": seconds per case (optional), "output_contains": ["..."] (optional)}
          The submission is the solution files with those edits (each "replace" text must occur
          exactly once in solution/<file>, so an edit that no longer fits the solution is an
          error, not a silently correct submission) plus figures; only the listed items are graded.
All self-tests share one --work dir, so each is an incremental rebuild.
"""
import argparse
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


def make_submission(dst: Path, rubric, with_solution: bool, edits=()):
    if with_solution:
        for f in rubric["student_files"]:
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(KIT / "solution" / f, dst / f)
        figs = dst / "submit_figures"
        figs.mkdir()
        for it in rubric["items"]:
            for name in it.get("figures", []):
                (figs / name).write_bytes(tiny_png())
    for e in edits:
        path = dst / e["file"]
        text = path.read_text()
        if text.count(e["replace"]) != 1:
            raise SystemExit(f"edit of {e['file']}: the text to replace occurs {text.count(e['replace'])} times "
                             f"in the solution, not once; update the edit:\n{e['replace']}")
        path.write_text(text.replace(e["replace"], e["with"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    rubric = grade.load_rubric()
    expected, items, test_timeout, contains = {}, None, None, []
    edits = []
    if args.name not in ("solution", "starter"):
        spec = json.loads((GRADER / "wrong_submissions" / args.name / "expected.json").read_text())
        edits = spec["edits"]
        expected, test_timeout = spec["items"], spec.get("test_timeout")
        contains = spec.get("output_contains", [])
        items = list(expected)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="grader-selftest-") as tmp:
        sub = Path(tmp) / "submission"
        sub.mkdir()
        make_submission(sub, rubric, args.name != "starter", edits)
        results = grade.grade(sub, args.work.resolve(), args.jobs, items, test_timeout=test_timeout)
    grade.print_table(results)
    bad = []
    if args.name == "solution":
        if results["score"] != 100:
            bad.append(f"the solution scored {results['score']}, not 100")
    elif args.name == "starter":
        if results["score"] != 0:
            bad.append(f"the starter scored {results['score']}, not 0")
    else:
        for key, pts in expected.items():
            got = [t for t in results["tests"] if key in t["name"]]
            if len(got) != 1:
                bad.append(f"'{key}' matches {len(got)} rubric items, not 1")
            elif abs(got[0]["score"] - pts) > 1e-6:
                bad.append(f"{got[0]['name']}: scored {got[0]['score']}, expected {pts}\n{got[0]['output'][:3000]}")
        text = json.dumps(results)
        for c in contains:
            if c not in text:
                bad.append(f"the results do not mention {c!r}")
    print(f"self-test {args.name}: {time.time() - t0:.0f} s")
    for b in bad:
        print("FAIL: " + b)
    if bad:
        print(results["output"][-4000:])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
