#!/usr/bin/env python3
"""Mutation testing of the graded tests: how many wrong versions of each student function
they catch.

    python3 grader/mutate.py list [--assignment N] [--function NAME ...]
    python3 grader/mutate.py run  [--assignment N] [--function NAME ...] [--per-function K]
                                  [--seed S] --work DIR [--report FILE] [--jobs J]
    python3 grader/mutate.py report --log RUN.log [the run's --assignment --function --per-function --seed]
                                  --report FILE   # a run's report again (after marking equivalents)

A mutant is the reference solution with one small change inside one student function's
marked region (// BEGIN SOLUTION <problem> <function> ... // END SOLUTION), made by a rule:

  relational   <  <=  >  >=  ==  != swapped for their boundary neighbour
  arithmetic   +  -  *  /  (and += -= *= /=) swapped
  constant     an integer literal made one more or one less
  index        [e] becomes [e + 1]
  transpose    [a][b] becomes [b][a]
  min-max      std::min and std::max swapped
  logical      && and || swapped, true and false swapped
  delete       a statement removed
  scale        a trailing "/ x" or "* x" factor removed
  detach       .detach() removed
  group        a dist::Group argument replaced by the whole world (dist::world_group())
  swap-args    two plain arguments of a call swapped

Each mutant is graded by grade.py, through its build and sandbox, on the rubric items of its
problem that use its file (public and hidden cases). It is killed when any of those items loses
points, survives when they all keep full marks, and does not count when it does not compile.
grader/mutation/equivalent.json lists mutants reviewed as equivalent (same behaviour as the
solution), one reason each; they count neither way. grader/mutation/needs_gpu.json lists those
that change only what runs with tensors on a GPU (a CUDA branch), which a CPU grade cannot see;
they are reported in their own column and count neither way either. The score of a function is
killed / (compiled - equivalent - needs GPU). `run` writes a markdown report with every
survivor's diff.
"""
import argparse
import hashlib
import json
import random
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

GRADER = Path(__file__).resolve().parent
KIT = GRADER.parent
sys.path.insert(0, str(GRADER))
import grade  # noqa: E402

EQUIVALENT = GRADER / "mutation" / "equivalent.json"
NEEDS_GPU = GRADER / "mutation" / "needs_gpu.json"


def reviewed(path: Path) -> dict:
    """{mutant id: the reason} from a review file (equivalent.json, needs_gpu.json)."""
    return json.loads(path.read_text()) if path.exists() else {}
BEGIN = re.compile(r"^\s*//\s*BEGIN SOLUTION\s+(\S+)\s+(\S+)")
END = re.compile(r"^\s*//\s*END SOLUTION")


# ---------------------------------------------------------------- regions and rules
def regions(path: Path):
    """[(problem, function, first line index, last line index)] of the marked regions (the
    lines strictly between the markers, 0-based)."""
    out, lines, open_ = [], path.read_text().splitlines(), None
    for i, line in enumerate(lines):
        m = BEGIN.match(line)
        if m:
            open_ = (m.group(1), m.group(2), i + 1)
        elif END.match(line) and open_:
            out.append((open_[0], open_[1], open_[2], i - 1))
            open_ = None
    return out


def code_part(line: str):
    """(code, comment): the line split at a // outside string literals."""
    in_str, i = False, 0
    while i < len(line):
        c = line[i]
        if c == "\\" and in_str:
            i += 2
            continue
        if c == '"':
            in_str = not in_str
        elif not in_str and line.startswith("//", i):
            return line[:i], line[i:]
        i += 1
    return line, ""


def _strings_masked(code: str) -> str:
    """code with the insides of string and char literals replaced by spaces (same length)."""
    return re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'', lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 2)
                  + m.group(0)[-1], code)


SWAPS = [
    ("relational", r"(?<=\s)<(?=\s)", "<="), ("relational", r"(?<=\s)<=(?=\s)", "<"),
    ("relational", r"(?<=\s)>(?=\s)", ">="), ("relational", r"(?<=\s)>=(?=\s)", ">"),
    ("relational", r"(?<=\s)==(?=\s)", "!="), ("relational", r"(?<=\s)!=(?=\s)", "=="),
    ("arithmetic", r"(?<=\s)\+(?=\s)", "-"), ("arithmetic", r"(?<=\s)-(?=\s)", "+"),
    ("arithmetic", r"(?<=\s)\*(?=\s)", "/"), ("arithmetic", r"(?<=\s)/(?=\s)", "*"),
    ("arithmetic", r"(?<=\s)\+=(?=\s)", "-="), ("arithmetic", r"(?<=\s)-=(?=\s)", "+="),
    ("arithmetic", r"(?<=\s)\*=(?=\s)", "/="), ("arithmetic", r"(?<=\s)/=(?=\s)", "*="),
    ("min-max", r"\bstd::min\b", "std::max"), ("min-max", r"\bstd::max\b", "std::min"),
    ("logical", r"(?<=\s)&&(?=\s)", "||"), ("logical", r"(?<=\s)\|\|(?=\s)", "&&"),
    ("logical", r"\btrue\b", "false"), ("logical", r"\bfalse\b", "true"),
    ("detach", r"\.detach\(\)", ""),
]


def line_mutants(code: str):
    """[(rule, new code)] for one line of code (no comment)."""
    masked, out = _strings_masked(code), []
    for rule, pat, rep in SWAPS:
        if rule == "arithmetic" and '"' in masked:
            continue  # "..." + std::to_string(x) + "...": a message, and - would not compile
        for m in re.finditer(pat, masked):
            out.append((rule, code[:m.start()] + rep + code[m.end():]))
    for m in re.finditer(r"(?<![\w.])(\d+)(?![\w.])", masked):  # integer literals, not in names or floats
        n = int(m.group(1))
        for v in (n + 1, n - 1):
            if v >= 0:
                out.append(("constant", code[:m.start()] + str(v) + code[m.end():]))
    for m in re.finditer(r"\[([^\[\]]+)\]", masked):
        if not re.fullmatch(r"\s*\d*\s*", m.group(1)):  # [e] with e not a literal (the constant rule has those)
            out.append(("index", code[:m.start()] + "[" + code[m.start() + 1:m.end() - 1] + " + 1]" + code[m.end():]))
    for m in re.finditer(r"\[([^\[\]]+)\]\[([^\[\]]+)\]", masked):
        a, b = code[m.start(1):m.end(1)], code[m.start(2):m.end(2)]
        if a.strip() != b.strip():
            out.append(("transpose", code[:m.start()] + f"[{b}][{a}]" + code[m.end():]))
    for m in re.finditer(r"\s([/*])\s+([\w.]+(?:\(\))?)(?=\s*[;),])", masked):
        out.append(("scale", code[:m.start()] + code[m.end():]))
    for m in re.finditer(r"\bgroup\b(?!\s*[.(]|_)", masked):
        before = masked[:m.start()]
        if re.search(r"[(,]\s*$", before):  # an argument
            out.append(("group", code[:m.start()] + "dist::world_group()" + code[m.end():]))
    for m in re.finditer(r"\bgroup\.(?=size\(\)|rank\(\))", masked):
        out.append(("group", code[:m.start()] + "dist::world_group()." + code[m.end():]))
    for m in re.finditer(r"\(\s*([A-Za-z_]\w*)\s*,\s*([A-Za-z_]\w*)\s*\)", masked):
        a, b = m.group(1), m.group(2)
        if a != b:
            out.append(("swap-args", code[:m.start()] + f"({b}, {a})" + code[m.end():]))
    stripped = code.strip()
    declaration = re.match(r"\s*(const\s+|static\s+)*(auto|[\w:]+(<[^;]*>)?)[\s*&]+\w+\s*(=|\{|\(|;|,)", code)
    if (stripped.endswith(";") and not stripped.startswith(("return", "}", "{")) and "{" not in stripped
            and not declaration):  # deleting a declaration does not compile: no mutant
        out.append(("delete", re.match(r"\s*", code).group(0) + ";"))
    return out


def mutants_of(path: Path, rel: str):
    """Every mutant of every region of one solution file: dicts with id, file, problem, function,
    rule, line (1-based), old and new line."""
    lines = path.read_text().splitlines()
    out, seen = [], set()
    for problem, function, first, last in regions(path):
        for i in range(first, last + 1):
            code, comment = code_part(lines[i])
            if not code.strip() or code.strip().startswith("#"):
                continue
            for rule, new in line_mutants(code):
                new_line = (new + comment) if new.strip() else new
                if new_line == lines[i] or (rel, i, new_line) in seen:
                    continue
                seen.add((rel, i, new_line))
                mid = hashlib.sha1(f"{rel}\0{problem}\0{function}\0{lines[i]}\0{new_line}".encode()).hexdigest()[:10]
                out.append({"id": mid, "file": rel, "problem": problem, "function": function, "rule": rule,
                            "line": i + 1, "old": lines[i], "new": new_line})
    return out


def all_mutants(assignment: int, functions=None, kit=KIT):
    rubric = grade.load_rubric(kit, assignment)
    out = []
    for f in rubric["student_files"]:
        for m in mutants_of(kit / "solution" / f, f):
            if not functions or m["function"] in functions:
                out.append(m)
    return out


def items_for(rubric, mutant):
    """The names of the rubric items that grade a mutant: its problem's items that use its file."""
    return [it["name"] for it in rubric["items"]
            if it["name"].startswith(f"Problem {mutant['problem']} ") and mutant["file"] in it.get("files", [])]


def sample(mutants, per_function: int, seed: int):
    """At most per_function mutants of each function, drawn with `seed`: every rule class of the
    function once (in a random order) before any class twice."""
    rng, by_fn, out = random.Random(seed), {}, []
    for m in mutants:
        by_fn.setdefault((m["file"], m["function"]), []).append(m)
    for key in sorted(by_fn):
        ms = by_fn[key]
        if per_function and len(ms) > per_function:
            by_rule = {}
            for m in ms:
                by_rule.setdefault(m["rule"], []).append(m)
            for v in by_rule.values():
                rng.shuffle(v)
            # Every rule class once, in an order drawn with the seed, before any class comes again
            # (sorted, a small sample would only ever see the first classes of the alphabet).
            picked, rules = [], sorted(by_rule)
            rng.shuffle(rules)
            while len(picked) < per_function:
                for r in rules:
                    if by_rule[r] and len(picked) < per_function:
                        picked.append(by_rule[r].pop())
            ms = picked
        out += sorted(ms, key=lambda m: (m["line"], m["id"]))
    return out


# ---------------------------------------------------------------- grading one
def grade_mutant(m, assignment: int, work: Path, jobs: int, prebuilt=None):
    """'killed' | 'survived' | 'not compiled' | 'no item', and the points per item."""
    rubric = grade.enabled_items(grade.load_rubric(assignment=assignment))
    items = items_for(rubric, m)
    if not items:
        return "no item", {}
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        sub = Path(tmp) / "submission"
        for f in rubric["student_files"]:
            (sub / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(KIT / "solution" / f, sub / f)
        lines = (sub / m["file"]).read_text().splitlines(keepends=True)
        assert lines[m["line"] - 1].rstrip("\n") == m["old"], "the solution changed under the mutant"
        lines[m["line"] - 1] = m["new"] + "\n"
        (sub / m["file"]).write_text("".join(lines))
        out = Path(tmp) / "results.json"
        argv = grade.check_argv(sub, work, out, jobs, assignment, items, prebuilt=prebuilt)
        import contextlib
        import io
        with contextlib.redirect_stdout(io.StringIO()):
            grade.main(argv)
        results = json.loads(out.read_text())
    got = {t["name"]: (t["score"], t["max_score"], t["output"]) for t in results["tests"] if t["name"] in items}
    if results["output"].startswith("grader error"):
        raise RuntimeError(results["output"][:2000])
    if any("does not compile" in o for _, _, o in got.values()):
        return "not compiled", {k: v[0] for k, v in got.items()}
    killed = any(s < mx - 1e-9 for s, mx, _ in got.values())
    return ("killed" if killed else "survived"), {k: v[0] for k, v in got.items()}


def diff_of(m):
    return f"{m['file']}:{m['line']} ({m['rule']})\n- {m['old'].strip()}\n+ {m['new'].strip()}"


def report(results, assignment, seconds, argv_line):
    """The markdown report: per function and in all, then every survivor's diff."""
    equivalent, needs_gpu = reviewed(EQUIVALENT), reviewed(NEEDS_GPU)
    zero = {"generated": 0, "compiled": 0, "killed": 0, "survived": 0, "equivalent": 0, "needs GPU": 0}
    rows, survivors, tot = {}, [], dict(zero)
    for m, status in results:
        key = (m["problem"], m["function"])
        r = rows.setdefault(key, dict(zero))
        r["generated"] += 1
        if status in ("not compiled", "no item"):
            continue
        r["compiled"] += 1
        if m["id"] in equivalent:
            r["equivalent"] += 1
        elif m["id"] in needs_gpu:
            r["needs GPU"] += 1
        elif status == "killed":
            r["killed"] += 1
        else:
            r["survived"] += 1
            survivors.append(m)
    lines = [f"## Assignment {assignment}", "", f"`{argv_line}`: {seconds / 60:.0f} minutes.", "",
             "| problem | function | generated | compiled | killed | survived | equivalent | needs GPU | score |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (problem, function), r in sorted(rows.items()):
        for k in tot:
            tot[k] += r[k]
        live = r["compiled"] - r["equivalent"] - r["needs GPU"]
        score = f"{100 * r['killed'] / live:.0f} %" if live else "n/a"
        lines.append(f"| {problem} | `{function}` | {r['generated']} | {r['compiled']} | {r['killed']} | "
                     f"{r['survived']} | {r['equivalent']} | {r['needs GPU']} | {score} |")
    live = tot["compiled"] - tot["equivalent"] - tot["needs GPU"]
    lines.append(f"| all | | {tot['generated']} | {tot['compiled']} | {tot['killed']} | {tot['survived']} | "
                 f"{tot['equivalent']} | {tot['needs GPU']} | {100 * tot['killed'] / live:.0f} % |"
                 if live else "| all | | 0 | | | | | | |")
    if survivors:
        lines += ["", "Surviving mutants (each to be killed by a new case, or marked with its reason in "
                  "`grader/mutation/equivalent.json` or, for a CUDA branch, `needs_gpu.json`):", ""]
        for m in survivors:
            lines += [f"- `{m['id']}` `{m['function']}`:", "", "  ```diff"] + \
                     ["  " + l for l in diff_of(m).splitlines()] + ["  ```", ""]
    return "\n".join(lines) + "\n"


LOG_LINE = re.compile(r"^\[(\d+)/(\d+) (\d+) s\] (killed|survived|not compiled|no item)\s+([0-9a-f]+) ")


def results_from_log(ms, text):
    """(results, seconds) of a run from what it printed: every sampled mutant's status by its id.
    kit.Error-like SystemExit when the log is not of this sample (other arguments, cut short)."""
    status, seconds = {}, 0
    for line in text.splitlines():
        m = LOG_LINE.match(line)
        if m:
            status[m.group(5)] = m.group(4)
            seconds = int(m.group(3))
    missing = [m["id"] for m in ms if m["id"] not in status]
    if missing:
        raise SystemExit(f"error: the log has no status for {len(missing)} of the {len(ms)} sampled mutants "
                         f"({', '.join(missing[:3])}...): give the run's own --assignment, --function, "
                         "--per-function and --seed, and the log of a run that finished")
    return [(m, status[m["id"]]) for m in ms], seconds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=("list", "run", "report"))
    ap.add_argument("--assignment", type=int, default=1)
    ap.add_argument("--function", nargs="*", help="only these student functions (the names in the markers)")
    ap.add_argument("--per-function", type=int, default=0, help="sample at most K mutants per function (0: all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", type=Path, help="the grader's work dir (run); reuse it: each mutant is an incremental build")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--prebuilt", type=Path, metavar="BUILD", help="grade.py --prebuilt (run): as the self-tests")
    ap.add_argument("--report", type=Path, help="write the markdown report here (run, report)")
    ap.add_argument("--log", type=Path, help="report: what a finished run printed")
    ap.add_argument("--min-score", type=float, default=0,
                    help="exit 1 when a function's score (percent) is below this (run)")
    args = ap.parse_args(argv)
    ms = sample(all_mutants(args.assignment, args.function), args.per_function, args.seed)
    if args.command == "list":
        for m in ms:
            print(f"{m['id']}  {m['problem']} {m['function']}  " + diff_of(m).replace("\n", "  "))
        print(f"{len(ms)} mutants")
        return 0
    if args.command == "report":
        if not args.log or not args.report:
            ap.error("report needs --log RUN.log and --report FILE")
        results, seconds = results_from_log(ms, args.log.read_text())
        run_line = ["run", "--assignment", str(args.assignment)] + \
            (["--function"] + args.function if args.function else []) + \
            ["--per-function", str(args.per_function), "--seed", str(args.seed)]
        args.report.write_text(report(results, args.assignment, seconds,
                                      "python3 grader/mutate.py " + " ".join(run_line) + " ..."))
        print(f"wrote {args.report}")
        return 0
    if not args.work:
        ap.error("run needs --work DIR")
    t0, results = time.time(), []
    argv_line = "python3 grader/mutate.py " + " ".join(argv if argv is not None else sys.argv[1:])
    for k, m in enumerate(ms, 1):
        status, points = grade_mutant(m, args.assignment, grade.reachable_work(args.work.resolve()), args.jobs,
                                      args.prebuilt)
        results.append((m, status))
        print(f"[{k}/{len(ms)} {time.time() - t0:.0f} s] {status:12s} {m['id']} {m['function']}: "
              f"{m['old'].strip()}  ->  {m['new'].strip()}  {points}", flush=True)
        if args.report:  # after every mutant: a run cut short still leaves its report
            args.report.parent.mkdir(parents=True, exist_ok=True)
            partial = "" if k == len(ms) else f"(partial: {k} of {len(ms)} mutants graded so far)\n\n"
            args.report.write_text(partial + report(results, args.assignment, time.time() - t0, argv_line))
    text = report(results, args.assignment, time.time() - t0, argv_line)
    print(text)
    left_out = {**reviewed(EQUIVALENT), **reviewed(NEEDS_GPU)}
    low = []
    by_fn = {}
    for m, st in results:
        if st in ("killed", "survived") and m["id"] not in left_out:
            by_fn.setdefault(m["function"], []).append(st == "killed")
    for fn, ks in by_fn.items():
        if 100 * sum(ks) / len(ks) < args.min_score:
            low.append(fn)
    if low:
        print("below the minimum score: " + ", ".join(low))
    return 1 if low else 0


if __name__ == "__main__":
    sys.exit(main())
