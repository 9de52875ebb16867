#!/usr/bin/env python3
"""Grade a submission: points per rubric item and a Gradescope results.json.

    python3 grader/grade.py SUBMISSION [--assignment N] [--out results.json] [--work DIR]

SUBMISSION is a directory or a .zip (one enclosing folder is fine). Only the student
files named in the assignment's rubric (grader/assignment<N>/rubric.json) are taken from
it (at <f> or starter/<f>), plus submit_figures/*.png; everything else, other assignments' student files included, is listed
and ignored, so a submission can never replace tests, rubric, CMake or given code. The
student files are copied into a clean copy of the kit (without solution/; every other
assignment's student files are the kit's starter stubs), built, and every test case runs as
its own process in a sandbox (grader/sandbox.py) with its own timeout. A case earns points only when the test
program's verdict channel says, with the token of that run, that the case's body ended and
passed; which cases exist comes from the kit (its starter stubs), never from the submission.
results.json is always written, even when everything fails, after every process the
submission started is gone.
"""
import argparse
import dataclasses
import hashlib
import fnmatch
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sandbox import Sandbox  # noqa: E402
import perf_gates  # noqa: E402
import symbols  # noqa: E402
# The grader by concern: rubric.py (rubrics, file lists), submission.py (unpacking, reading the
# student files), cases.py (listing and running the cases, verdicts), cpp_source.py (the lexer,
# static checks), objects.py (which objects a build made); symbols.py (the symbol check) and
# sandbox.py. This file builds, scores and reports. Their names stay reachable as grade.<name>
# for the tools and tests that use them.
from rubric import (KIT, rubric_path, assignments, load_rubric, all_student_files, graded_suites,
    enabled_items, bundle_info, unmatched_patterns, check_patterns, hidden_patterns)  # noqa: E402,F401
from submission import (PNG_SIGNATURE, TOP_IGNORE, ANY_IGNORE, MAX_UNPACKED, unpack, regular_file,
    read_nofollow, collect, sync_tree, put, png_ok)  # noqa: E402,F401
from cases import (suite_programs, parse_gtest_list, list_cases, case_verdict, subject_status, judged_case,
    judge_one, with_subject, BATCH_CASES, BATCH_OUTPUT_KEEP, case_batches, parse_case_frames, split_output,
    subject_batch, judge_batch, batch_verdicts, wanted_cases, run_tests, failure_message)  # noqa: E402,F401
from cpp_source import (lex, strip_comments, token_regex, includes, test_headers, static_findings,
    check_restrictions, static_item)  # noqa: E402,F401
from objects import (prebuilt_copies, student_object, given_objects)  # noqa: E402,F401

# ---------------------------------------------------------------- the kit copy
def run(cmd, cwd, timeout, log):
    """Run cmd in its own session, its output going to a file (a pipe held open by a process
    outside the group could hang the reader); on timeout kill the whole process group."""
    t0 = time.time()
    with tempfile.TemporaryFile() as out_file:
        p = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out_file, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # on timeout, and anything left running
            except ProcessLookupError:
                pass
            p.wait()
        out_file.seek(0)
        out = out_file.read().decode(errors="replace")
    if time.time() - t0 >= timeout:
        out += f"\n[grader] {' '.join(map(str, cmd[:2]))} stopped after {timeout} s\n"
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


OPTIMIZE = "-O3"       # Release, as students build
FAST_OPTIMIZE = "-O1"  # --fast-compile: about a quarter less build time (the self-tests)
# --build-only (Gradescope's setup.sh) builds the kit cold, with the dependencies the wheel
# route downloads (SentencePiece and GoogleTest compile from source there): far more than a
# submission's incremental build (the rubric's build_seconds), so it gets this much instead.
SETUP_BUILD_SECONDS = 3600


@dataclasses.dataclass(frozen=True)
class Compile:
    """How the work dir's build compiles: the optimization level, and prebuilt: a finished build
    of this same kit whose given and test objects are linked instead of compiled again (CMake's
    KIT_PREBUILT; the self-tests pass the main build), or "" to compile everything. stubs: the
    student files that hold their starter stub (other assignments'), which with prebuilt link
    that build's stub objects instead of compiling (CMake's KIT_PREBUILT_STUBS)."""
    optimize: str = OPTIMIZE
    prebuilt: str = ""
    stubs: tuple = ()


def reference_stubs(work: Path) -> Path:
    """work/reference_stubs: the grader's own copy of every starter stub, which the speed gates'
    reference program is built from (CMake's KIT_REFERENCE_STUBS), out of a submission's reach."""
    return work / "reference_stubs"


def build(work: Path, build_dir: Path, jobs: int, timeout: int, log, suites=(), how=Compile(), targets=None):
    """Configure (once per setting) and build only what grading runs: the graded suites'
    test programs and what they depend on (or `targets`), not the other programs, benchmarks or plots."""
    cache = build_dir / "CMakeCache.txt"
    suites = ";".join(suites)
    wants = [f"KIT_TEST_SUITES:STRING={suites}", f"CMAKE_CXX_FLAGS_RELEASE:STRING={how.optimize} -DNDEBUG",
             f"KIT_PREBUILT:PATH={how.prebuilt}",
             f"KIT_PREBUILT_STUBS:STRING={';'.join(sorted(how.stubs)) if how.prebuilt else ''}",
             f"KIT_REFERENCE_STUBS:PATH={reference_stubs(work.parent)}"]
    have = set(cache.read_text(errors="replace").splitlines()) if cache.exists() else set()
    if any(w not in have for w in wants):  # whole lines: "=pipeline" is not "=pipeline_training"
        rc, out = run(["cmake", "-S", str(work), "-B", str(build_dir), "-DKIT_SOLUTION=OFF",
                       "-DCMAKE_BUILD_TYPE=Release", "-DKIT_PLOTS=OFF"] + ["-D" + w for w in wants],
                      work, timeout, log)
        if rc != 0:
            return rc, out
    targets = targets or ["test_" + s for s in suites.split(";") if s] or ["all"]
    return run(["cmake", "--build", str(build_dir), "-j", str(jobs), "--target"] + targets, work, timeout, log)


def kit_fingerprint(kit_copy: Path, student_files, assignment=1) -> str:
    """A hash of the assignment number and the kit copy without the student files (of every
    assignment): the graded cases depend on nothing else."""
    h = hashlib.sha256(f"assignment {assignment}\0".encode())
    skip = {Path("starter") / f for f in student_files}
    for dirpath, dirnames, filenames in os.walk(kit_copy):
        dirnames.sort()
        for name in sorted(filenames):
            rel = (Path(dirpath) / name).relative_to(kit_copy)
            if rel not in skip:
                h.update(str(rel).encode() + b"\0" + (kit_copy / rel).read_bytes() + b"\0")
    return h.hexdigest()[:32]


# ---------------------------------------------------------------- grading
def cases_cache(work: Path, kit_copy: Path, assignment: int, student_files, listed_from=()) -> Path:
    """work/cases/a<assignment>-<kit fingerprint>.json: each assignment keeps its own list. A list
    read from another build's programs (listed_from: --prebuilt) also keys on those programs, so a
    test added to the kit is listed again once that build has it, not kept out by a list taken
    from the programs built before it."""
    key = kit_fingerprint(kit_copy, student_files, assignment)
    if listed_from:
        h = hashlib.sha256(key.encode())
        for program in sorted(str(p) for p in listed_from):
            st = os.stat(program)
            h.update(f"\0{program}\0{st.st_size}\0{st.st_mtime_ns}".encode())
        key = h.hexdigest()[:32]
    return work / "cases" / f"a{assignment}-{key}.json"


def store_cases(cache: Path, cases, assignment: int):
    """Write the list in one rename, replacing this assignment's lists of an older kit (and lists
    named as before there were assignments); other assignments' lists stay."""
    cache.parent.mkdir(exist_ok=True)
    for old in cache.parent.glob("*.json"):
        if old.name.startswith(f"a{assignment}-") or re.fullmatch(r"[0-9a-f]{32}\.json", old.name):
            old.unlink()
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(cases, indent=1))
    os.replace(tmp, cache)


def graded_cases(kit_copy: Path, build_dir: Path, work: Path, rubric, stubs, sandbox, jobs, scratch, log,
                 assignment=1, student_files=None, how=Compile()):
    """The cases the kit has ({graded name: (suite, gtest name)}), listed from a build of the kit
    with its own starter stubs, or from the prebuilt build (so no submission's code runs while
    listing), and kept in
    cases_cache(); a submission cannot change which cases are graded. Each assignment keeps its
    own list, so one work dir serves every assignment."""
    programs = suite_programs(Path(how.prebuilt), graded_suites(rubric)) if how.prebuilt else {}
    cache = cases_cache(work, kit_copy, assignment, student_files or rubric["student_files"],
                        [p["program"] for p in programs.values()])
    if cache.is_file():
        return json.loads(cache.read_text())
    if not how.prebuilt:
        # (With --prebuilt, that build's test programs are linked from the very objects this work
        # dir's are, so they list the same cases, and it is the grader's own build: no stub build.)
        for f in rubric["student_files"]:
            put(kit_copy / "starter" / f, stubs[f])
        rc, out = build(kit_copy, build_dir, jobs, rubric["timeouts"]["build_seconds"], log,
                        graded_suites(rubric), how)
        if rc != 0:
            raise RuntimeError("the kit with its starter stubs does not build:\n" + out[-4000:])
        programs = suite_programs(build_dir, graded_suites(rubric))
    cases = list_cases(None if how.prebuilt else sandbox, programs, scratch, log)
    check_patterns(rubric, cases)
    store_cases(cache, cases, assignment)
    return cases


def symbol_item(found, rubric, build_dir: Path, skip, number, action=None, prebuilt="", linked=None):
    """The 0-point item that shows what the symbol check (grader/symbols.py) found in the
    compiled student files, and the files it flagged (when its action is "zero", the default).
    linked: {file: object} for files linked from the prebuilt build (prebuilt_copies)."""
    action = action or rubric.get("static_checks", {}).get("symbols", {}).get("action", "zero")
    lines, flagged, t0 = [], set(), time.time()
    given = symbols.GivenCode.cached(given_objects(build_dir, prebuilt),
                                   build_dir / "kit_symbols.json")
    for f in sorted(found):
        if f in skip:
            continue  # did not compile: its items score 0 already
        obj = (linked or {}).get(f) or student_object(build_dir, f)
        if obj is None:
            lines.append(f"{f}: not checked (the build made no object of it)")
            continue
        for line, sym, why in symbols.findings_of(obj, found[f], given):
            lines.append(f"{f}:{line or '?'}: {sym}: {why}")
            flagged.add(f)
    if flagged:
        lines.append("\nThe compiled code of these files calls or defines what student code has no business "
                     "with (the allowlist is grader/symbols.json; a line number is where the name appears in "
                     "the source, '?' where it does not). " +
                     ("Every item that uses a flagged file scores 0 (rubric static_checks.symbols.action = "
                      "\"zero\")." if action == "zero" else "They cost no points; the instructor reads this list."))
    return {"name": "Symbol check: what the compiled student code calls",
            "number": str(number), "score": 0, "max_score": 0, "visibility": "visible",
            "status": "failed" if flagged else "passed",
            "output": "\n".join(lines) or f"nothing found: every symbol the student objects use is on the "
                                          f"allowlist ({time.time() - t0:.1f} s)"}, \
        (flagged if action == "zero" else set())


# ---------------------------------------------------------------- a student's own build
def cache_value(build_dir: Path, key: str) -> str:
    for line in (build_dir / "CMakeCache.txt").read_text(errors="replace").splitlines():
        if line.startswith(key + ":"):
            return line.split("=", 1)[1]
    return ""


def grade_local(build_dir: Path, jobs: int, items_filter=None, kit=KIT, test_timeout=None, assignment=1,
                symbol_action=None):
    """Grade this kit's own student files (starter/<f>, submit_figures/) with the build of it at
    build_dir, as a student checks their work: the build is brought up to date, then the same
    cases, verdict channel, sandbox (as the caller: no separate users), rubric, static checks and
    symbol check as grade(). A student bundle has no hidden cases; the items' hidden patterns are
    listed and left out, so the instructor's grade can be lower. Given code and tests are the
    tree's own: a student who changed them is graded here on their copy, by the instructor on
    the kit's."""
    rubric, log, t0 = enabled_items(load_rubric(kit, assignment)), [], time.time()
    if test_timeout is None:
        test_timeout = rubric["timeouts"].get("test_case_seconds", 0)
    build_dir = build_dir.resolve()
    if not (build_dir / "CMakeCache.txt").is_file():
        raise RuntimeError(f"{build_dir} is not a build of this kit: configure and build first "
                           f"(cmake -S . -B build && cmake --build build -j 2)")
    if Path(cache_value(build_dir, "CMAKE_HOME_DIRECTORY")).resolve() != kit.resolve():
        raise RuntimeError(f"{build_dir} is a build of {cache_value(build_dir, 'CMAKE_HOME_DIRECTORY')}, "
                           f"not of {kit}: pass the build directory of this tree")
    if cache_value(build_dir, "KIT_SOLUTION").upper() in ("ON", "1", "TRUE"):
        raise RuntimeError(f"{build_dir} builds solution/ (KIT_SOLUTION=ON), not your starter/ files: "
                           "configure a build without it")
    sandbox = Sandbox(jobs, separate_users=False)
    log.append(f"assignment {assignment}: " + rubric.get("title", f"grader/assignment{assignment}/rubric.json") +
               f" -- a local grade of {kit / 'starter'} with the build {build_dir}")
    log.append(sandbox.describe().split("; not root")[0] + " (as you: a local grade)")
    found = {f: p for f in rubric["student_files"] if (p := regular_file(kit, "starter/" + f))}
    fig_dir = kit / "submit_figures"
    figures = {p.name: p for p in sorted(fig_dir.iterdir()) if regular_file(kit, "submit_figures/" + p.name)} \
        if fig_dir.is_dir() else {}
    rc, out = run(["cmake", "--build", str(build_dir), "-j", str(jobs)], kit, rubric["timeouts"]["build_seconds"], log)
    compile_failed = compile_errors_by_file(out, rubric["student_files"]) if rc else {}
    build_broken = rc != 0
    if build_broken:
        log.append("the build failed, so no case ran (the instructor's grader would put the starter stub back "
                   "for a file that does not compile, score the items that use it 0 and grade the rest):\n"
                   + out[-4000:])
    items = [it for it in rubric["items"] if not items_filter or any(k in it["name"] for k in items_filter)]
    results = {}
    with tempfile.TemporaryDirectory(prefix="grade-local-") as scratch:
        try:
            if not build_broken:
                programs = suite_programs(build_dir, graded_suites(rubric))
                cases = list_cases(sandbox, programs, Path(scratch), log)
                hidden = hidden_patterns(rubric, cases)
                check_patterns(rubric, cases, hidden)
                if hidden:
                    log.append(f"public cases only: this tree has no grader/hidden_tests/, so the {len(hidden)} "
                               "hidden patterns (" + ", ".join(hidden) + ") are left out; the instructor's "
                               "grade runs them too and can be lower")
                results = run_tests(sandbox, programs, wanted_cases(cases, items, rubric), jobs, rubric["timeouts"]["tests_seconds"],
                                    test_timeout, rubric.get("may_skip", []), Path(scratch), log)
        finally:
            sandbox.sweep()
    tests_out = report(items, rubric, found, figures, results, compile_failed, build_broken, build_dir,
                       symbol_action, cache_value(build_dir, "KIT_PREBUILT"), {},
                       lambda it: (0, "speed gates are not run by a local grade: python3 grader/perf_gates.py --help"))
    return {"score": round(sum(t["score"] for t in tests_out), 2), "execution_time": round(time.time() - t0, 1),
            "output": "\n".join(log), "tests": tests_out}


def grade(submission: Path, work: Path, jobs: int, items_filter=None, kit=KIT, test_timeout=None, assignment=1,
          how=Compile(), perf_gates=False, machine=None, symbol_action=None, build_seconds=None):
    rubric, log, tests_out, t0 = enabled_items(load_rubric(kit, assignment), perf_gates), [], [], time.time()
    if build_seconds:  # --build-only: the cold build at setup, not a submission's incremental one
        rubric["timeouts"]["build_seconds"] = max(rubric["timeouts"]["build_seconds"], build_seconds)
    if test_timeout is None:  # 0: each suite's own TIMEOUT (tests/CMakeLists.txt)
        test_timeout = rubric["timeouts"].get("test_case_seconds", 0)
    sandbox = Sandbox(jobs)
    log.append(f"assignment {assignment}: " + rubric.get("title", f"grader/assignment{assignment}/rubric.json"))
    log.append(sandbox.describe())
    work.mkdir(parents=True, exist_ok=True)
    runs = work / "runs"  # each case's own directory goes here, made fresh and removed after
    runs.mkdir(exist_ok=True)
    for d in (work, runs):
        os.chmod(d, 0o755)  # the sandbox users need to reach the test programs, nothing more
    blocked = sandbox.unreachable(work)
    if blocked:
        raise RuntimeError(f"the sandbox users cannot enter {blocked} on the way to the work dir {work}: "
                           "use a --work directory under /tmp or /autograder (or chmod o+x that directory)")
    try:
        with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
            tests_out = grade_in(submission, work, jobs, items_filter, kit, test_timeout, rubric, log,
                                 Path(scratch), sandbox, runs, assignment, how, machine, symbol_action)
    finally:
        sandbox.sweep()
        left = sandbox.leftovers()
        if left:
            log.append(f"processes still alive after the sweep: {left}")
    return {"score": round(sum(t["score"] for t in tests_out), 2),
            "execution_time": round(time.time() - t0, 1),
            "output": "\n".join(log),
            "tests": tests_out}


def check_argv(submission: Path, work: Path, out: Path, jobs: int, assignment=1, items=None, test_timeout=None,
               prebuilt=None):
    """grade.py's arguments for the grader's own checks of itself (the self-tests, the mutation
    tool): --fast-compile (-O1: they check what is graded, not how fast the code runs), only
    `items` when given, and the main build's given and test objects when `prebuilt` is."""
    argv = [str(submission), "--assignment", str(assignment), "--work", str(work), "--out", str(out),
            "--jobs", str(jobs), "--fast-compile"]
    if items:
        argv += ["--items"] + list(items)
    if test_timeout:
        argv += ["--test-timeout", str(test_timeout)]
    if prebuilt:
        argv += ["--prebuilt", str(prebuilt)]
    return argv


def reachable_work(work: Path) -> Path:
    """work, or a stand-in for it under the temporary directory when the sandbox users cannot
    reach it (a clone under /root): the same stand-in for the same path, so it stays warm."""
    if Sandbox(1).unreachable(work):
        return Path(tempfile.gettempdir()) / ("kit-grader-selftest-" + hashlib.sha256(
            str(work).encode()).hexdigest()[:12])
    return work


def sync_kit(kit: Path, work: Path, rubric) -> Path:
    """work/kit: a clean copy of the kit. The graded assignment's student files are left for
    the caller to put; every other student file (other assignments') is the kit's starter stub,
    whatever an earlier grading in this work dir put there."""
    sync_tree(kit, work / "kit", skip={"starter/" + f for f in rubric["student_files"]})
    return work / "kit"


def grade_in(submission, work, jobs, items_filter, kit, test_timeout, rubric, log, scratch, sandbox, runs,
             assignment=1, how=Compile(), machine=None, symbol_action=None):
    root = unpack(submission, scratch)
    found, figures, ignored = collect(root, rubric)
    if ignored:
        log.append("ignored (not student files): " + ", ".join(ignored[:30]) +
                   (f" and {len(ignored) - 30} more" if len(ignored) > 30 else ""))
    missing = [f for f in rubric["student_files"] if f not in found]
    if missing:
        log.append("not submitted, starter stubs used: " + ", ".join(missing))

    kit_copy, build_dir = sync_kit(kit, work, rubric), work / "build"
    every_student_file = all_student_files(kit)
    for f in every_student_file:
        (reference_stubs(work) / f).parent.mkdir(parents=True, exist_ok=True)
        put(reference_stubs(work) / f, (kit / "starter" / f).read_bytes())
    stubs = {f: (kit / "starter" / f).read_bytes() for f in rubric["student_files"]}
    how = dataclasses.replace(how, stubs=tuple(sorted(set(every_student_file) - set(rubric["student_files"]))))
    cases = graded_cases(kit_copy, build_dir, work, rubric, stubs, sandbox, jobs, runs, log,
                         assignment, every_student_file, how)
    for f in rubric["student_files"]:
        put(kit_copy / "starter" / f, read_nofollow(found[f]) if f in found else stubs[f])

    items = [it for it in rubric["items"] if not items_filter or any(k in it["name"] for k in items_filter)]
    compile_failed, linked = {}, {}

    def build_now(targets=None):
        # With prebuilt, a file that is byte for byte that build's stub or solution links its object.
        linked.clear()
        linked.update(prebuilt_copies(how.prebuilt, kit_copy, rubric["student_files"]) if how.prebuilt else {})
        return build(kit_copy, build_dir, jobs, rubric["timeouts"]["build_seconds"], log, graded_suites(rubric),
                     dataclasses.replace(how, stubs=tuple(sorted(set(how.stubs) | set(linked)))), targets)

    rc, out = build_now()
    while rc != 0:  # make stops at the first broken file: repeat until no new one shows up
        new = {f: e for f, e in compile_errors_by_file(out, rubric["student_files"]).items()
               if f not in compile_failed}
        if not new:
            break
        compile_failed.update(new)
        for f in new:  # grade the rest: put the stub back for what does not compile
            put(kit_copy / "starter" / f, stubs[f])
        rc, out = build_now()
    build_broken = rc != 0
    if build_broken:
        log.append("the kit did not build:\n" + out[-4000:])

    wanted = wanted_cases(cases, items, rubric)
    results = {} if build_broken or not wanted else run_tests(
        sandbox, suite_programs(build_dir, graded_suites(rubric)), wanted, jobs,
        rubric["timeouts"]["tests_seconds"], test_timeout, rubric.get("may_skip", []), runs, log)

    gates_built = None
    # Built whenever a gate is on, --build-only included (Gradescope's setup); run after the
    # cases, so that nothing else runs while they time.
    if any("performance" in it for it in rubric["items"]) and not build_broken:
        rc, out = build_now(targets=["perf_worker", "perf_worker_reference"])
        gates_built = (rc == 0, out)

    return report(items, rubric, found, figures, results, compile_failed, build_broken, build_dir, symbol_action,
                  how.prebuilt, linked, lambda it: speed_gate(it, gates_built, build_dir, runs, machine, log))


def report(items, rubric, found, figures, results, compile_failed, build_broken, build_dir, symbol_action,
           prebuilt, linked, gate):
    """results.json's entries: the items scored (score_items), then the 0-point entries of the
    checks, whose findings can zero the items that use a flagged file."""
    restricted = "restrictions" in rubric  # Assignment 1's Problem 1 only
    static, zeroed = static_item(found, rubric, len(items) + 1 + restricted)
    checked, symbol_zeroed = (None, set()) if build_broken else symbol_item(
        found, rubric, build_dir, compile_failed, len(items) + 2 + restricted, symbol_action, prebuilt, linked)
    tests_out = score_items(items, results, figures, compile_failed, build_broken, zeroed | symbol_zeroed,
                            symbol_zeroed, gate)
    if restricted:
        problems = check_restrictions(found, rubric)
        tests_out.append({"name": "Implementation restrictions (Problem 1: only the kit's dist layer and launcher)",
                          "number": str(len(items) + 1), "score": 0, "max_score": 0,
                          "status": "failed" if problems else "passed", "visibility": "visible",
                          "output": "\n".join(problems) or "no include or call outside the allowed set"})
    return tests_out + [static] + ([checked] if checked else [])


def score_items(items, results, figures, compile_failed, build_broken, zeroed, symbol_zeroed, gate):
    """One results.json entry per rubric item: figures by their PNGs, speed gates by gate(item),
    test items by the share of their cases that passed (0 when a file they use did not compile,
    the build broke, or a check flagged a file they use)."""
    tests_out = []
    for number, it in enumerate(items, 1):
        entry = {"name": it["name"], "number": str(number), "max_score": it["points"], "visibility": "visible"}
        broken = [f for f in it.get("files", []) if f in compile_failed]
        flagged = [f for f in it.get("files", []) if f in zeroed]
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
        elif flagged:
            entry["score"] = 0
            by = [("the symbol check" if f in symbol_zeroed else "the static checks") + " flagged " + f
                  for f in flagged]
            entry["output"] = "0 points: " + "; ".join(by) + " (see the static checks and symbol check items)"
        elif "performance" in it:
            entry["score"], entry["output"] = gate(it)
        else:
            # given_tests check given code (input validation outside the student blocks): they
            # pass with the stubs, so they earn nothing (the starter must score 0). Skipped cases
            # (only those the rubric's may_skip allows, e.g. CUDA-only ones) count neither way.
            mine = {n: r for n, r in results.items() if any(fnmatch.fnmatchcase(n, p) for p in it["tests"])}
            counted = {n: r for n, r in mine.items() if r[0] != "skip"}
            passed = sum(st == "pass" for st, _ in counted.values())
            entry["score"] = round(it["points"] * passed / len(counted), 2) if counted else 0
            lines = [f"{passed}/{len(counted)} test cases passed"] if counted else ["no test case ran"]
            skipped = len(mine) - len(counted)
            if skipped:
                lines[0] += f" ({skipped} skipped on this machine, not counted)"
            for name, (st, text) in sorted(counted.items()):
                if st != "pass":
                    lines.append(f"\nFAILED {name}\n" + failure_message(text))
            entry["output"] = "\n".join(lines)
        entry["status"] = "passed" if entry["score"] == entry["max_score"] else "failed"
        tests_out.append(entry)
    return tests_out


def speed_gate(item, built, build_dir: Path, scratch: Path, machine, log):
    """(score, output) of a speed gate item: all its points when the gate passes (perf_gates.py)."""
    if not built[0]:
        return 0, "the speed gate's programs did not build:\n" + built[1][-3000:]
    spec = item["performance"]
    absolute = spec.get("absolute", {}).get(machine) if machine else None
    try:
        r = perf_gates.run_gate(spec["gate"], build_dir / "perf_worker_reference", build_dir / "perf_worker",
                                relative=spec["relative"], absolute=absolute, scratch=scratch)
    except Exception as e:  # this item only: the others keep their points
        log.append(f"speed gate {spec['gate']}: could not run: {type(e).__name__}: {e}")
        return 0, f"the speed gate could not run: {type(e).__name__}: {e}"
    log.append(f"speed gate {spec['gate']}: median {r['median']}, threshold {r['threshold']:.2f}, "
               f"{'passed' if r['passed'] else 'failed'}")
    return (item["points"] if r["passed"] else 0), r["output"]


def failed_reasons(item_output: str, lines=6, cases=3) -> list:
    """The first `lines` lines of the reason of each of an item's first `cases` failed cases
    (report()'s "FAILED <case>" blocks, without the subject's own output), then how many more."""
    blocks, current = [], None
    for line in item_output.splitlines():
        if line.startswith("FAILED "):
            current = [line]
            blocks.append(current)
        elif line.startswith("---- the code under test"):
            current = None
        elif current is not None and line.strip() and not re.match(r" *\d+ FAILED TESTS?$", line):
            current.append(line)
    out = []
    for block in blocks[:cases]:
        out += [block[0]] + ["    " + l for l in block[1:1 + lines]] + (["    ..."] if len(block) > 1 + lines else [])
    if len(blocks) > cases:
        out.append(f"... and {len(blocks) - cases} more failed cases")
    if not blocks and item_output.strip():   # not a test item (files, figures, the symbol check)
        out = [l for l in item_output.strip().splitlines() if l.strip()][:lines]
    return out


def print_reasons(results, stream=None):
    """Why each item that lost points lost them, a few lines per failed case (a local grade:
    the whole text is in results.json)."""
    stream = stream or sys.stdout
    lost = [t for t in results["tests"] if t["score"] < t["max_score"]]
    for t in lost:
        print(f"\n== {t['name']}: {t['score']} / {t['max_score']}", file=stream)
        for line in failed_reasons(t.get("output", "")):
            print("  " + line, file=stream)
    if lost:
        print("", file=stream)


def print_table(results, stream=None):
    stream = stream or sys.stdout  # looked up now: a caller may have redirected it
    width = max(len(t["name"]) for t in results["tests"])
    for t in results["tests"]:
        print(f"{t['name']:<{width}}  {t['score']:>6} / {t['max_score']:<4} {t['status']}", file=stream)
    total = sum(t["max_score"] for t in results["tests"])
    print(f"{'TOTAL':<{width}}  {results['score']:>6} / {total:<4} ({results['execution_time']} s)", file=stream)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("submission", type=Path, nargs="?", help="a directory or a .zip (not with --local)")
    ap.add_argument("--assignment", type=int, default=1, metavar="N",
                    help="which assignment to grade (default 1; its rubric is grader/assignment<N>/rubric.json); "
                         "only its student files are taken")
    ap.add_argument("--out", type=Path, help="where to write results.json (default: results.json; with --local, "
                                              "BUILD/results.json)")
    ap.add_argument("--work", type=Path, help="build directory to (re)use; default: a temporary one")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--items", nargs="*", help="grade only rubric items whose name contains one of these")
    ap.add_argument("--build-only", action="store_true",
                    help="build the assignment's test suites (e.g. at setup time), grade no item; "
                         f"the build may take up to {SETUP_BUILD_SECONDS} s; exit status 1 if it fails")
    ap.add_argument("--test-timeout", type=int, help="seconds per test case (default: rubric, 0 = suite TIMEOUTs)")
    ap.add_argument("--perf-gates", action="store_true",
                    help="turn on every speed gate (rubric items with a \"performance\" entry; off as shipped "
                         "unless the rubric says \"enabled\": true)")
    ap.add_argument("--machine", help="the name of this machine in the speed gates' \"absolute\" thresholds "
                                      "(default: thresholds relative to the bound the machine measures)")
    ap.add_argument("--fast-compile", action="store_true",
                    help=f"compile with {FAST_OPTIMIZE} instead of {OPTIMIZE}: about a quarter less build time "
                         "(the grader's self-tests use it; the graded cases check results, not speed)")
    ap.add_argument("--prebuilt", type=Path, metavar="BUILD",
                    help="link the given code's and the test programs' objects from BUILD, a finished build of "
                         "this same kit (KIT_PREBUILT), instead of compiling them again: the self-tests pass the "
                         "main build. Only for a build of the same sources, as in CI")
    ap.add_argument("--symbol-action", choices=("zero", "flag"),
                    help="what a finding of the symbol check costs (default: the rubric's "
                         "static_checks.symbols.action, else zero: every item using the file scores 0)")
    ap.add_argument("--local", type=Path, metavar="BUILD",
                    help="grade this tree's own starter/ files and submit_figures/ with BUILD, your build of "
                         "this tree (brought up to date first), instead of a submission: the public cases, "
                         "the same rubric, verdicts and checks, no separate build (what a student bundle's "
                         "scripts/test.sh runs)")
    bundle = bundle_info()
    if bundle:
        ap.set_defaults(assignment=bundle["assignment"])
    args = ap.parse_args(argv)
    if (args.submission is None) == (args.local is None):
        ap.error("give a submission to grade, or --local BUILD to grade this tree's own files")
    if args.local and (args.work or args.prebuilt or args.build_only or args.perf_gates):
        ap.error("--local grades a build you made: --work, --prebuilt, --build-only and --perf-gates do not apply")
    if args.assignment not in assignments():  # a usage error, before any results.json is written
        ap.error(f"there is no assignment {args.assignment}: this kit has assignments "
                 + ", ".join(map(str, assignments())) + " (assignment N is "
                 "grader/assignment<N>/rubric.json)")
    if args.out is None:
        args.out = args.local / "results.json" if args.local else Path("results.json")
    if args.build_only:
        args.items = ["\0"]  # a name no rubric item has
    tmp = None
    failed = False
    try:
        if args.local:
            results = grade_local(args.local, args.jobs, args.items, test_timeout=args.test_timeout,
                                  assignment=args.assignment, symbol_action=args.symbol_action)
            return finish(args.out, results, local=True)
        work = args.work or Path(tmp := tempfile.mkdtemp(prefix="grade-work-"))
        results = grade(args.submission, work.resolve(), args.jobs, args.items, test_timeout=args.test_timeout,
                        assignment=args.assignment,
                        how=Compile(FAST_OPTIMIZE if args.fast_compile else OPTIMIZE,
                                    str(args.prebuilt.resolve()) if args.prebuilt else ""),
                        perf_gates=args.perf_gates, machine=args.machine, symbol_action=args.symbol_action,
                        build_seconds=SETUP_BUILD_SECONDS if args.build_only else None)
    except Exception as e:  # never leave the instructor without a results.json
        failed = True
        results = {"score": 0, "execution_time": 0, "output": f"grader error: {type(e).__name__}: {e}",
                   "tests": [{"name": "Grading", "number": "0", "score": 0, "max_score": 100, "status": "failed",
                              "visibility": "visible", "output": f"grader error: {e}"}]}
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    rc = finish(args.out, results)
    # Gradescope's setup.sh must fail (the image build shows it) when the kit does not build.
    return 1 if args.build_only and failed else rc


def finish(out: Path, results, local=False) -> int:
    """Write results.json (only now that every process the submission started is gone: grade()
    swept them; in one rename, so no reader ever sees a half-written file) and print the table."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(tmp, out)
    if results["output"]:
        print(results["output"])
    if local:
        print_reasons(results)
    print_table(results)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
