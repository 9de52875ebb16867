#!/usr/bin/env python3
"""Activation recomputation measured (Problem 6.3): the bytes a batch keeps and the step time, with and without.

    python3 bench/recompute.py                           # cpu-small, batch 32 x 128, m = 8, p = 2: about a minute
    python3 bench/recompute.py --preset tiny --n-layer 4 --batch-size 4 --seq-len 16 --vocab-size 64 \\
        --chunks 2 --steps 1 --warmup 1                  # smoke: seconds

For the gpipe, 1f1b and interleaved (v = 2) schedules it runs build/train_parallel
--pp p (Gloo, one process per rank) with --memory, once without and once with
--recompute, on one preset, global batch, sequence length and m (pipeline_schedules.py's
defaults; interleaved needs at least v x p = 4 blocks: cpu-small has 4, tiny needs --n-layer 4),
and reports per run
  - per rank, "kept_bytes" (what a batch kept alive between two actions beyond what was held
    at its start: the activations saved for backward, messages in flight) and "peak_bytes"
    (kit/memory.h's counting allocator, CPU tensors);
  - the step time: the slowest rank's mean over the timed steps; tokens/s: the slowest rank's;
  - the losses (rank 0's: the global batch's loss reaches every rank), which recomputation must not change;
and checks, each PASS or MISS:
  - losses_equal_<schedule>: the losses with --recompute equal those without, every step,
    within 1e-5 relative (recompute replays the dropout masks; in practice they are identical);
  - kept_third_<schedule>: on every rank, kept bytes with --recompute <= 1/3 of those without.
    Why 1/3, a goal set from the mechanism rather than from the measurement: without
    recomputation a block keeps, per token of each micro-batch in flight, the inputs of its two
    layer norms, the attention's q, k, v and output, the (H x T) scores and their softmax, the
    MLP's 4C hidden layer before and after GELU and the residuals, well over 16 C floats (16 C +
    2 H T); with it only its input, C floats: at least 16x fewer bytes for the blocks. What
    recomputation does not touch is kept as before: the embeddings' output on the first stage,
    the final layer norm, the logits and their log-softmax (2 V floats per token) on the last,
    the activations received. So the ratio is no formula: it lies between 1/16 and 1, highest
    on the last stage where the logits weigh most. The goal asks that the blocks' share be cut
    by at least 3x overall, which the mechanism gives whenever the blocks' activations are at
    least ~70 % of what a rank keeps (cpu-small: L = 4, C = 128, H = 4, T = 128, V = 1000 on 2
    ranks, measured 0.07 to 0.28); a rank whose kept bytes are mostly logits (a huge vocabulary,
    one block per stage) could exceed it with a correct implementation, and the summary states
    every measured ratio.
The step-time ratio (with / without) is reported beside the Megatron-LM paper's compute
estimate, 4/3 (a backward is about two forwards: 1 + 2 becomes 1 + 1 + 2; they measure 30-40 %
more time), not checked: timings on a shared machine with 2 processes per 2 cores are rough,
and the pipeline's bubbles and waits scale with it too.
Writes OUT/summary.json and OUT/summary.md, prints the tables, and draws OUT/figures/
recompute.png with gnuplot (--no-figures: skip; --redraw: only draw it again from
OUT/summary.json, --figures DIR: into DIR). Python 3 standard library only.
"""
import os
import sys

from bench_process import (argument_parser, checks_lines, command_line, common_options, rel_diff, run_ranks,
                           table_head, measure_or_redraw)
from gnuplot_png import BAR_STYLE, figure_options, inline, legend, quote, rgb, summary_figures, tics

TARGETS = "train_parallel"  # what the runs need built
SCHEDULES = [("gpipe", "GPipe", 1), ("1f1b", "1F1B", 1), ("interleaved", "interleaved 1F1B (v = 2)", 2)]
LOSS_TOLERANCE = 1e-5  # relative, with against without
KEPT_GOAL = 1 / 3      # kept bytes with / without, every rank (see the top)
PAPER_RATIO = 4 / 3    # Megatron-LM's compute estimate for full recomputation
MIB = 2**20
COLOURS = {False: "#4C72B0", True: "#DD8452"}  # without, with --recompute


def parse_args(argv=None):
    ap = argument_parser(__doc__, "train_parallel")
    ap.add_argument("--preset", default="cpu-small")
    ap.add_argument("--n-layer", type=int, default=0, help="blocks (0: the preset's); interleaved needs v x p")
    ap.add_argument("--batch-size", type=int, default=32, help="the global batch, the same in every run")
    common_options(ap, seq_len=128)
    ap.add_argument("--vocab-size", type=int, default=1000, help="synthetic tokens")
    ap.add_argument("--chunks", type=int, default=8, help="micro-batches m")
    ap.add_argument("--stages", type=int, default=2, help="pipeline ranks p (--world-size)")
    common_options(ap, threads=1, steps=5, warmup=2, timeout=900, out="runs/recompute")
    figure_options(ap)
    args = ap.parse_args(argv)
    if not args.redraw and args.batch_size % args.chunks:
        ap.error(f"--chunks {args.chunks} must divide --batch-size {args.batch_size}")
    return args


def pipeline_run(args, kind, v, recompute):
    cmd = [os.path.join(args.build, "train_parallel"), "--pp", str(args.stages), "--schedule", kind,
           "--chunks", str(args.chunks), "--virtual", str(v), "--preset", args.preset,
           "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len), "--vocab-size", str(args.vocab_size),
           "--threads", str(args.threads), "--steps", str(args.warmup + args.steps), "--warmup", str(args.warmup),
           "--memory"] + (["--recompute"] if recompute else [])
    if args.n_layer:
        cmd += ["--n-layer", str(args.n_layer)]
    out = os.path.join(args.out, kind, "recompute" if recompute else "plain")
    _, ranks = run_ranks(cmd, out, args.stages, args.timeout, TARGETS)
    if any(bool(m.get("recompute")) != recompute for m in ranks):
        sys.exit(f"error: {out}: the metrics' \"recompute\" is not {str(recompute).lower()}")
    losses = next((m["losses"] for m in ranks if m.get("losses")), [])
    if not losses:
        sys.exit(f"error: {out}: no rank reported losses")
    mem = [m["memory"] for m in ranks]
    if not all(x.get("measured") for x in mem):
        sys.exit(f"error: {out}: memory not measured ({mem[0].get('why', 'on a GPU?')}): run on the CPU (gloo)")
    return {"recompute": recompute, "losses": losses,
            "kept_bytes": [x["kept_bytes"] for x in mem], "peak_bytes": [x["peak_bytes"] for x in mem],
            "step_time_s": max(sum(m["timed_step_seconds"]) / len(m["timed_step_seconds"]) for m in ranks),
            "tokens_per_s": min(m["tokens_per_sec"] for m in ranks), "n_layer": ranks[0]["n_layer"]}


def measure(args, kind, name, v):
    plain, rc = pipeline_run(args, kind, v, False), pipeline_run(args, kind, v, True)
    return {"kind": kind, "name": name, "virtual_chunks": v, "plain": plain, "recompute": rc,
            "kept_ratio": [w / wo if wo else None for w, wo in zip(rc["kept_bytes"], plain["kept_bytes"])],
            "peak_ratio": [w / wo if wo else None for w, wo in zip(rc["peak_bytes"], plain["peak_bytes"])],
            "step_ratio": rc["step_time_s"] / plain["step_time_s"],
            "loss_rel_diff": rel_diff(rc["losses"], plain["losses"])
            if len(rc["losses"]) == len(plain["losses"]) else float("inf")}


def checks(summary):
    out = []
    for x in summary["schedules"]:
        d = x["loss_rel_diff"]
        out.append({"name": f"losses_equal_{x['kind']}",
                    "goal": f"{x['name']}: losses with --recompute = without, every step, within 1e-5 relative",
                    "value": "identical" if d == 0 else f"largest difference {d:.1e}",
                    "status": "PASS" if d <= LOSS_TOLERANCE else "MISS"})
    for x in summary["schedules"]:
        r = x["kept_ratio"]
        ok = all(v is not None and v <= KEPT_GOAL for v in r)
        out.append({"name": f"kept_third_{x['kind']}",
                    "goal": f"{x['name']}: kept bytes with / without <= 1/3 on every rank",
                    "value": ", ".join(f"rank {k}: {'n/a' if v is None else f'{v:.3f}'}" for k, v in enumerate(r)),
                    "status": "PASS" if ok else "MISS"})
    return out


# ---- report -------------------------------------------------------------------------------

def markdown(s):
    st = s["settings"]
    out = [f"{st['preset']} ({st['n_layer']} blocks), global batch {st['batch_size']} x {st['seq_len']} tokens, "
           f"m = {st['microbatches']}, p = {st['stages']} processes (gloo), {st['threads']} thread(s) per process, "
           f"{st['steps']} timed steps after {st['warmup']}; {st['cores']} cores; `{st['command']}`", "",
           "### Checks", "", *checks_lines(s["checks"]),
           "step time with / without --recompute (reported, not checked: timing on a shared machine): " +
           ", ".join(f"{x['name']} {x['step_ratio']:.2f}" for x in s["schedules"]) +
           f"; the Megatron-LM paper's compute estimate {PAPER_RATIO:.2f} (measured there 1.3-1.4)", "",
           *table_head("| schedule | recompute | rank | kept | peak | kept with / without | peak with / without |",
                       "llrrrrr")]
    for x in s["schedules"]:
        for run in (x["plain"], x["recompute"]):
            for r, (k, p) in enumerate(zip(run["kept_bytes"], run["peak_bytes"])):
                ratio = (f"{x['kept_ratio'][r]:.3f} | {x['peak_ratio'][r]:.3f}" if run["recompute"] else " | ")
                out.append(f"| {x['name']} | {'yes' if run['recompute'] else 'no'} | {r} | {k / MIB:.2f} MiB "
                           f"| {p / MIB:.2f} MiB | {ratio} |")
    out += ["", *table_head("| schedule | step without | step with | with / without | paper (compute) "
                            "| tokens/s without | tokens/s with | losses |", "lrrrrrrl")]
    for x in s["schedules"]:
        a, b = x["plain"], x["recompute"]
        out.append(f"| {x['name']} | {1e3 * a['step_time_s']:.1f} ms | {1e3 * b['step_time_s']:.1f} ms "
                   f"| {x['step_ratio']:.2f} | {PAPER_RATIO:.2f} | {a['tokens_per_s']:.0f} | {b['tokens_per_s']:.0f} "
                   f"| {loss_text(x['loss_rel_diff'])} |")
    out += ["", "Kept: the bytes a batch kept alive between two actions beyond those held at its start (activations "
                "saved for backward, messages in flight); peak: the most a batch reached; both the largest over the "
                "timed batches, CPU tensors counted by kit/memory.h. Step: the slowest rank's mean over the timed "
                "steps; tokens/s: the slowest rank's. Paper: Megatron-LM's compute estimate for full recomputation, "
                "1 + 1 + 2 against 1 + 2 forward-equivalents (measured there 30-40 % more time); the step-time ratio "
                "here is not checked: two processes share two cores with whatever else runs.", ""]
    return "\n".join(out)


def loss_text(d):
    return "identical" if d == 0 else f"{d:.1e}"


# ---- the figure -----------------------------------------------------------------------------

def recompute_figure(s):
    """recompute.png: per schedule, kept bytes per rank without and with --recompute (bars, the
    ratio printed); last panel, the step time without and with per schedule, and 4/3 of the time
    without (dashed) where the paper's compute estimate would put it; (width, height, script)."""
    st = s.field(s.data, "settings", s.path)
    where_st = s.path + ": settings"
    preset = s.field(st, "preset", where_st, "text")
    n_layer = round(s.field(st, "n_layer", where_st, "number"))
    batch = round(s.field(st, "batch_size", where_st, "number"))
    seq = round(s.field(st, "seq_len", where_st, "number"))
    m = round(s.field(st, "microbatches", where_st, "number"))
    p = round(s.field(st, "stages", where_st, "number"))
    cores = s.field(st, "cores", where_st, "number or null")
    schedules = s.records("schedules")
    keys = [(COLOURS[False], "without"), (COLOURS[True], "with --recompute")]
    panels = len(schedules) + 1
    script = (f"set multiplot layout 1,{panels} title " +
              quote(f"Activation recomputation (Problem 6.3): {preset} ({n_layer} blocks), batch {batch} x {seq}, "
                    f"m = {m}, p = {p} processes (gloo)" + (f", {cores} cores" if cores else "") +
                    "\nbytes a batch kept alive per rank (activations for backward), and the step time") +
              "\n" + BAR_STYLE + "set boxwidth 0.36\nset key below horizontal\nset tmargin 5\nset bmargin 5\n")
    steps = []
    for where, x in schedules:
        name = s.field(x, "name", where, "text")
        runs = {}
        for flag in ("plain", "recompute"):
            r = s.field(x, flag, where)
            runs[flag] = (s.field(r, "kept_bytes", f"{where}.{flag}", "list"),
                          s.field(r, "step_time_s", f"{where}.{flag}", "number"))
        div, unit = (MIB, "MiB") if max(runs["plain"][0]) >= MIB else (1024, "KiB")
        runs = {f: ([b / div for b in kept], t) for f, (kept, t) in runs.items()}
        bars, labels = [], []
        for k, (wo, w) in enumerate(zip(runs["plain"][0], runs["recompute"][0])):
            bars += [(k - 0.19, wo, COLOURS[False]), (k + 0.19, w, COLOURS[True])]
            labels += [(k - 0.19, wo, f"{wo:.1f}"), (k + 0.19, w, f"{w:.1f}\\n({w / wo:.2f}x)" if wo else f"{w:.1f}")]
        top = max(v for _, v, _ in bars)
        script += (f"set title {quote(name + ': kept bytes per rank')}\nset ylabel {quote(unit)}\n"
                   f"set yrange [0:{1.25 * top if top > 0 else 1.0!r}]\nset xrange [-0.6:{len(runs['plain'][0]) - 0.4!r}]\n"
                   "unset label\n" + tics("x", [(k, f"rank {k}") for k in range(len(runs["plain"][0]))]) +
                   "".join(f"set label {n} \"{t}\" at {xx!r},{v!r} center offset 0,1.6 front font \",9\"\n"
                           for n, (xx, v, t) in enumerate(labels, 1)) +
                   "plot '-' using 1:2:3 with boxes lc rgb variable notitle" + legend("boxes", keys) + "\n" +
                   inline((xx, v, rgb(c)) for xx, v, c in bars))
        steps.append((name, runs["plain"][1], runs["recompute"][1]))
    # The step-time panel: without / with per schedule, and 4/3 x without dashed over the "with" bar.
    bars, labels, paper = [], [], ""
    for k, (name, wo, w) in enumerate(steps):
        bars += [(k - 0.19, 1e3 * wo, COLOURS[False]), (k + 0.19, 1e3 * w, COLOURS[True])]
        labels += [(k - 0.19, 1e3 * wo, f"{1e3 * wo:.0f}"), (k + 0.19, 1e3 * w, f"{1e3 * w:.0f}\\n({w / wo:.2f}x)")]
        paper += f"{k + 0.01!r} {1e3 * PAPER_RATIO * wo!r}\n{k + 0.37!r} {1e3 * PAPER_RATIO * wo!r}\n\n"
    top = max(max(v for _, v, _ in bars), 1e3 * PAPER_RATIO * max(wo for _, wo, _ in steps))
    short = [n.replace(" (v = 2)", "\\n(v = 2)") for n, _, _ in steps]
    script += ("set title \"Step time (the slowest rank's mean)\\ndashed: 4/3 of the time without, "
               "Megatron-LM's compute estimate\"\nset ylabel \"ms per step\"\n"
               f"set yrange [0:{1.25 * top!r}]\nset xrange [-0.6:{len(steps) - 0.4!r}]\nunset label\n" +
               "set xtics nomirror scale 0 (" + ", ".join(f"\"{t}\" {k}" for k, t in enumerate(short)) + ")\n" +
               "".join(f"set label {n} \"{t}\" at {xx!r},{v!r} center offset 0,1.6 front font \",9\"\n"
                       for n, (xx, v, t) in enumerate(labels, 1)) +
               "plot '-' using 1:2:3 with boxes lc rgb variable notitle, "
               "'-' using 1:2 with lines dt 2 lw 2.5 lc rgb \"#C44E52\" title \"4/3 x without\"" +
               legend("boxes", keys) + "\n" + inline((xx, v, rgb(c)) for xx, v, c in bars) + paper + "e\n")
    return 560 * panels, 600, script + "unset multiplot\n"


# recompute.png from runs_dir/summary.json.
draw = summary_figures("bench/recompute.py", [("recompute.png", recompute_figure)])


def main(argv=None):
    args = parse_args(argv)

    def measure_all():
        schedules = [measure(args, kind, name, v) for kind, name, v in SCHEDULES]
        summary = {"settings": {"preset": args.preset, "n_layer": schedules[0]["plain"]["n_layer"],
                                "batch_size": args.batch_size, "seq_len": args.seq_len, "vocab_size": args.vocab_size,
                                "microbatches": args.chunks, "stages": args.stages, "threads": args.threads,
                                "steps": args.steps, "warmup": args.warmup, "cores": os.cpu_count(),
                                "command": command_line(argv)},
                   "schedules": schedules, "paper_step_ratio": PAPER_RATIO, "kept_goal": KEPT_GOAL}
        summary["checks"] = checks(summary)
        return summary
    measure_or_redraw(args, measure_all, markdown, draw)

if __name__ == "__main__":
    main()
