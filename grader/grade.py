#!/usr/bin/env python3
"""Grade a submission: points per rubric item and a Gradescope results.json.

    python3 grader/grade.py SUBMISSION [--out results.json] [--work DIR]

SUBMISSION is a directory or a .zip (one enclosing folder is fine). Only the student
files named in grader/rubric.json are taken from it (at <f> or starter/<f>), plus
submit_figures/*.png; everything else is listed and ignored, so a submission can never
replace tests, rubric, CMake or given code. The student files are copied into a clean
copy of the kit (without solution/), built, and every test case runs as its own ctest
test with its own timeout. results.json is always written, even when everything fails.
"""
import argparse
import fnmatch
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

KIT = Path(__file__).resolve().parent.parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# What a clean copy of the kit leaves out: builds, VCS, the reference solution, local data,
# figures and the grader's own wrong submissions. TOP_IGNORE applies only at the kit's root
# (starter/data/ is given code and must be copied).
TOP_IGNORE = shutil.ignore_patterns("build*", "solution", "data", "runs", "submit_figures", ".venv*")
ANY_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", "wrong_submissions")


def load_rubric(kit=KIT):
    return json.loads((kit / "grader" / "rubric.json").read_text())


# ---------------------------------------------------------------- the submission
def unpack(submission: Path, scratch: Path) -> Path:
    """The submission's root directory (a zip is extracted; one enclosing folder is entered)."""
    if not submission.exists():
        raise FileNotFoundError(f"submission {submission} does not exist")
    if submission.is_file():
        if not zipfile.is_zipfile(submission):
            raise ValueError(f"submission {submission} is neither a directory nor a zip file")
        root = scratch / "unzipped"
        with zipfile.ZipFile(submission) as z:
            for member in z.namelist():  # refuse paths that escape the extraction directory
                target = (root / member).resolve()
                if not str(target).startswith(str(root.resolve())):
                    raise ValueError(f"zip member {member} points outside the archive")
            z.extractall(root)
        submission = root
    entries = [p for p in submission.iterdir() if p.name not in ("__MACOSX", ".DS_Store")]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return submission


def collect(root: Path, rubric):
    """(student files found {f: path}, figures {name: path}, ignored relative paths)."""
    found, figures, used = {}, {}, set()
    for f in rubric["student_files"]:
        for cand in (root / "starter" / f, root / f):
            if cand.is_file():
                found[f] = cand
                used.add(cand.resolve())
                break
    fig_dir = root / "submit_figures"
    if fig_dir.is_dir():
        for p in sorted(fig_dir.iterdir()):
            if p.is_file():
                figures[p.name] = p
                used.add(p.resolve())
    ignored = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                     if p.is_file() and p.resolve() not in used)
    return found, figures, ignored


# ---------------------------------------------------------------- the kit copy
def sync_tree(src: Path, dst: Path, skip=()):
    """Copy src to dst but `skip` (relative paths), rewriting only files whose content changed
    (keeps rebuilds incremental)."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        ignored = ANY_IGNORE(dirpath, dirnames + filenames)
        if rel == Path("."):
            ignored |= TOP_IGNORE(dirpath, dirnames + filenames)
        dirnames[:] = [d for d in dirnames if d not in ignored]
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            if name in ignored or str(rel / name) in skip:
                continue
            path, out = Path(dirpath) / name, dst / rel / name
            if not out.exists() or out.read_bytes() != path.read_bytes():
                shutil.copy2(path, out)
                os.utime(out)  # a fresh mtime, so make rebuilds what changed


def put(path: Path, data: bytes):
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)


def run(cmd, cwd, timeout, log):
    """Run cmd in its own session; on timeout kill the whole process group."""
    t0 = time.time()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True, text=True, errors="replace")
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        out += f"\n[grader] {' '.join(map(str, cmd[:2]))} stopped after {timeout} s\n"
        p.returncode = -9
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # anything the tests left running
        except ProcessLookupError:
            pass
    log.append(f"$ {' '.join(map(str, cmd))}  ({time.time() - t0:.0f} s, exit {p.returncode})")
    return p.returncode, out


def compile_errors_by_file(output: str, student_files):
    """{student file: [error lines]} for the compiler errors that point into student files."""
    errs, lines = {}, output.splitlines()
    for line in lines:
        for f in student_files:
            if re.search(r"starter/" + re.escape(f) + r":\d+(:\d+)?: (fatal )?error", line):
                errs.setdefault(f, []).append(line.strip())
    # An error reported inside a header (a template instantiated from the student file) names the
    # header, not the file: make's "starter/<f>.o] Error" still says whose object failed.
    for f in student_files:
        if f not in errs and any(re.search(re.escape("starter/" + f) + r"\.o\].*Error", l) for l in lines):
            others = [g for g in student_files if g != f]
            errs[f] = [l.strip() for l in lines if re.search(r"\berror\b", l) and "make" not in l
                       and not any("starter/" + g in l for g in others)][:20] or ["(see the build log)"]
    return errs


def graded_suites(rubric) -> list:
    """The test suites the rubric's items use (a test name is <suite>.<gtest name>)."""
    return sorted({t.split(".")[0] for it in rubric["items"] for t in it.get("tests", [])})


def build(work: Path, build_dir: Path, jobs: int, timeout: int, log, test_timeout=0, suites=()):
    """Configure (once per setting) and build only what grading runs: the graded suites'
    test programs and what they depend on, not the other programs, benchmarks or plots."""
    cache = build_dir / "CMakeCache.txt"
    suites = ";".join(suites)
    wants = [f"KIT_TEST_TIMEOUT:STRING={test_timeout}", f"KIT_TEST_SUITES:STRING={suites}"]
    if not cache.exists() or any(w not in cache.read_text(errors="replace") for w in wants):
        rc, out = run(["cmake", "-S", str(work), "-B", str(build_dir), "-DKIT_SOLUTION=OFF",
                       "-DCMAKE_BUILD_TYPE=Release", "-DKIT_PLOTS=OFF"] + ["-D" + w for w in wants],
                      work, timeout, log)
        if rc != 0:
            return rc, out
    targets = ["test_" + s for s in suites.split(";") if s] or ["all"]
    return run(["cmake", "--build", str(build_dir), "-j", str(jobs), "--target"] + targets, work, timeout, log)


def glob_to_cmake_regex(pattern: str) -> str:
    """A ctest -R regex for a rubric glob (CMake's regex has no (?:...) groups, so not fnmatch.translate)."""
    out = []
    for c in pattern:
        out.append(".*" if c == "*" else "." if c == "?" else "\\" + c if c in ".+^$()[]|\\" else c)
    return "^" + "".join(out) + "$"


def run_tests(build_dir: Path, patterns, jobs: int, timeout: int, log):
    """{test name: (passed, output)} for the ctest tests matching the patterns (skipped ones left out)."""
    regex = "|".join(glob_to_cmake_regex(p) for p in patterns)
    junit = build_dir / "grader-junit.xml"
    if junit.exists():
        junit.unlink()
    _, ctest_out = run(["ctest", "--test-dir", str(build_dir), "-R", regex, "-j", str(jobs),
                        "--output-junit", str(junit)], build_dir, timeout, log)
    # ctest's own verdict for cases it stopped or that crashed (junit leaves it out): ***Timeout, SEGFAULT, ...
    verdict = dict(re.findall(r"Test\s+#\d+: (\S+) \.*\s*\**(Timeout|SEGFAULT|Child aborted|Exception[^\d]*?|"
                              r"BAD_COMMAND|ILLEGAL|INTERRUPT|NUMERICAL|OTHER_FAULT|Subprocess aborted)\s+[\d.]+ sec",
                              ctest_out))
    results = {}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            out = case.findtext("system-out") or ""
            if case.find("skipped") is not None or "[  SKIPPED ]" in out:
                continue  # e.g. a CUDA-only case on a CPU machine: not counted either way
            status = case.get("status", "")
            failed = case.find("failure") is not None or case.find("error") is not None or status not in ("run", "")
            why = verdict.get(case.get("name"), "")
            if failed and why:  # e.g. Timeout, SEGFAULT: say so before gtest's output
                out = f"ctest: {why} (the case was stopped; other cases are not affected)\n" + out
            results[case.get("name")] = (not failed, out)
    return results


def failure_message(text: str, limit=1500) -> str:
    """What a student needs from a failed case: gtest's failure lines without its banners, trimmed."""
    lines = text.strip().splitlines()
    body = [l for l in lines if not re.match(r"\[ *(=+|-+|RUN|OK|FAILED|PASSED|SKIPPED) *\]", l)
            and not l.startswith(("Running main() from", "Note: Google Test filter"))]
    msg = "\n".join(body).strip() or text.strip() or "(no output: crashed or killed)"
    if len(msg) > limit:  # keep the start (the first failure) and cut at a line end
        msg = msg[:limit].rsplit("\n", 1)[0] + "\n[... trimmed]"
    return msg


# ---------------------------------------------------------------- checks
def png_ok(path: Path):
    data = path.read_bytes()[:33]
    if len(data) < 33 or data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
        return False, "not a PNG file"
    w, h = struct.unpack(">II", data[16:24])
    if w == 0 or h == 0:
        return False, "PNG with zero size"
    return True, f"{w}x{h} PNG"


def strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    src = re.sub(r"//[^\n]*", "", src)
    return re.sub(r'"(\\.|[^"\\])*"', '""', src)


def check_restrictions(found, rubric):
    r = rubric.get("restrictions", {})
    allowed = set(r.get("allowed_includes", []))
    problems = []
    for f in r.get("files", []):
        if f not in found:
            continue
        text = found[f].read_text(errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            m = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', line)
            if m and m.group(1) not in allowed:
                problems.append(f"{f}:{n}: #include <{m.group(1)}> is outside the allowed set")
        code = strip_comments(text)
        for call in r.get("forbidden_calls", []):
            pat = re.escape(call) + (r"\s*\(" if call[-1].isalnum() and "::" not in call else "")
            if re.search(r"(?<![\w:])" + pat, code):
                problems.append(f"{f}: uses {call} (Problem 1 may use only the kit's dist layer and launcher)")
    return problems


# ---------------------------------------------------------------- grading
def grade(submission: Path, work: Path, jobs: int, items_filter=None, kit=KIT, test_timeout=None):
    rubric, log, tests_out, t0 = load_rubric(kit), [], [], time.time()
    if test_timeout is None:  # 0: each suite's own TIMEOUT (tests/CMakeLists.txt)
        test_timeout = rubric["timeouts"].get("test_case_seconds", 0)
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        root = unpack(submission, Path(scratch))
        found, figures, ignored = collect(root, rubric)
        if ignored:
            log.append("ignored (not student files): " + ", ".join(ignored[:30]) +
                       (f" and {len(ignored) - 30} more" if len(ignored) > 30 else ""))
        missing = [f for f in rubric["student_files"] if f not in found]
        if missing:
            log.append("not submitted, starter stubs used: " + ", ".join(missing))

        work.mkdir(parents=True, exist_ok=True)
        sync_tree(kit, work / "kit", skip={"starter/" + f for f in rubric["student_files"]})
        kit_copy, build_dir = work / "kit", work / "build"
        stubs = {f: (kit / "starter" / f).read_bytes() for f in rubric["student_files"]}
        for f in rubric["student_files"]:
            put(kit_copy / "starter" / f, found[f].read_bytes() if f in found else stubs[f])

        items = [it for it in rubric["items"] if not items_filter or any(k in it["name"] for k in items_filter)]
        compile_failed = {}
        rc, out = build(kit_copy, build_dir, jobs, rubric["timeouts"]["build_seconds"], log, test_timeout,
                            graded_suites(rubric))
        while rc != 0:  # make stops at the first broken file: repeat until no new one shows up
            new = {f: e for f, e in compile_errors_by_file(out, rubric["student_files"]).items()
                   if f not in compile_failed}
            if not new:
                break
            compile_failed.update(new)
            for f in new:  # grade the rest: put the stub back for what does not compile
                put(kit_copy / "starter" / f, stubs[f])
            rc, out = build(kit_copy, build_dir, jobs, rubric["timeouts"]["build_seconds"], log, test_timeout,
                            graded_suites(rubric))
        build_broken = rc != 0
        if build_broken:
            log.append("the kit did not build:\n" + out[-4000:])

        patterns = [p for it in items for p in it.get("tests", [])]
        results = {} if build_broken or not patterns else run_tests(
            build_dir, patterns, jobs, rubric["timeouts"]["tests_seconds"], log)

        for number, it in enumerate(items, 1):
            entry = {"name": it["name"], "number": str(number), "max_score": it["points"], "visibility": "visible"}
            broken = [f for f in it.get("files", []) if f in compile_failed]
            if "figures" in it:
                lines, ok = [], 0
                for name in it["figures"]:
                    if name not in figures:
                        lines.append(f"missing submit_figures/{name}")
                        continue
                    good, what = png_ok(figures[name])
                    ok += good
                    lines.append(f"submit_figures/{name}: {what}")
                entry["score"] = round(it["points"] * ok / len(it["figures"]), 2)
                entry["output"] = "\n".join(lines)
            elif broken or build_broken:
                entry["score"] = 0
                msg = [f"{f} does not compile:\n" + "\n".join(compile_failed[f][:20]) for f in broken]
                entry["output"] = "\n\n".join(msg) or "the kit did not build (see the top-level output)"
            else:
                # given_tests check given code (input validation outside the student blocks): they
                # pass with the stubs, so they earn nothing (the starter must score 0).
                mine = {n: r for n, r in results.items() if any(fnmatch.fnmatchcase(n, p) for p in it["tests"])
                        and not any(fnmatch.fnmatchcase(n, p) for p in rubric.get("given_tests", []))}
                passed = sum(ok for ok, _ in mine.values())
                entry["score"] = round(it["points"] * passed / len(mine), 2) if mine else 0
                lines = [f"{passed}/{len(mine)} test cases passed"] if mine else ["no test case ran"]
                for name, (ok, text) in sorted(mine.items()):
                    if not ok:
                        lines.append(f"\nFAILED {name}\n" + failure_message(text))
                entry["output"] = "\n".join(lines)
            entry["status"] = "passed" if entry["score"] == entry["max_score"] else "failed"
            tests_out.append(entry)

        problems = check_restrictions(found, rubric)
        tests_out.append({"name": "Implementation restrictions (Problem 1: only the kit's dist layer and launcher)",
                          "number": str(len(items) + 1), "score": 0, "max_score": 0,
                          "status": "failed" if problems else "passed", "visibility": "visible",
                          "output": "\n".join(problems) or "no include or call outside the allowed set"})

    return {"score": round(sum(t["score"] for t in tests_out), 2),
            "execution_time": round(time.time() - t0, 1),
            "output": "\n".join(log),
            "tests": tests_out}


def print_table(results, stream=sys.stdout):
    width = max(len(t["name"]) for t in results["tests"])
    for t in results["tests"]:
        print(f"{t['name']:<{width}}  {t['score']:>6} / {t['max_score']:<4} {t['status']}", file=stream)
    total = sum(t["max_score"] for t in results["tests"])
    print(f"{'TOTAL':<{width}}  {results['score']:>6} / {total:<4} ({results['execution_time']} s)", file=stream)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("submission", type=Path, help="a directory or a .zip")
    ap.add_argument("--out", type=Path, default=Path("results.json"), help="where to write results.json")
    ap.add_argument("--work", type=Path, help="build directory to (re)use; default: a temporary one")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--items", nargs="*", help="grade only rubric items whose name contains one of these")
    ap.add_argument("--build-only", action="store_true", help="build (e.g. at setup time), grade no item")
    ap.add_argument("--test-timeout", type=int, help="seconds per test case (default: rubric, 0 = suite TIMEOUTs)")
    args = ap.parse_args(argv)
    if args.build_only:
        args.items = ["\0"]  # a name no rubric item has
    tmp = None
    try:
        work = args.work or Path(tmp := tempfile.mkdtemp(prefix="grade-work-"))
        results = grade(args.submission, work.resolve(), args.jobs, args.items, test_timeout=args.test_timeout)
    except Exception as e:  # never leave the instructor without a results.json
        results = {"score": 0, "execution_time": 0, "output": f"grader error: {type(e).__name__}: {e}",
                   "tests": [{"name": "Grading", "number": "0", "score": 0, "max_score": 100, "status": "failed",
                              "visibility": "visible", "output": f"grader error: {e}"}]}
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    if results["output"]:
        print(results["output"])
    print_table(results)
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
