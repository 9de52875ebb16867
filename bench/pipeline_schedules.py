#!/usr/bin/env python3
"""Pipeline schedules measured (Problem 3): throughput, memory, and the simulator's prediction.

    python3 bench/pipeline_schedules.py                  # cpu-small, batch 32 x 128, m = 8, p = 2: a few minutes
    python3 bench/pipeline_schedules.py --preset tiny --batch-size 8 --seq-len 16 --steps 1 --warmup 1   # smoke

With one global batch, sequence length and preset it runs
  - Assignment 1's programs (build/bench): one process (`single`), 2-stage model parallel
    (`mp`) and `Pipe` with m micro-batches (`pp`), all in one process;
  - build/train_parallel --pp 2 with the gpipe, 1f1b and interleaved (v = 2)
    schedules, two processes (Gloo), with --memory and --timeline;
then, per schedule,
  - the measured step time: the schedule's span, from the first action's start to the
    last action's end over both ranks (their steady_clock times: one clock on one machine),
    averaged over the timed steps. It leaves out the optimizer step and the tied-gradient
    exchange, which the simulator does not model;
  - per virtual stage, the mean F and B compute time: each action's duration minus the
    time it spent in P2P receives (waiting for the neighbour, plus the transfer);
  - comm, the time a message takes as the simulator sees it: for each receive that was
    already waiting when its sender finished, (receive returned) - (sender's action ended);
    the median of those (0 when there are none);
  - the simulator's step time (build/schedule --kind K --forward-per-stage ...
    --backward-per-stage ... --comm ... --json), with comm = 0 and with the estimate, and
    predicted / measured;
  - for gpipe and 1f1b, per rank, the bytes a batch kept alive (kit/memory.h's counting
    allocator; peak between two actions minus what was held at the batch's start), and the
    1F1B / GPipe ratio against p / m.
Writes OUT/summary.json (read by `plot_figures --pipeline-runs OUT`) and OUT/summary.md,
and prints the tables. Python 3 standard library only.
"""
import json
import os
import statistics
import sys

from bench_process import argument_parser, command_line, common_options, last_json_line, run, table_head, write_summary

TARGETS = "bench train_parallel schedule plot_figures"  # what the runs need built

SCHEDULES = [("gpipe", "GPipe", 1), ("1f1b", "1F1B", 1), ("interleaved", "interleaved 1F1B (v = 2)", 2)]


def parse_args(argv=None):
    ap = argument_parser(__doc__, "bench, train_parallel, schedule")
    ap.add_argument("--preset", default="cpu-small")
    ap.add_argument("--batch-size", type=int, default=32, help="the global batch, the same in every run")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--chunks", type=int, default=8, help="micro-batches m")
    ap.add_argument("--stages", type=int, default=2, help="pipeline ranks p")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per process (per stage in mp/pp)")
    common_options(ap, steps=5, warmup=2)
    ap.add_argument("--n-layer", type=int, default=0, help="blocks (0: the preset's; interleaved needs 2p)")
    common_options(ap, timeout=900, out="runs/pipeline_training")
    return ap.parse_args(argv)






def spread(values):
    return statistics.stdev(values) if len(values) > 1 else 0.0


# ---- Assignment 1's runs --------------------------------------------------------------

def bench_run(args, config):
    cmd = [os.path.join(args.build, "bench"), "--config", config, "--preset", args.preset,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-size", str(args.batch_size),
           "--seq-len", str(args.seq_len), "--threads", str(args.threads)]
    if config == "pp":
        cmd += ["--chunks", str(args.chunks)]
    j = last_json_line(run(cmd, args.timeout, TARGETS), "bench")
    tokens_per_step = args.batch_size * args.seq_len
    per_step = [tokens_per_step / s for s in j.get("step_times_s", []) if s > 0]
    return {"tokens_per_s": j["tokens_per_s"], "tokens_per_s_std": spread(per_step),
            "step_time_s": j["step_time_s"]}


# ---- the schedules across processes ---------------------------------------------------

def pipeline_run(args, kind, v):
    d = os.path.join(args.out, kind)
    os.makedirs(d, exist_ok=True)
    cmd = [os.path.join(args.build, "train_parallel"), "--pp", str(args.stages), "--schedule", kind,
           "--chunks", str(args.chunks), "--virtual", str(v), "--preset", args.preset,
           "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len), "--threads", str(args.threads),
           "--steps", str(args.warmup + args.steps), "--warmup", str(args.warmup), "--memory", "--no-progress",
           "--timeline", os.path.join(d, "timeline.rank{rank}.json"), "--out", os.path.join(d, "rank{rank}.json")]
    if args.n_layer:
        cmd += ["--n-layer", str(args.n_layer)]
    run(cmd, args.timeout, TARGETS)
    ranks = range(args.stages)
    metrics = [json.load(open(os.path.join(d, f"rank{r}.json"))) for r in ranks]
    timelines = [json.load(open(os.path.join(d, f"timeline.rank{r}.json"))) for r in ranks]
    return metrics, timelines


def timed_steps(timelines):
    """Per timed step: every action of every rank as a dict, times absolute (steady_clock s)."""
    steps = []
    for k in range(len(timelines[0]["steps"])):
        actions = []
        for r, t in enumerate(timelines):
            s = t["steps"][k]
            for op, i, c, stage, start, end, recv in s["actions"]:
                actions.append({"rank": r, "op": "F" if op == 0 else "B", "microbatch": i, "chunk": c,
                                "stage": stage, "start": s["clock_origin"] + start, "end": s["clock_origin"] + end,
                                "recv": recv})
        steps.append(actions)
    return steps


def span(actions):
    return max(a["end"] for a in actions) - min(a["start"] for a in actions)


def stage_costs(steps, n_stages):
    """Mean compute time (duration minus receive time) of F and of B on each virtual stage."""
    f = [[] for _ in range(n_stages)]
    b = [[] for _ in range(n_stages)]
    for actions in steps:
        for a in actions:
            (f if a["op"] == "F" else b)[a["stage"]].append(max(0.0, a["end"] - a["start"] - a["recv"]))
    return [statistics.mean(x) for x in f], [statistics.mean(x) for x in b]


def comm_estimate(steps, n_stages, p):
    """Median delivery time of messages whose receiver was already waiting (see the top)."""
    delays = []
    for actions in steps:
        by = {(a["op"], a["microbatch"], a["stage"]): a for a in actions}
        for a in actions:
            src = a["stage"] - 1 if a["op"] == "F" else a["stage"] + 1
            if not 0 <= src < n_stages or src % p == a["stage"] % p:
                continue  # no message, or one between chunks of the same rank
            sender = by[(a["op"], a["microbatch"], src)]
            if a["start"] <= sender["end"]:  # the receive was posted before the message could leave
                # >= 0: a sender descheduled between its send and the end of its action
                # (two processes on two busy cores) can finish "after" its message arrived.
                delays.append(max(0.0, a["start"] + a["recv"] - sender["end"]))
    return (statistics.median(delays) if delays else 0.0), len(delays)


def as_timeline(actions, p, m, v):
    """The merged measured step in simulate.h's JSON form, times from its first start.
    Each box starts when its receive returned: time blocked waiting for a neighbour is idle
    time (the bubble), drawn blank as in the simulated timeline."""
    t0 = min(a["start"] for a in actions)
    rows = [[] for _ in range(p)]
    for a in sorted(actions, key=lambda a: a["start"]):
        rows[a["rank"]].append({"op": a["op"], "microbatch": a["microbatch"], "chunk": a["chunk"],
                                "stage": a["stage"], "start": min(a["start"] + a["recv"], a["end"]) - t0,
                                "end": a["end"] - t0})
    makespan = span(actions)
    busy = sum(a["end"] - a["start"] - a["recv"] for a in actions)
    return {"ranks": p, "microbatches": m, "virtual_chunks": v, "makespan": makespan,
            "bubble_fraction": 1 - busy / (p * makespan) if makespan > 0 else 0.0,
            "peak_in_flight": [0] * p, "timeline": rows}


def simulate(args, kind, v, fwd, bwd, comm):
    cmd = [os.path.join(args.build, "schedule"), "--kind", kind, "-p", str(args.stages), "-m", str(args.chunks),
           "-v", str(v), "--forward-per-stage", ",".join(f"{x:.6g}" for x in fwd),
           "--backward-per-stage", ",".join(f"{x:.6g}" for x in bwd), "--comm", f"{comm:.6g}", "--json"]
    return last_json_line(run(cmd, args.timeout, TARGETS), "schedule")


def measure_schedule(args, kind, name, v):
    p, m = args.stages, args.chunks
    metrics, timelines = pipeline_run(args, kind, v)
    steps = timed_steps(timelines)
    spans = [span(s) for s in steps]
    measured = statistics.mean(spans)
    fwd, bwd = stage_costs(steps, p * v)
    comm, n_waiting = comm_estimate(steps, p * v, p)
    sim0 = simulate(args, kind, v, fwd, bwd, 0.0)
    sim = simulate(args, kind, v, fwd, bwd, comm)
    # The figure shows the timed step closest to the mean span: a typical one.
    typical = min(range(len(steps)), key=lambda k: abs(spans[k] - measured))
    slowest = min(m["tokens_per_sec"] for m in metrics)
    per_step = [args.batch_size * args.seq_len / s for s in metrics[0]["timed_step_seconds"] if s > 0]
    recv_share = sum(a["recv"] for s in steps for a in s) / (p * sum(spans))
    return {
        "kind": kind, "name": name, "virtual_chunks": v,
        "tokens_per_s": slowest, "tokens_per_s_std": spread(per_step),
        "measured_step_s": measured, "measured_step_s_each": spans,
        "forward_per_stage_s": fwd, "backward_per_stage_s": bwd,
        "comm_s": comm, "comm_samples": n_waiting, "recv_share": recv_share,
        "predicted_step_s": sim["makespan"], "ratio": sim["makespan"] / measured,
        "predicted_step_s_comm0": sim0["makespan"], "ratio_comm0": sim0["makespan"] / measured,
        "memory": [t["memory"] for t in timelines],
        "simulated": sim, "measured": as_timeline(steps[typical], p, m, v), "measured_step_index": typical,
    }


def memory_summary(by_kind, p, m):
    g, o = by_kind["gpipe"]["memory"], by_kind["1f1b"]["memory"]
    if not all(x.get("measured") for x in g + o):
        return {"measured": False, "why": (g + o)[0].get("why", "")}
    rows = []
    for r in range(p):
        rows.append({"rank": r, "gpipe_kept_bytes": g[r]["kept_bytes"], "1f1b_kept_bytes": o[r]["kept_bytes"],
                     "ratio": o[r]["kept_bytes"] / g[r]["kept_bytes"] if g[r]["kept_bytes"] else None,
                     "expected": min(p - r, m) / m,
                     "gpipe_peak_bytes": g[r]["peak_bytes"], "1f1b_peak_bytes": o[r]["peak_bytes"],
                     "peak_ratio": o[r]["peak_bytes"] / g[r]["peak_bytes"] if g[r]["peak_bytes"] else None})
    first = rows[0]["ratio"]
    return {"measured": True, "per_rank": rows, "goal": p / m, "first_stage_ratio": first,
            "goal_met": first is not None and first <= p / m}


# ---- report ---------------------------------------------------------------------------

def mib(b):
    return f"{b / 2**20:.1f} MiB"


def markdown(s):
    st = s["settings"]
    out = [f"{st['preset']}, global batch {st['batch_size']} x {st['seq_len']} tokens, m = {st['microbatches']}, "
           f"p = {st['stages']}, {st['threads']} thread(s) per process, {st['steps']} timed steps after "
           f"{st['warmup']}; {st['cores']} cores", "",
           *table_head("| run | processes | tokens/s |", "lrr")]
    for r in s["throughput"]:
        out.append(f"| {r['label'].replace(chr(10), ' ')} | {r['processes']} | {r['tokens_per_s']:.0f} ± {r['tokens_per_s_std']:.0f} |")
    out += ["", *table_head("| schedule | measured step | F per stage | B per stage | comm | predicted (comm 0) "
                            "| ratio | predicted (comm) | ratio | in receives |", "lrll" + "r" * 6)]
    for x in s["schedules"]:
        ms = lambda v: f"{1e3 * v:.1f}"
        out.append(f"| {x['name']} | {ms(x['measured_step_s'])} ms | {', '.join(ms(v) for v in x['forward_per_stage_s'])} "
                   f"| {', '.join(ms(v) for v in x['backward_per_stage_s'])} | {ms(x['comm_s'])} ms "
                   f"| {ms(x['predicted_step_s_comm0'])} ms | {x['ratio_comm0']:.2f} | {ms(x['predicted_step_s'])} ms "
                   f"| {x['ratio']:.2f} | {100 * x['recv_share']:.0f} % |")
    mem = s["memory"]
    out.append("")
    if not mem["measured"]:
        out.append(f"memory: {mem['why']}")
    else:
        out += table_head("| rank | GPipe kept | 1F1B kept | 1F1B / GPipe | (p - r) / m | GPipe peak | 1F1B peak "
                          "| peak ratio |", "r" * 8)
        for r in mem["per_rank"]:
            out.append(f"| {r['rank']} | {mib(r['gpipe_kept_bytes'])} | {mib(r['1f1b_kept_bytes'])} | {r['ratio']:.3f} "
                       f"| {r['expected']:.3f} | {mib(r['gpipe_peak_bytes'])} | {mib(r['1f1b_peak_bytes'])} "
                       f"| {r['peak_ratio']:.3f} |")
        out.append(f"\nfirst stage: 1F1B keeps {mem['first_stage_ratio']:.3f} of GPipe's bytes; goal <= p/m = "
                   f"{mem['goal']:.3f}: {'met' if mem['goal_met'] else 'not met'}")
    return "\n".join(out) + "\n"


def main(argv=None):
    args = parse_args(argv)
    if args.batch_size % args.chunks:
        sys.exit(f"error: --chunks {args.chunks} must divide --batch-size {args.batch_size}")
    os.makedirs(args.out, exist_ok=True)
    summary = {"settings": {"preset": args.preset, "batch_size": args.batch_size, "seq_len": args.seq_len,
                            "microbatches": args.chunks, "stages": args.stages, "threads": args.threads,
                            "steps": args.steps, "warmup": args.warmup, "cores": os.cpu_count(),
                            "command": command_line(argv)}}
    throughput = []
    for config, label, procs in [("single", "one process\n(1 thread)", 1),
                                 ("mp", "model parallel\n(A1, 1 process)", 1),
                                 ("pp", f"Pipe, m = {args.chunks}\n(A1, 1 process)", 1)]:
        r = bench_run(args, config)
        throughput.append({"name": config, "label": label, "processes": procs, **r})
    schedules = [measure_schedule(args, kind, name, v) for kind, name, v in SCHEDULES]
    for x in schedules:
        label = x["name"].replace(" (v = 2)", "") + f"\n({'v = 2, ' if x['virtual_chunks'] > 1 else ''}" \
            f"{args.stages} processes)"
        throughput.append({"name": x["kind"], "label": label, "processes": args.stages,
                           "tokens_per_s": x["tokens_per_s"], "tokens_per_s_std": x["tokens_per_s_std"]})
    summary["throughput"] = throughput
    summary["schedules"] = schedules
    summary["memory"] = memory_summary({x["kind"]: x for x in schedules}, args.stages, args.chunks)
    for x in schedules:  # `schedule --timeline-json` draws these one at a time
        with open(os.path.join(args.out, x["kind"], "measured_timeline.json"), "w") as f:
            json.dump(x["measured"], f, indent=1)
    write_summary(args.out, summary, markdown)


if __name__ == "__main__":
    main()
