#!/usr/bin/env python3
"""Speed gates: is the student's parallel configuration faster than its reference, by as much
as this machine allows?

    python3 grader/perf_gates.py --build build                  # every gate, the rubric's thresholds
    python3 grader/perf_gates.py --build build --gate pipe --pairs 5 --relative 0.6

Each gate times two configurations of grader/perf/perf_worker.cpp, kept alive as worker
processes: the reference (perf_worker_reference, built without any student code) and the
student's (perf_worker). The measurement follows the original course's: 2 warm-up steps, then
5 pairs of 3-step measurements in alternating order (AB, BA, AB, ...), credit from the median
ratio reference time / student time. The parameters are compared after every pair (a fast
wrong run earns nothing). The threshold is relative to a bound this machine measures in the
same run: min(the ideal speed-up, two processes' GEMM rate at once / one process's alone).

What a submission cannot do here: change the clock (the grader times "go" -> "done" itself),
work ahead (each pair's batches come from a seed sent with "go"), run code in the reference
(perf_worker_reference has none of it), or slow the reference down (the student's processes
are stopped with SIGSTOP while the reference runs, and run as another user when grading as
root). A speed-up above 1.15 x the bound is not believed and earns nothing. A gate failed
only for being too slow is measured once more (a busy machine slows the parallel side most).
"""
import argparse
import json
import math
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sandbox import Sandbox  # noqa: E402

# The two configurations of each gate and the speed-up they could reach at best.
# pipe and one_f_one_b: p = 2 stages, m = MICRO micro-batches: p*m / (m + p - 1) (the bubble).
COMMON = ["--preset", "cpu-small", "--seq-len", "128", "--steps", "3", "--warmup", "2"]
# --smoke (CI's run of every gate): one step per measurement after one warm-up step. The
# protocol, both configurations and the parameter checks are the same; the timings mean little.
SMOKE = ["--preset", "cpu-small", "--seq-len", "128", "--steps", "1", "--warmup", "1"]
MICRO = 8
PIPELINE_IDEAL = 2 * MICRO / (MICRO + 2 - 1)
PIPELINE_WHY = f"p*m/(m+p-1) for p = 2, m = {MICRO}"
GATES = {
    "data_parallel": {
        "what": "data parallelism: 2 ranks (average_gradients) against 1 process, same global batch of 32 x 128 tokens",
        "reference": ["--config", "single", "--batch-size", "32"],
        "student": ["--config", "dp", "--batch-size", "32"],
        "ideal": 2.0, "ideal_why": "2 ranks"},
    "pipe": {
        "what": "pipeline parallelism: the Pipe (2 stages, 8 micro-batches) against model parallel, batch of 32 x 128 tokens",
        "reference": ["--config", "mp", "--batch-size", "32"],
        "student": ["--config", "pipe", "--batch-size", "32", "--chunks", str(MICRO)],
        "ideal": PIPELINE_IDEAL, "ideal_why": PIPELINE_WHY},
    "one_f_one_b": {
        "what": "pipeline training: 1F1B on 2 processes (one stage each, 8 micro-batches) against one process, "
                "batch of 32 x 128 tokens",
        "reference": ["--config", "single", "--batch-size", "32"],
        "student": ["--config", "1f1b", "--batch-size", "32", "--chunks", str(MICRO)],
        "ideal": PIPELINE_IDEAL, "ideal_why": PIPELINE_WHY},
}
ORDERS = ["AB", "BA"]      # pair k runs in ORDERS[k % 2]
TOLERANCE = 1e-2           # parameter difference / the reference's own update, per pair
BELIEVABLE = 1.15          # a speed-up above BELIEVABLE x bound earns nothing
READY_SECONDS = 180        # model built and warmed up
STEP_SECONDS = 120         # one measurement (3 steps)
ATTEMPTS = 2               # a gate failed for being too slow is measured once more


class Worker:
    """One configuration: its processes, started in the sandbox, and the pipe to its rank 0."""

    def __init__(self, sandbox: Sandbox, slot: int, program: Path, args, scratch: Path, label: str):
        self.label, self.sandbox = label, sandbox
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        env = {"KIT_PERF_CHANNEL": f"{to_r}:{from_w}", "KIT_DIST_TIMEOUT": "600"}
        self.run = sandbox.start([program] + args, scratch, slot, pass_fds=(to_r, from_w), env=env)
        os.close(to_r)
        os.close(from_w)
        self.buf = b""

    def say(self, line: str):
        os.write(self.to_w, line.encode() + b"\n")

    def hear(self, timeout: float):
        """The next JSON line from rank 0, or a RuntimeError saying why there is none."""
        deadline = time.perf_counter() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise RuntimeError(f"{self.label}: no answer within {timeout:.0f} s")
            ready, _, _ = select.select([self.from_r], [], [], left)
            if ready:
                chunk = os.read(self.from_r, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"{self.label}: the worker ended before answering")
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            raise RuntimeError(f"{self.label}: not a worker's answer: {line[:200]!r}")

    def freeze(self):
        self.sandbox.signal(self.run, signal.SIGSTOP)

    def thaw(self):
        self.sandbox.signal(self.run, signal.SIGCONT)

    def close(self) -> str:
        """Stops every process of the configuration; returns the end of its output."""
        try:
            self.thaw()
            self.say("quit")
        except OSError:
            pass
        for fd in (self.to_w, self.from_r):
            os.close(fd)
        return self.sandbox.finish(self.run, wait=5)


def gemm_rates(program: Path, scratch: Path, sandbox: Sandbox, slot: int):
    """GFLOP/s of one process alone, then of two processes at once (the reference program)."""
    def run(n):
        runs = [sandbox.start([program, "--gemm"], scratch, slot + i) for i in range(n)]
        outs = [sandbox.finish(r, wait=60) for r in runs]
        rates = []
        for out in outs:
            line = [l for l in out.splitlines() if l.startswith("{")]
            if not line:
                raise RuntimeError("the GEMM measurement printed no rate:\n" + out[-1000:])
            rates.append(json.loads(line[-1])["gemm_gflops"])
        return rates
    return run(1), run(2)


def machine_bound(gate, alone, together):
    scaling = sum(together) / alone[0]
    ideal = GATES[gate]["ideal"]
    return min(scaling, ideal), scaling, ideal


def compare(a, b):
    """How far the student's parameters are from the reference's after a pair, relative to the
    reference's own update in that pair (sketches: 8 random projections of every parameter)."""
    def norm(v):
        return sum(x * x for x in v) ** 0.5
    update = norm([x - y for x, y in zip(a["after"], a["before"])]) or 1e-30
    return max(norm([x - y for x, y in zip(a["before"], b["before"])]),
               norm([x - y for x, y in zip(a["after"], b["after"])])) / update


def check_answer(answer, pair, label):
    """The worker's answer to pair `pair`, or a RuntimeError saying what is wrong with it (a
    parameter that became NaN or infinite arrives as null)."""
    def numbers(v):
        return isinstance(v, list) and len(v) > 0 and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)
    if not isinstance(answer, dict) or answer.get("done") != pair:
        raise RuntimeError(f"{label}: answered {str(answer)[:200]} to pair {pair}")
    if not (numbers(answer.get("before")) and numbers(answer.get("after"))
            and len(answer["before"]) == len(answer["after"])):
        raise RuntimeError(f"{label}: the parameters after pair {pair} are not finite numbers "
                           "(NaN or infinite: the training diverged)")
    return answer


def verdict(ratios, diffs, bound, threshold, judge_speed=True):
    """(passed, why) from the pairs' ratios and parameter differences (judge_speed False, the
    smoke run: the parameters alone)."""
    bad = [k for k, d in enumerate(diffs, 1) if not d <= TOLERANCE]
    if bad:
        return False, (f"the parameters differ from the reference's after pair {bad[0]} (difference "
                       f"{diffs[bad[0] - 1]:.2g} of an update, more than {TOLERANCE}): the timed steps did not "
                       "compute what the reference computes, so their speed earns nothing")
    median = statistics.median(ratios)
    if not judge_speed:
        return True, f"median speed-up {median:.2f}x, not judged (--smoke: one step per measurement); parameters match"
    if median > BELIEVABLE * bound:
        return False, (f"median speed-up {median:.2f}x is above {BELIEVABLE} x this machine's bound "
                       f"({BELIEVABLE * bound:.2f}x): faster than the machine allows, so it is not believed")
    if median >= threshold:
        return True, f"median speed-up {median:.2f}x >= threshold {threshold:.2f}x: passed"
    return False, f"median speed-up {median:.2f}x < threshold {threshold:.2f}x: too slow"


def outcome(gate, lines, passed=False, ratios=(), bound=None, threshold=None, too_slow=False):
    """What measure_gate returns: the verdict, the numbers and the item's output."""
    return {"gate": gate, "passed": passed, "median": statistics.median(ratios) if ratios else None,
            "ratios": list(ratios), "bound": bound, "threshold": threshold, "output": "\n".join(lines),
            "too_slow": too_slow}


def run_gate(gate, reference_program: Path, student_program: Path, relative=None, absolute=None,
             pairs=5, sandbox=None, scratch=None, seed=None, attempts=ATTEMPTS, common=COMMON):
    """Runs one gate. Returns {"passed", "output" (every pair, the bound, the threshold), "median", ...}.
    A gate failed only for being too slow is measured again, up to `attempts` times in all:
    another process that wakes up during a measurement slows the parallel configuration
    more than the reference, never the other way round."""
    results = []
    for k in range(attempts):
        r = measure_gate(gate, reference_program, student_program, relative, absolute, pairs, sandbox, scratch,
                         None if seed is None else seed + k, common)
        results.append(r)
        if r["passed"] or not r.get("too_slow"):
            break
    last = dict(results[-1])
    if len(results) > 1:
        last["output"] = "\n\n".join(f"attempt {k + 1} of {attempts}:\n{r['output']}" for k, r in enumerate(results))
        last["attempts"] = [r["median"] for r in results]
    return last


def measure_gate(gate, reference_program: Path, student_program: Path, relative=None, absolute=None,
                 pairs=5, sandbox=None, scratch=None, seed=None, common=COMMON):
    """One measurement of a gate (see run_gate)."""
    g = GATES[gate]
    reference_program, student_program = Path(reference_program).resolve(), Path(student_program).resolve()
    sandbox = sandbox or Sandbox(2)
    scratch = Path(scratch or tempfile.mkdtemp(prefix="perf-gate-"))
    seed = seed if seed is not None else random.SystemRandom().randrange(1, 2 ** 31)
    rng = random.Random(seed)
    lines = [f"Speed gate: {g['what']}"]
    try:
        alone, together = gemm_rates(reference_program, scratch, sandbox, 0)
    except RuntimeError as e:
        return outcome(gate, lines + [f"failed: {e}"])
    bound, scaling, ideal = machine_bound(gate, alone, together)
    lines.append(f"this machine: GEMM on 2 processes at once runs {scaling:.2f}x one process alone "
                 f"({' + '.join(f'{r:.1f}' for r in together)} vs {alone[0]:.1f} GFLOP/s); ideal "
                 f"{ideal:.2f}x ({g['ideal_why']}); bound = the smaller = {bound:.2f}x")
    if absolute is not None:
        threshold = absolute
        lines.append(f"threshold: {threshold:.2f}x (the rubric's absolute threshold for this machine)")
    else:
        threshold = relative * bound
        lines.append(f"threshold: {relative} x bound = {threshold:.2f}x")
    workers = {}
    try:
        for slot, (cfg, program, args) in enumerate([("A", reference_program, g["reference"]),
                                                     ("B", student_program, g["student"])]):
            label = "reference" if cfg == "A" else "yours"
            workers[cfg] = Worker(sandbox, slot, program, args + common + ["--seed", str(seed)], scratch, label)
        for w in workers.values():  # each warms up, then waits stopped for its turn
            w.hear(READY_SECONDS)
            w.freeze()
        ratios, diffs = [], []
        lines.append("pair  order  reference s  yours s  speed-up  parameters (difference / update)")
        for k in range(pairs):
            pair_seed, t, got = rng.randrange(1, 2 ** 62), {}, {}
            for cfg in ORDERS[k % 2]:
                w = workers[cfg]
                w.thaw()
                t0 = time.perf_counter()
                w.say(f"go {k} {pair_seed}")
                got[cfg] = w.hear(STEP_SECONDS)
                t[cfg] = time.perf_counter() - t0
                w.freeze()
                check_answer(got[cfg], k, w.label)
            ratios.append(t["A"] / t["B"])
            diffs.append(compare(got["A"], got["B"]))
            lines.append(f"{k + 1:>4}  {ORDERS[k % 2]:>5}  {t['A']:>11.3f}  {t['B']:>7.3f}  {ratios[-1]:>7.2f}x  "
                         f"{'match' if diffs[-1] <= TOLERANCE else 'DIFFER'} ({diffs[-1]:.1e})")
        passed, why = verdict(ratios, diffs, bound, threshold, judge_speed=common is not SMOKE)
        lines.append(why)
        return outcome(gate, lines, passed, ratios, bound, threshold, too_slow=why.endswith("too slow"))
    except (RuntimeError, OSError) as e:
        tails = {w.label: w.close() for w in workers.values()}
        workers = {}
        lines.append(f"failed: {e}")
        for label, tail in tails.items():
            if tail.strip():
                lines.append(f"--- {label} configuration's output (the end) ---\n{tail[-3000:]}")
        return outcome(gate, lines, bound=bound, threshold=threshold)
    finally:
        for w in workers.values():
            w.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="The grader runs these gates for the rubric items that have a "
                                        "\"performance\" entry and \"enabled\": true (grader/README.md).")
    ap.add_argument("--build", type=Path, default=Path("build"),
                    help="the build directory holding perf_worker and perf_worker_reference "
                         "(cmake --build build --target perf_worker perf_worker_reference)")
    ap.add_argument("--gate", choices=sorted(GATES), action="append", help="run only this gate (repeatable)")
    ap.add_argument("--relative", type=float, help="threshold as a fraction of the bound (default: the rubric's)")
    ap.add_argument("--pairs", type=int, default=5, help="measurement pairs (default 5)")
    ap.add_argument("--smoke", action="store_true",
                    help="one step per measurement and one warm-up step: every gate runs and its parameters "
                         "are checked, in about half the time (CI; the timings mean little)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    programs = [args.build / "perf_worker_reference", args.build / "perf_worker"]
    missing = [str(p) for p in programs if not p.is_file()]
    if missing:
        ap.error("not built: " + ", ".join(missing) + f" (cmake --build {args.build} --target perf_worker "
                 "perf_worker_reference)")
    if args.pairs < 1:
        ap.error("--pairs must be 1 or more")
    defaults = rubric_thresholds()
    results = []
    for gate in args.gate or sorted(GATES):
        rel = args.relative if args.relative is not None else defaults.get(gate, 0.5)
        r = run_gate(gate, programs[0], programs[1], relative=rel, pairs=args.pairs,
                     common=SMOKE if args.smoke else COMMON)
        print(r["output"] + "\n", flush=True)
        results.append(r)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["passed"] for r in results) else 1


def rubric_thresholds():
    """{gate: relative threshold} from the rubrics' performance items (the shipped defaults)."""
    out = {}
    for path in sorted(Path(__file__).resolve().parent.glob("**/rubric.json")):
        for it in json.loads(path.read_text()).get("items", []):
            if "performance" in it:
                out[it["performance"]["gate"]] = it["performance"]["relative"]
    return out


if __name__ == "__main__":
    sys.exit(main())
