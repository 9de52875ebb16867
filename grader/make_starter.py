#!/usr/bin/env python3
"""Generate the starter copies of the student files from the solution.

Every block

    // BEGIN SOLUTION 1.2 average_gradients
    ...reference code...
    // END SOLUTION

in solution/<file> becomes, in starter/<file>,

    // TODO(Problem 1.2 average_gradients): your code here.
    throw kit::NotImplemented("Problem 1.2 average_gradients");

so the starter compiles and every unimplemented function fails fast with a clear
message. The student files are the ones listed in grader/assignment*/rubric.json.

    python3 grader/make_starter.py           # write starter/<file> for every student file
    python3 grader/make_starter.py --check   # exit 1 if a committed starter file differs
"""
import argparse
import difflib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN = re.compile(r"^(\s*)//\s*BEGIN SOLUTION\b(.*)$")
END = re.compile(r"^\s*//\s*END SOLUTION\b")
LABEL = re.compile(r"^\s+(\d+\.\d+)\s+([A-Za-z_][\w:]*)\s*$")


class MarkerError(Exception):
    pass


def rubric_paths(root=ROOT):
    """grader/assignment<N>/rubric.json, in assignment order."""
    found = [(int(m.group(1)), p) for p in (root / "grader").glob("assignment*/rubric.json")
             if (m := re.fullmatch(r"assignment([0-9]+)", p.parent.name))]
    return [p for _, p in sorted(found)]


def student_files(root=ROOT):
    """Every assignment's student files, in rubric order."""
    out = []
    for path in rubric_paths(root):
        out += [f for f in json.loads(path.read_text())["student_files"] if f not in out]
    return out


def strip_solution(text, name="<text>"):
    """Return the starter version of one solution file's text."""
    out, inside, begin_line = [], False, 0
    blocks = 0
    for n, line in enumerate(text.splitlines(keepends=True), start=1):
        b, e = BEGIN.match(line), END.match(line)
        if b:
            if inside:
                raise MarkerError(f"{name}:{n}: nested BEGIN SOLUTION (the block opened at line {begin_line} is not closed)")
            label = LABEL.match(b.group(2))
            if not label:
                raise MarkerError(f"{name}:{n}: BEGIN SOLUTION needs a problem and a name, e.g. "
                                  "'// BEGIN SOLUTION 1.2 average_gradients'")
            indent, what = b.group(1), f"Problem {label.group(1)} {label.group(2)}"
            out.append(f"{indent}// TODO({what}): your code here.\n")
            out.append(f'{indent}throw kit::NotImplemented("{what}");\n')
            inside, begin_line, blocks = True, n, blocks + 1
        elif e:
            if not inside:
                raise MarkerError(f"{name}:{n}: END SOLUTION without a matching BEGIN SOLUTION")
            inside = False
        elif not inside:
            if re.search(r"//\s*(BEGIN|END)\s*SOLUTION", line, re.I):  # leftover or misspelt marker
                raise MarkerError(f"{name}:{n}: malformed solution marker: {line.strip()}")
            out.append(line)
    if inside:
        raise MarkerError(f"{name}:{begin_line}: BEGIN SOLUTION is never closed by END SOLUTION")
    if blocks == 0:
        raise MarkerError(f"{name}: no BEGIN SOLUTION block: a student file must have at least one")
    result = "".join(out)
    if '"kit/errors.h"' not in result:
        raise MarkerError(f'{name}: must #include "kit/errors.h" (the stubs throw kit::NotImplemented)')
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed starter/, write nothing")
    ap.add_argument("--root", type=Path, default=ROOT, help="kit root (default: this checkout)")
    args = ap.parse_args(argv)
    root, bad = args.root, 0
    for f in student_files(root):
        src, dst = root / "solution" / f, root / "starter" / f
        if not src.exists():
            print(f"error: rubric lists {f} but {src} does not exist", file=sys.stderr)
            return 2
        try:
            want = strip_solution(src.read_text(), f"solution/{f}")
        except MarkerError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        have = dst.read_text() if dst.exists() else ""
        if args.check:
            if have != want:
                bad += 1
                sys.stdout.writelines(difflib.unified_diff(
                    have.splitlines(True), want.splitlines(True), f"starter/{f} (committed)", f"starter/{f} (generated)"))
        elif have != want:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(want)
            print(f"wrote starter/{f}")
    if args.check and bad:
        print(f"{bad} starter file(s) differ from the solution: run python3 grader/make_starter.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
