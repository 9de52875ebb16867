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
import concurrent.futures
import dataclasses
import hashlib
import fnmatch
import functools
import json
import os
import re
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sandbox import OUTPUT_KEEP, Sandbox  # noqa: E402
import perf_gates  # noqa: E402
import symbols  # noqa: E402

KIT = Path(__file__).resolve().parent.parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# What a clean copy of the kit leaves out: builds, VCS, the reference solution, local data,
# figures and the grader's own wrong submissions. TOP_IGNORE applies only at the kit's root
# (starter/data/ is given code and must be copied).
TOP_IGNORE = shutil.ignore_patterns("build*", "solution", "data", "runs", "submit_figures", ".venv*")
ANY_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", "wrong_submissions")


def rubric_path(kit: Path, assignment: int) -> Path:
    """Assignment N's rubric: grader/assignment<N>/rubric.json."""
    return kit / "grader" / f"assignment{assignment}" / "rubric.json"


def assignments(kit=KIT) -> list:
    """The assignment numbers this kit has a rubric for (grader/assignment<N>/rubric.json), in order."""
    found = [int(m.group(1)) for p in (kit / "grader").glob("assignment*/rubric.json")
             if (m := re.fullmatch(r"assignment([0-9]+)", p.parent.name)) and int(m.group(1)) >= 1]
    return sorted(found)


def load_rubric(kit=KIT, assignment=1):
    if assignment not in assignments(kit):
        raise ValueError(f"there is no assignment {assignment}: this kit has assignments "
                         + ", ".join(map(str, assignments(kit)))
                         + " (assignment N is grader/assignment<N>/rubric.json)")
    return json.loads(rubric_path(kit, assignment).read_text())


def all_student_files(kit=KIT) -> list:
    """Every assignment's student files (the build compiles them all: the ones not graded now
    are the kit's starter stubs)."""
    out = []
    lists = [load_rubric(kit, a)["student_files"] for a in assignments(kit)]
    # a student bundle has its own rubrics only; grader/bundle.json lists every assignment's files
    lists += list(bundle_info(kit).get("student_files", {}).values())
    for files in lists:
        out += [f for f in files if f not in out]
    return out


# ---------------------------------------------------------------- the submission
MAX_UNPACKED = 256 * 1024 ** 2  # bytes a submission zip may unpack to


def unpack(submission: Path, scratch: Path) -> Path:
    """The submission's root directory (a zip is extracted; one enclosing folder is entered)."""
    if not submission.exists():
        raise FileNotFoundError(f"submission {submission} does not exist")
    if submission.is_file():
        if not zipfile.is_zipfile(submission):
            raise ValueError(f"submission {submission} is neither a directory nor a zip file")
        root = (scratch / "unzipped").resolve()
        with zipfile.ZipFile(submission) as z:
            members = z.infolist()
            if sum(m.file_size for m in members) > MAX_UNPACKED:
                raise ValueError(f"the zip unpacks to more than {MAX_UNPACKED >> 20} MiB: submit only the "
                                 "student files and submit_figures/")
            for m in members:  # refuse paths that escape the extraction directory, and links
                target = (root / m.filename).resolve()
                if target != root and root not in target.parents:
                    raise ValueError(f"zip member {m.filename} points outside the archive")
                if stat.S_ISLNK(m.external_attr >> 16):
                    raise ValueError(f"zip member {m.filename} is a symbolic link: submit the file itself")
            z.extractall(root)
        submission = root
    entries = [p for p in submission.iterdir() if p.name not in ("__MACOSX", ".DS_Store")]
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return submission


def regular_file(root: Path, rel: str):
    """root/rel when it is a regular file reached without any symbolic link, else None."""
    path = root
    for part in Path(rel).parts:
        path = path / part
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return None
    return path if stat.S_ISREG(st.st_mode) else None


def read_nofollow(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def collect(root: Path, rubric):
    """(student files found {f: path}, figures {name: path}, ignored relative paths).
    Symbolic links are never followed: a link is listed as ignored, whatever it points to."""
    found, figures, used = {}, {}, set()
    for f in rubric["student_files"]:
        for rel in ("starter/" + f, f):
            cand = regular_file(root, rel)
            if cand:
                found[f] = cand
                used.add(cand)
                break
    fig_dir = root / "submit_figures"
    if fig_dir.is_dir() and not fig_dir.is_symlink():
        for p in sorted((root / "submit_figures").iterdir()):
            if regular_file(root, "submit_figures/" + p.name):
                figures[p.name] = p
                used.add(p)
    ignored = []
    for dirpath, dirnames, filenames in os.walk(root):  # does not descend into linked directories
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / name
            if p not in used:
                ignored.append(str(p.relative_to(root)) + (" (a symbolic link)" if p.is_symlink() else ""))
    return found, figures, sorted(ignored)


# ---------------------------------------------------------------- the kit copy
def sync_tree(src: Path, dst: Path, skip=()):
    """Copy src to dst but `skip` (relative paths), rewriting only files whose content changed
    (keeps rebuilds incremental), and remove what dst has that src no longer has (a test file
    deleted from the kit, or one from another checkout that graded in the same work dir, must
    not be built and graded)."""
    wanted = set()
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        ignored = ANY_IGNORE(dirpath, dirnames + filenames)
        if rel == Path("."):
            ignored |= TOP_IGNORE(dirpath, dirnames + filenames)
        dirnames[:] = [d for d in dirnames if d not in ignored]
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in filenames:
            if name in ignored:
                continue
            wanted.add(rel / name)
            if str(rel / name) in skip:
                continue
            path, out = Path(dirpath) / name, dst / rel / name
            if not out.exists() or out.read_bytes() != path.read_bytes():
                shutil.copy2(path, out)
                os.utime(out)  # a fresh mtime, so make rebuilds what changed
    for dirpath, dirnames, filenames in os.walk(dst, topdown=False):
        rel = Path(dirpath).relative_to(dst)
        for name in filenames:
            if rel / name not in wanted:
                os.unlink(Path(dirpath) / name)
        if rel != Path(".") and not os.listdir(dirpath):
            os.rmdir(dirpath)


def put(path: Path, data: bytes):
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)


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


def graded_suites(rubric) -> list:
    """The test suites the rubric's items use (a test name is <suite>.<gtest name>)."""
    return sorted({t.split(".")[0] for it in rubric["items"] for t in it.get("tests", [])})


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


# ---------------------------------------------------------------- which cases, and running them
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


def suite_programs(build_dir: Path, suites):
    """{suite: {"program", "timeout"}} from the manifests the kit's build writes (tests/CMakeLists.txt)."""
    out = {}
    for s in suites:
        path = build_dir / "kit_suites" / f"{s}.json"
        if not path.is_file():
            raise RuntimeError(f"the build wrote no {path}: is '{s}' a test suite under tests/?")
        out[s] = json.loads(path.read_text())
    return out


def parse_gtest_list(text: str):
    """Case names (Suite.Case) from `--gtest_list_tests` output."""
    cases, suite = [], None
    for line in text.splitlines():
        if not line.strip() or line.startswith(("Running main()", "[")):
            continue
        name = line.split("#", 1)[0].rstrip()
        if not line.startswith(" "):
            suite = name.rstrip(".")
        elif suite and "DISABLED_" not in suite + name:
            cases.append(f"{suite}.{name.strip()}")
    return cases


def list_cases(sandbox, programs, scratch: Path, log):
    """{graded name (<suite>.<gtest name>): (suite, gtest name)} as the given build lists them
    (in the sandbox, or, with sandbox None, directly: the grader's own prebuilt build)."""
    cases = {}
    for suite, info in sorted(programs.items()):
        if sandbox is None:  # the grader's own prebuilt build: no submission's code is in it
            p = subprocess.run([info["program"], "--gtest_list_tests"], cwd=scratch, timeout=120,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
            r = {"exit": p.returncode, "output": p.stdout}
        else:
            r = sandbox.run([info["program"], "--gtest_list_tests"], scratch, 120, channel=False, keep=4 << 20)
        names = parse_gtest_list(r["output"])
        if r["exit"] != 0 or not names:
            raise RuntimeError(f"listing the cases of {info['program']} failed (exit {r['exit']}):\n"
                               + r["output"][-2000:])
        log.append(f"{suite}: {len(names)} cases listed")
        for n in names:
            cases[f"{suite}.{n}"] = (suite, n)
    return cases


def case_verdict(r, gtest_name, may_skip: bool, timeout):
    """'pass', 'fail' or 'skip', and what to show. The verdict pipe must carry exactly what the
    kit's main() writes for one case (tests/kit_gtest_main.cpp): its signed verdict, then the
    signed END 1. A failure line (written the moment an assertion failed) or any line the kit
    never writes makes the case fail, whatever else the pipe says."""
    records, out = r["records"], r["output"]
    if r["timed_out"]:
        return "fail", f"timeout: the case was stopped after {timeout} s (other cases are not affected)\n" + out
    if any(kind == "TAKEN" for kind, _ in records):
        return "fail", ("the run's token was taken out of its pipe (the kit's main() only copies it): something "
                        "in the test process read it, so nothing the verdict channel says counts\n" + out)
    foreign = [rest for kind, rest in records if kind == "FOREIGN"]
    if foreign:
        return "fail", (f"the verdict channel carried {len(foreign)} line(s) that the kit's main() never writes "
                        f"(the first: {foreign[0][:80]!r}): something in the test process wrote to it, so "
                        "nothing it says counts\n" + out)
    if any(kind == "FAILURE" for kind, _ in records):
        return "fail", out
    if records == [("PASS", gtest_name), ("END", "1")]:
        return "pass", out
    if records == [("SKIP", gtest_name), ("END", "1")]:
        if may_skip:
            return "skip", out
        return "fail", "the case was skipped, and this case may not be skipped\n" + out
    mine = [kind for kind, rest in records if kind in ("PASS", "FAIL", "SKIP") and rest == gtest_name]
    if "FAIL" in mine:
        return "fail", out
    status = r["exit"] if r["exit"] >= 0 else f"killed by signal {-r['exit']}"
    if not mine:
        return "fail", (f"the test program ended (exit status {status}) without reporting that this case ran "
                        "to the end: it stopped early, crashed or exited from inside the code under test\n" + out)
    if [k for k, _ in records] == ["PASS"] or [k for k, _ in records] == ["SKIP"]:
        return "fail", (f"the case ended but the test program did not (exit status {status}): it crashed or "
                        "exited after the case, before GoogleTest finished\n" + out)
    return "fail", (f"the test program reported {len(records)} verdict lines for this run, not the case's "
                    "verdict and END 1\n" + out)


def subject_status(r, timeout) -> str:
    """How a subject process ended, in words (the judge's messages quote it)."""
    if r["timed_out"]:
        return f"was stopped after {timeout} s (the case's time limit)"
    if r["exit"] < 0:
        return f"was killed by signal {-r['exit']}"
    return f"exited with status {r['exit']}"


def judged_case(sandbox, program, gtest_name, scratch: Path, left, timeout, skip_ok):
    """One case as subject + judge (tests/judge/judge.h), each in a process of its own. The
    subject, the suite's test program with the student's code, runs the case and writes what
    the code produced to a pipe; it gets no verdict channel and nothing it says or returns
    counts. Once every process it left is gone, the judge (the same tests linked with no student
    object) reads its records, computes the expected values and answers on the verdict channel.
    The grader runs cases in batches (run_tests); this is the way a case runs on its own."""
    subject = sandbox.run([program["program"], f"--gtest_filter={gtest_name}"], scratch, left(),
                          channel=False, subject=True)
    status = subject_status(subject, timeout)
    return judge_one(sandbox, program, gtest_name, scratch, left, timeout, skip_ok,
                     {"records": subject["subject_records"], "status": status,
                      "stopped": subject["timed_out"], "output": subject["output"]})


def judge_one(sandbox, program, gtest_name, scratch: Path, left, timeout, skip_ok, subject):
    """The judge's run of one case on its subject's records (a dict: records, status, stopped,
    output); the subject's being stopped at the time limit fails the case whatever it wrote."""
    fd, path = tempfile.mkstemp(prefix="records-", dir=scratch)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(subject["records"])
        os.chmod(path, 0o644)  # the judge runs as a sandbox user: it reads, nobody else writes
        judge = sandbox.run([program["judge"], f"--gtest_filter={gtest_name}"], scratch, left(),
                            env={"KIT_JUDGE_RECORDS": path, "KIT_JUDGE_SUBJECT_STATUS": subject["status"]})
    finally:
        os.unlink(path)
    verdict, out = case_verdict(judge, gtest_name, skip_ok, timeout)
    return with_subject(verdict, out, subject, timeout)


def with_subject(verdict, judge_output, subject, timeout):
    """A case's verdict and message: the judge's output, then the subject's."""
    out = judge_output.rstrip() + "\n---- the code under test (the subject process, which " + subject["status"] + \
        "): its output ----\n" + subject["output"]
    if subject["stopped"]:
        return "fail", f"timeout: the case was stopped after {timeout} s (other cases are not affected)\n" + out
    return verdict, out


# ---------------------------------------------------------------- cases in batches
# A LibTorch test program takes about 0.6 s to start, longer than most cases run, so judged
# cases run in batches (tests/judge/batch.h): one subject process per batch forks a child per
# case (a fresh process for the case in all that matters: loaded, not yet run), then, once every
# subject process is gone, one judge process per batch judges them all. What a batch did not
# finish (it crashed, was stopped, wrote something else) runs again on its own.
BATCH_CASES = 24  # at most, per batch: smaller batches spread over the jobs
BATCH_OUTPUT_KEEP = 16 * 1024 ** 2  # bytes of a batch's output kept (each case's part: OUTPUT_KEEP)


def case_batches(names_by_suite: dict, jobs: int):
    """[(suite, [gtest names])]: each suite's cases dealt round-robin into batches of at most
    BATCH_CASES, at least `jobs` batches per suite when it has that many cases (none when
    BATCH_CASES is 0: every case on its own)."""
    out = []
    if BATCH_CASES <= 0:
        return out
    for suite, names in sorted(names_by_suite.items()):
        n = min(len(names), max(jobs, -(-len(names) // BATCH_CASES)))
        out += [(suite, names[k::n]) for k in range(n) if names[k::n]]
    return out


def parse_case_frames(data: bytes, names) -> dict:
    """{gtest name: (status words, stopped, records)} from a subject batch's stream of case
    frames (tests/judge/batch.h), for the names asked for; reading stops at the first thing that
    is not a whole frame (the cases after it run again on their own)."""
    out, at, wanted = {}, 0, set(names)
    while len(data) - at >= 11 and data[at:at + 3] == b"CAS":
        n = int.from_bytes(data[at + 3:at + 11], "little")
        if n > len(data) - at - 11:
            break
        body, at = data[at + 11:at + 11 + n], at + 11 + n
        fields, k = [], 0
        while len(fields) < 4 and len(body) - k >= 8:
            m = int.from_bytes(body[k:k + 8], "little")
            if m > len(body) - k - 8:
                break
            fields.append(body[k + 8:k + 8 + m])
            k += 8 + m
        if len(fields) != 4 or k != len(body) or fields[2] not in (b"0", b"1"):
            break
        name = fields[0].decode(errors="replace")
        if name in wanted:
            out[name] = (fields[1].decode(errors="replace")[:200], fields[2] == b"1", fields[3])
    return out


def split_output(text: str, marker: str, names) -> dict:
    """{name: its part of a batch's output}: from the line `marker + name` to the next marker line
    (the end of each part kept, OUTPUT_KEEP bytes)."""
    parts, current = {}, None
    for line in text.splitlines(keepends=True):
        if line.startswith(marker) and line[len(marker):].strip() in names:
            current = line[len(marker):].strip()
            parts[current] = []
        elif current is not None:
            parts[current].append(line)
    out = {}
    for name, lines in parts.items():
        t = "".join(lines)
        out[name] = t if len(t) <= OUTPUT_KEEP else "[... output left out]\n" + t[-OUTPUT_KEEP:]
    return out


def subject_batch(sandbox, program, names, scratch: Path, left, timeout) -> dict:
    """{gtest name: subject dict (judge_one's)} for the cases of one subject batch that it finished."""
    fd, path = tempfile.mkstemp(prefix="cases-", dir=scratch)
    with os.fdopen(fd, "w") as f:
        f.write("".join(n + "\n" for n in names))
    os.chmod(path, 0o644)
    try:
        r = sandbox.run([program["program"]], scratch, left(), channel=False,
                        subject=True, keep=BATCH_OUTPUT_KEEP,
                        env={"KIT_SUBJECT_CASES": path, "KIT_SUBJECT_CASE_TIMEOUT": str(timeout)})
    finally:
        os.unlink(path)
    frames = parse_case_frames(r["subject_records"], names)
    outputs = split_output(r["output"], "==== KIT-SUBJECT-CASE ", set(names))
    return {n: {"status": status, "stopped": stopped, "records": records,
                "output": outputs.get(n, "(its output is not available: see the batch's)")}
            for n, (status, stopped, records) in frames.items()}


def judge_batch(sandbox, program, subjects: dict, scratch: Path, left, timeout, skip_ok) -> dict:
    """{gtest name: (verdict, output)} for the cases of one judge batch that it judged; the
    judge process reads each case's records from a directory of the grader's."""
    names = sorted(subjects)
    records = Path(tempfile.mkdtemp(prefix="records-", dir=scratch))
    try:
        for n, s in subjects.items():
            stem = records / "".join(f"{b:02x}" for b in n.encode())
            stem.with_suffix(".records").write_bytes(s["records"])
            stem.with_suffix(".status").write_text(s["status"])
        for f in records.iterdir():
            os.chmod(f, 0o644)  # the judge runs as a sandbox user: it reads, nobody else writes
        os.chmod(records, 0o755)
        r = sandbox.run([program["judge"], "--gtest_filter=" + ":".join(names)], scratch, left(),
                        keep=BATCH_OUTPUT_KEEP, env={"KIT_JUDGE_RECORDS": str(records)})
    finally:
        shutil.rmtree(records, ignore_errors=True)
    outputs = split_output(r["output"], "[ RUN      ] ", set(names))
    return {n: with_subject(*v, subjects[n], timeout)
            for n, v in batch_verdicts(r, names, skip_ok, outputs).items()}


def batch_verdicts(r, names, skip_ok, outputs) -> dict:
    """{gtest name: (verdict, output)} for the cases a judge batch's verdict channel settles: a
    case's own signed verdict line, exactly one (a failure line for it makes it fail). A channel
    that carried anything the kit never writes, or a batch stopped at its time limit, settles
    nothing: those cases are judged again on their own."""
    records = r["records"]
    if r["timed_out"] or any(kind in ("TAKEN", "FOREIGN") for kind, _ in records):
        return {}
    out = {}
    for n in names:
        mine = [kind for kind, rest in records if kind in ("PASS", "FAIL", "SKIP") and rest == n]
        if len(mine) != 1:
            continue
        text = outputs.get(n, "")
        if mine[0] == "FAIL" or any(kind == "FAILURE" and rest == n for kind, rest in records):
            out[n] = ("fail", text)
        elif mine[0] == "SKIP" and not skip_ok(n):
            out[n] = ("fail", "the case was skipped, and this case may not be skipped\n" + text)
        else:
            out[n] = (mine[0].lower(), text)
    return out


def wanted_cases(cases, items, rubric):
    """The cases the items grade: those their patterns match, but given_tests (given code's own
    checks, which pass with the stubs and so earn nothing)."""
    patterns = [p for it in items for p in it.get("tests", [])]
    return {n: c for n, c in cases.items() if any(fnmatch.fnmatchcase(n, p) for p in patterns)
            and not any(fnmatch.fnmatchcase(n, p) for p in rubric.get("given_tests", []))}


def run_tests(sandbox, programs, cases, jobs: int, budget: int, test_timeout, may_skip, scratch: Path, log):
    """{graded name: (status, output)}: every case in sandboxed processes, `jobs` at a time; a
    suite's judged cases in batches (subjects first, then judges), the others and whatever a
    batch did not finish each in processes of its own."""
    t0, results = time.time(), {}
    timeout_of = lambda suite: test_timeout or programs[suite]["timeout"]
    left_of = lambda timeout: lambda: min(timeout, max(1, budget - (time.time() - t0)))
    skip_ok = lambda name: any(fnmatch.fnmatchcase(name, p) for p in may_skip)
    graded = {(suite, g): name for name, (suite, g) in cases.items()}

    def one(name):
        suite, gtest_name = cases[name]
        timeout = timeout_of(suite)
        if time.time() - t0 + 1 > budget:
            return name, ("fail", f"not run: the grading time budget of {budget} s ran out")
        if "judge" in programs[suite]:
            return name, judged_case(sandbox, programs[suite], gtest_name, scratch, left_of(timeout), timeout,
                                     skip_ok(name))
        r = sandbox.run([programs[suite]["program"], f"--gtest_filter={gtest_name}"], scratch, left_of(timeout)())
        return name, case_verdict(r, gtest_name, skip_ok(name), timeout)

    by_suite = {}
    for name, (suite, g) in sorted(cases.items()):
        if "judge" in programs[suite]:
            by_suite.setdefault(suite, []).append(g)
    batches = case_batches(by_suite, jobs)
    subjects = {}

    def subjects_of(batch):
        suite, names = batch
        if time.time() - t0 + 1 > budget:
            return suite, {}
        timeout = timeout_of(suite)
        return suite, subject_batch(sandbox, programs[suite], names, scratch, left_of((timeout + 2) * len(names)),
                                    timeout)

    def judged(batch):
        suite, names = batch
        mine = {n: subjects[suite, n] for n in names if (suite, n) in subjects}
        if not mine or time.time() - t0 + 1 > budget:
            return suite, {}
        timeout = timeout_of(suite)
        return suite, judge_batch(sandbox, programs[suite], mine, scratch, left_of((timeout + 2) * len(mine)), timeout,
                                  lambda n: skip_ok(graded[suite, n]))

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for suite, done in pool.map(subjects_of, batches):
            subjects.update({(suite, n): s for n, s in done.items()})
        for suite, done in pool.map(judged, batches):
            results.update({graded[suite, n]: v for n, v in done.items()})
        in_batches = len(results)
        # Judged again on their own, on the records their subject batch left.
        again = [(suite, n) for (suite, n) in subjects if graded[suite, n] not in results]
        for (suite, n), v in zip(again, pool.map(
                lambda k: judge_one(sandbox, programs[k[0]], k[1], scratch, left_of(timeout_of(k[0])),
                                    timeout_of(k[0]), skip_ok(graded[k]), subjects[k]), again)):
            results[graded[suite, n]] = v
        rest = sorted(n for n in cases if n not in results)
        for name, verdict in pool.map(one, rest):
            results[name] = verdict
    log.append(f"ran the {len(cases)} cases the items grade in {time.time() - t0:.0f} s ({in_batches} in batches, "
               f"{len(again)} judged again on their own, {len(rest)} on their own)")
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
    data = read_nofollow(path)[:33]
    if len(data) < 33 or data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
        return False, "not a PNG file"
    w, h = struct.unpack(">II", data[16:24])
    if w == 0 or h == 0:
        return False, "PNG with zero size"
    return True, f"{w}x{h} PNG"


def lex(src: str):
    """(code, strings): code with comments and the insides of string and character literals
    blanked (line numbers kept), and [(line, literal text)]. Line continuations are joined
    first, so a name cannot be hidden by splitting it over two lines."""
    src = re.sub(r"\\\r?\n", "", src)
    code, strings, i, n, line = [], [], 0, len(src), 1
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            code.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            chunk = src[i:j]
            code.append(re.sub(r"[^\n]", " ", chunk))
            line += chunk.count("\n")
            i = j
        elif c in "\"'":
            m = re.match(r'R"([^(\s]*)\((.*?)\)\1"', src[i - 1:], re.S) if c == '"' and i and src[i - 1] == "R" \
                else re.match(r"%s(\\.|[^%s\\\n])*%s?" % (c, c, c), src[i:], re.S)
            text = m.group(0)[1:] if c == '"' and i and src[i - 1] == "R" else m.group(0)
            strings.append((line, text))
            code.append(c + re.sub(r"[^\n]", " ", text[1:]))
            line += text.count("\n")
            i += len(text)
        else:
            code.append(c)
            line += c == "\n"
            i += 1
    return "".join(code), strings


def strip_comments(src: str) -> str:
    return lex(src)[0]


def token_regex(token: str) -> str:
    """A call 'name(' (any '::' qualification, not a member '.name(' or '->name('), a word, or text."""
    if token.endswith("("):
        return r"(?<![\w.>])(?:\w+\s*)?(?:::\s*)?" + re.escape(token[:-1]) + r"\s*\("
    if re.fullmatch(r"[\w:]+", token):
        return r"(?<![\w.>])" + re.escape(token) + r"(?!\w)"
    return re.escape(token)


def includes(text: str):
    """[(line, header)] of the #include lines (continuations joined, comments removed)."""
    code = strip_comments(text)
    out = []
    for n, line in enumerate(code.splitlines(), 1):
        m = re.match(r'\s*#\s*include\s*[<"]?\s*([^>"\s]*)', line)
        if m:
            # strip_comments blanks the insides of "...": take the name from the raw text's line
            raw = re.sub(r"\\\r?\n", "", text).splitlines()
            r = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', raw[n - 1]) if n <= len(raw) else None
            out.append((n, r.group(1) if r else m.group(1)))
    return out


@functools.lru_cache(maxsize=None)
def test_headers():
    """Names of the files under the kit's tests/ (a student file that includes one reaches the
    test programs' own code)."""
    return frozenset(p.name for p in (KIT / "tests").rglob("*") if p.is_file())


def static_findings(found, rubric):
    """[(file, line, what, text)]: calls that have no business in a student file (rubric
    "static_checks"), in every student file; string literals are searched for the "strings" list."""
    checks, out = rubric.get("static_checks", {}), []
    for f in sorted(found):
        text = read_nofollow(found[f]).decode(errors="replace")
        code, strings = lex(text)
        code_lines = code.splitlines()
        for what, tokens in checks.get("code", {}).items():
            pats = [(t, re.compile(token_regex(t))) for t in tokens]
            for n, l in enumerate(code_lines, 1):
                hits = [t for t, rx in pats if rx.search(l)]
                if hits:
                    out.append((f, n, what, ", ".join(t.rstrip("(") for t in hits) + ": " + l.strip()[:120]))
        for n, header in includes(text):
            name = Path(header).name
            if name in test_headers() or re.search(r"gtest|gmock|(^|/)tests/", header):
                out.append((f, n, "includes test code", f"#include {header}: the test programs' own code (their "
                                                        "verdicts, their helpers) is not for student files"))
        for what, needles in checks.get("strings", {}).items():
            for n, lit in strings:
                hits = [x for x in needles if x in lit]
                if hits:
                    out.append((f, n, what, ", ".join(hits) + ": " + lit[:120]))
    return sorted(set(out), key=lambda x: (x[0], x[1], x[2]))


def check_restrictions(found, rubric):
    r = rubric.get("restrictions", {})
    allowed = set(r.get("allowed_includes", []))
    problems = []
    for f in r.get("files", []):
        if f not in found:
            continue
        text = read_nofollow(found[f]).decode(errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            m = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', line)
            if m and m.group(1) not in allowed:
                problems.append(f"{f}:{n}: #include <{m.group(1)}> is outside the allowed set (the handout lists "
                                "it, under Problem 1; a finding costs no points by itself: your instructor reads it)")
        code = strip_comments(text)
        for call in r.get("forbidden_calls", []):
            pat = re.escape(call) + (r"\s*\(" if call[-1].isalnum() and "::" not in call else "")
            if re.search(r"(?<![\w:])" + pat, code):
                problems.append(f"{f}: uses {call} (Problem 1 may use only the kit's dist layer and launcher)")
    return problems


# ---------------------------------------------------------------- grading
def cases_cache(work: Path, kit_copy: Path, assignment: int, student_files) -> Path:
    """work/cases/a<assignment>-<kit fingerprint>.json: each assignment keeps its own list."""
    return work / "cases" / f"a{assignment}-{kit_fingerprint(kit_copy, student_files, assignment)}.json"


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
    cache = cases_cache(work, kit_copy, assignment, student_files or rubric["student_files"])
    if cache.is_file():
        return json.loads(cache.read_text())
    if how.prebuilt:
        # The prebuilt build's test programs are linked from the very objects this work dir's
        # are, so they list the same cases, and it is the grader's own build: no stub build here.
        listed_in = Path(how.prebuilt)
    else:
        for f in rubric["student_files"]:
            put(kit_copy / "starter" / f, stubs[f])
        rc, out = build(kit_copy, build_dir, jobs, rubric["timeouts"]["build_seconds"], log,
                        graded_suites(rubric), how)
        if rc != 0:
            raise RuntimeError("the kit with its starter stubs does not build:\n" + out[-4000:])
        listed_in = build_dir
    cases = list_cases(None if how.prebuilt else sandbox, suite_programs(listed_in, graded_suites(rubric)),
                       scratch, log)
    check_patterns(rubric, cases)
    store_cases(cache, cases, assignment)
    return cases


def static_item(found, rubric, number):
    """The 0-point item that shows what the static checks saw, and the files they flagged."""
    findings = static_findings(found, rubric)
    action = rubric.get("static_checks", {}).get("action", "flag")
    lines = [f"{f}:{n}: {what}: {text}" for f, n, what, text in findings]
    if findings:
        lines.append("\nThese calls have no business in a student file. " +
                     ("Items that use a flagged file score 0 (rubric static_checks.action = \"zero\")."
                      if action == "zero" else "They cost no points; the instructor reads this list."))
    return {"name": "Static checks: calls with no business in a student file (read by the instructor)",
            "number": str(number), "score": 0, "max_score": 0, "visibility": "visible",
            "status": "failed" if findings else "passed",
            "output": "\n".join(lines) or "nothing found: no process exit, process start, /proc, environment, "
                                          "argv or file access in any student file"}, \
        ({f for f, *_ in findings} if action == "zero" else set())


def prebuilt_copies(prebuilt: str, kit_copy: Path, files) -> dict:
    """{student file: its object in the prebuilt build} for each file of kit_copy/starter that is
    byte for byte that build's starter stub or (a KIT_SOLUTION build) its solution: CMake's
    KIT_PREBUILT_STUBS links those objects instead of compiling the same source again (the
    self-tests grade the solution, and files left as stubs, in no compile time)."""
    cache = (Path(prebuilt) / "CMakeCache.txt").read_text(errors="replace")
    home = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache, re.M)
    solution = re.search(r"^KIT_SOLUTION:BOOL=(ON|TRUE|1)$", cache, re.M | re.I)
    out = {}
    for f in files:
        mine = (kit_copy / "starter" / f).read_bytes()
        for side, dirs in symbols.OBJECT_DIRS.items():
            src = Path(home.group(1)) / side / f if home else None
            if (side == "solution" and not solution) or not src or not src.is_file() or src.read_bytes() != mine:
                continue
            objs = [Path(prebuilt) / "CMakeFiles" / d / (f + ".o") for d in dirs]
            objs = [o for o in objs if o.is_file()]
            if objs:
                out[f] = objs[0]
                break
    return out


def student_object(build_dir: Path, f: str):
    """The object file the build compiled from student file f (libkit_student's or the planner's), or None."""
    for target in ("kit_student", "kit_planner"):
        for top in ("starter", "solution"):
            obj = build_dir / "CMakeFiles" / f"{target}.dir" / top / (f + ".o")
            if obj.is_file():
                return obj
    return None


def given_objects(build_dir: Path, student_files, prebuilt=""):
    """The objects of the given code and of the test programs in a build (those it linked from
    a prebuilt build included): what a student object must not redefine, and where given code
    that touches files lives."""
    mine = {str(Path(top) / (f + ".o")) for f in student_files for top in ("starter", "solution")}
    out = []
    base = Path(prebuilt) if prebuilt else build_dir
    dirs = [base / "CMakeFiles" / "kit_given.dir", build_dir / "CMakeFiles" / "kit_planner.dir", build_dir / "tests"]
    if prebuilt:
        dirs.append(base / "tests")
    for d in dirs:
        if d.is_dir():
            out += [o for o in sorted(d.rglob("*.o")) if not any(str(o).endswith("/" + m) for m in mine)]
    return out


def symbol_item(found, rubric, build_dir: Path, skip, number, action=None, prebuilt="", linked=None):
    """The 0-point item that shows what the symbol check (grader/symbols.py) found in the
    compiled student files, and the files it flagged (when its action is "zero", the default).
    linked: {file: object} for files linked from the prebuilt build (prebuilt_copies)."""
    action = action or rubric.get("static_checks", {}).get("symbols", {}).get("action", "zero")
    lines, flagged, t0 = [], set(), time.time()
    given = symbols.GivenCode.cached(given_objects(build_dir, all_student_files(), prebuilt),
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


def enabled_items(rubric, perf_gates=False):
    """The rubric without its disabled items ("enabled": false: the speed gates as shipped);
    perf_gates (--perf-gates) turns every speed gate on."""
    rubric = dict(rubric)
    rubric["items"] = [it for it in rubric["items"]
                       if it.get("enabled", True) or (perf_gates and "performance" in it)]
    return rubric


# ---------------------------------------------------------------- a student's own build
def bundle_info(kit=KIT) -> dict:
    """grader/bundle.json of a student bundle (package.py writes it: the assignment, which earlier
    assignments' reference solutions it carries), or {} in the instructor's kit."""
    path = kit / "grader" / "bundle.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def unmatched_patterns(rubric, cases) -> list:
    """The rubric's test patterns that match no case in `cases`."""
    return [p for it in rubric["items"] for p in it.get("tests", [])
            if not any(fnmatch.fnmatchcase(n, p) for n in cases)]


def check_patterns(rubric, cases, hidden=()):
    """Every test pattern of the rubric matches a case (but the `hidden` ones): else the rubric
    and the kit disagree, and grading stops rather than score an item on fewer cases."""
    unmatched = [p for p in unmatched_patterns(rubric, cases) if p not in hidden]
    if unmatched:
        raise RuntimeError("rubric test patterns that match no case of the kit: " + ", ".join(unmatched))


def hidden_patterns(rubric, cases) -> list:
    """The rubric's test patterns that match no case of this build because their cases are
    hidden (grader/hidden_tests/, which only the instructor's grader has: Hidden* by name)."""
    return [p for p in unmatched_patterns(rubric, cases) if ".Hidden" in p]


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
