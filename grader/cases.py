"""Which test cases exist and running them: gtest's listing, each case as its own process
in the sandbox (or in batches), the subject and judge parts, and a case's verdict.
"""
import concurrent.futures
import fnmatch
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sandbox import OUTPUT_KEEP  # noqa: E402


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
