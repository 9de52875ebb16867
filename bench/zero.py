#!/usr/bin/env python3
"""ZeRO and the ring all-reduce measured (Problem 5): memory per rank, throughput, bus bandwidth.

    python3 bench/zero.py                                   # cpu-base and gpt2, 2 ranks: about 10 minutes on 2 cores
    python3 bench/zero.py --presets tiny --batch-size 2 --seq-len 16 --steps 1 --warmup 1 \\
        --coll-max-bytes 64K --coll-iters 1 --coll-warmup 1 # smoke: seconds

For each preset, with 2 Gloo ranks (--world-size) and --threads per process, it runs
build/train_parallel --dp n three times, --optimizer adamw (plain data parallelism: all-reduce,
then torch::optim::AdamW), zero1 and zero2 (kit::zero::ZeroAdamW), each rank on --batch-size
rows of the global batch (n times that) (gpt2: --gpt2-batch-size, --gpt2-seq-len, --gpt2-steps, kept small: one
step of the 124M-parameter model takes tens of seconds on one CPU thread), and reports per run
  - memory per rank, counted from the tensors (train_parallel's metrics): parameters, gradients
    kept between steps, optimizer state, activations (bytes allocated during the forward pass
    and still held when it returned), the process's peak RSS, against the ZeRO paper's fp32
    formulas (DP 4P + 4P + 8P, ZeRO-1 4P + 4P + 8P/n, ZeRO-2 4P + 12P/n);
  - tokens/s of all ranks together (the global batch's, the slowest rank's measure) and the
    step time (the slowest rank's mean);
  - bytes communicated per step per rank: ZeRO, the ring's sends (counted); DP, 2(n-1)/n of
    the bytes all-reduced (the counter records the tensor, not the wire) against 2(n-1)/n 4P;
then build/run_collectives (ring all-reduce against the dist layer's built-in one, float32,
--coll-min-bytes to --coll-max-bytes, x4 apart) and checks the issue's goals:
  - ring_within_1.5x_at_64MiB: the ring's time at 64 MiB <= 1.5 x the built-in's;
  - zero1_state_per_rank_<preset>: ZeRO-1's optimizer-state bytes per rank <= (1/n + 1 %) of
    plain AdamW's (and the same for ZeRO-2, reported too).
Each says PASS or MISS (NOT MEASURED when the run did not cover it). Writes OUT/summary.json
and OUT/summary.md, prints the tables, and draws OUT/figures/zero_memory.png and
ring_bandwidth.png with gnuplot (--no-figures: skip; --redraw: only draw them again from
OUT/summary.json, --figures DIR: into DIR).
Python 3 standard library only.
"""
import json
import os
import sys

from bench_process import argument_parser, command_line, common_options, run, run_ranks, table_head, write_summary
from gnuplot_png import BAR_STYLE, draw_figures, figure_options, inline, quote, stacked, summary_figures, tics

TARGETS = "train_parallel run_collectives"  # what the runs need built
OPTIMIZERS = [("adamw", "DP"), ("zero1", "ZeRO-1"), ("zero2", "ZeRO-2")]
MIB = 2**20


def parse_args(argv=None):
    ap = argument_parser(__doc__, "train_parallel and run_collectives")
    ap.add_argument("--world-size", type=int, default=2, help="data-parallel ranks n")
    preset_options(ap, batch_size=8, steps=3)
    ap.add_argument("--coll-min-bytes", default="1K")
    ap.add_argument("--coll-max-bytes", default="256M")
    ap.add_argument("--coll-warmup", type=int, default=5, help="untimed all-reduces per size (nccl-tests' default)")
    ap.add_argument("--coll-iters", type=int, default=20, help="timed all-reduces per size (nccl-tests' default)")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    common_options(ap, timeout=1200, out="runs/zero")
    figure_options(ap)
    return ap.parse_args(argv)


def preset_options(ap, batch_size, steps):
    """--presets and the run sizes: gpt2's own, kept small (a step of the 124M-parameter model
    takes seconds on one CPU thread), the other presets'; bench/zero_stages.py's too."""
    ap.add_argument("--presets", nargs="+", default=["cpu-base", "gpt2"])
    ap.add_argument("--batch-size", type=int, default=batch_size, help="rows per rank (presets other than gpt2)")
    common_options(ap, seq_len=128, steps=steps, warmup=1)
    ap.add_argument("--gpt2-batch-size", type=int, default=2, help="rows per rank for gpt2")
    ap.add_argument("--gpt2-seq-len", type=int, default=64)
    ap.add_argument("--gpt2-steps", type=int, default=2, help="timed steps for gpt2")
    ap.add_argument("--gpt2-warmup", type=int, default=1)
    ap.add_argument("--vocab-size", type=int, default=1000, help="synthetic tokens (gpt2 keeps its 50257 rows)")
    common_options(ap, threads=1)


def preset_settings(args, preset):
    """The sizes of one preset's runs, from preset_options'."""
    if preset == "gpt2":
        return {"batch_size": args.gpt2_batch_size, "seq_len": args.gpt2_seq_len, "steps": args.gpt2_steps,
                "warmup": args.gpt2_warmup}
    return {"batch_size": args.batch_size, "seq_len": args.seq_len, "steps": args.steps, "warmup": args.warmup}


def data_parallel_ranks(args, preset, n, optimizer, st, out_dir, targets, extra=()):
    """Each rank's metrics of one train_parallel --dp n run, st["batch_size"] rows per rank (the
    global batch n times that); bench/zero_stages.py's runs too."""
    cmd = [os.path.join(args.build, "train_parallel"), "--dp", str(n), "--optimizer", optimizer,
           "--preset", preset, "--batch-size", str(n * st["batch_size"]), "--seq-len", str(st["seq_len"]),
           "--vocab-size", str(args.vocab_size), "--threads", str(args.threads), "--weight-decay", "0.01",
           "--steps", str(st["warmup"] + st["steps"]), "--warmup", str(st["warmup"]), "--backend", args.backend,
           *extra]
    _, ranks = run_ranks(cmd, out_dir, n, args.timeout, targets)
    return ranks


def zero_run(args, preset, optimizer, label, st):
    n = args.world_size
    ranks = data_parallel_ranks(args, preset, n, optimizer, st, os.path.join(args.out, preset, optimizer), TARGETS)
    r0 = ranks[0]
    return {
        "name": optimizer, "label": label, "processes": n,
        # the global batch's tokens per second on each rank's clock: the slowest's
        "tokens_per_s": min(m["tokens_per_sec"] for m in ranks),
        "step_time_s": max(sum(m["timed_step_seconds"]) / len(m["timed_step_seconds"]) for m in ranks),
        "losses_per_rank": [m["losses"] for m in ranks],
        "memory_per_rank": [{"parameters": m["parameter_bytes"], "gradients": m["gradient_bytes"],
                             "gradients_after_backward": m["gradient_peak_bytes"],
                             "optimizer_state": m["optimizer_state_bytes"],
                             # null where kit::memory cannot count (a CUDA device with a CPU LibTorch): drawn as 0
                             "activations": m["activation_bytes"] or 0,
                             "activations_measured": m["activation_bytes"] is not None,
                             "peak_tensor_bytes": m["peak_tensor_bytes"],
                             "rss_forward_rise": m["rss_forward_rise_bytes"], "peak_rss": m["peak_rss_bytes"]}
                            for m in ranks],
        "formula_bytes": r0["formula_bytes"],
        "comm_bytes_per_step": max(m["comm_bytes_per_step"] for m in ranks),
        "comm_bytes_counted": r0["comm_bytes_counted"],
        "formula_comm_bytes_per_step": r0["formula_all_reduce_comm_bytes_per_step"],
        "comm_s_per_step": max(m["comm_seconds_per_step"]["data"] for m in ranks),
        "parameter_count": r0["parameter_count"], "n_layer": r0["n_layer"], "n_embd": r0["n_embd"],
        "n_head": r0["n_head"], "vocab_size": r0["vocab_size"],
    }


def measure(args, preset):
    st = preset_settings(args, preset)
    runs = [zero_run(args, preset, opt, label, st) for opt, label in OPTIMIZERS]
    r0 = runs[0]
    return {"preset": preset, "parameter_count": r0["parameter_count"], "n_layer": r0["n_layer"],
            "n_embd": r0["n_embd"], "n_head": r0["n_head"], "vocab_size": r0["vocab_size"],
            "batch_size_per_rank": st["batch_size"], "seq_len": st["seq_len"], "steps": st["steps"],
            "warmup": st["warmup"], "runs": runs}


def collectives(args):
    n = args.world_size
    d = os.path.join(args.out, "collectives")
    os.makedirs(d, exist_ok=True)
    cmd = [os.path.join(args.build, "run_collectives"), "--world-size", str(n), "--min-bytes", args.coll_min_bytes,
           "--max-bytes", args.coll_max_bytes, "--warmup", str(args.coll_warmup), "--iters", str(args.coll_iters),
           "--threads", str(args.threads), "--backend", args.backend, "--out", os.path.join(d, "rank{rank}.json")]
    run(cmd, args.timeout, TARGETS)
    r0 = json.load(open(os.path.join(d, "rank0.json")))  # the times are already the slowest rank's
    return {"world_size": n, "backend": args.backend, "warmup": args.coll_warmup, "iters": args.coll_iters,
            "sizes": r0["sizes"]}


def checks(summary, n):
    out = []
    at64 = [r for r in summary["collectives"]["sizes"] if r["bytes"] == 64 * MIB]
    if at64:
        ratio = at64[0]["ratio_ring_to_builtin"]
        out.append({"name": "ring_within_1.5x_at_64MiB", "goal": "ring time <= 1.5 x built-in all-reduce time at 64 MiB",
                    "value": f"{ratio:.3f} x", "status": "PASS" if ratio <= 1.5 else "MISS"})
    else:
        out.append({"name": "ring_within_1.5x_at_64MiB", "goal": "ring time <= 1.5 x built-in all-reduce time at 64 MiB",
                    "value": "64 MiB not among the sizes", "status": "NOT MEASURED"})
    for p in summary["presets"]:
        runs = {r["name"]: r for r in p["runs"]}
        dp = runs["adamw"]["memory_per_rank"][0]["optimizer_state"]
        for stage in ("zero1", "zero2"):
            worst = max(m["optimizer_state"] for m in runs[stage]["memory_per_rank"])
            frac = worst / dp if dp else float("inf")
            goal = 1 / n + 0.01
            out.append({"name": f"{stage}_state_per_rank_{p['preset']}",
                        "goal": f"{runs[stage]['label']} optimizer-state bytes per rank <= (1/n + 1 %) = {goal:.4f} "
                                f"of plain AdamW's",
                        "value": f"{frac:.6f} ({worst} / {dp} bytes)", "status": "PASS" if frac <= goal else "MISS"})
    return out


def mib(b):
    return f"{b / MIB:.2f}"


def markdown(s):
    st = s["settings"]
    out = [f"{st['world_size']} ranks ({st['backend']}), {st['threads']} thread(s) per process, {st['cores']} cores; "
           f"`{st['command']}`", "", "### Goals", "", *table_head("| check | goal | measured | |", "llll")]
    for c in s["checks"]:
        out.append(f"| {c['name']} | {c['goal']} | {c['value']} | **{c['status']}** |")
    for p in s["presets"]:
        out += ["", f"### {p['preset']} ({p['n_layer']} layers, n_embd {p['n_embd']}, P = {p['parameter_count']:,} "
                    f"parameters; {p['batch_size_per_rank']} rows x {p['seq_len']} tokens per rank, {p['steps']} timed "
                    f"steps after {p['warmup']})", "",
                "Memory per rank in MiB (rank 0; counted from the tensors), the formula's beside it:", "",
                *table_head("| run | params | grads | optimizer state | activations | params+grads+state | formula "
                            "| peak tensors | peak RSS | tokens/s (all ranks) | step | comm / step / rank "
                            "| formula 2(n-1)/n 4P |", "l" + "r" * 12)]
        for r in p["runs"]:
            m = r["memory_per_rank"][0]
            f = r["formula_bytes"]
            counted = m["parameters"] + m["gradients"] + m["optimizer_state"]
            out.append(f"| {r['label']} | {mib(m['parameters'])} | {mib(m['gradients'])} | {mib(m['optimizer_state'])} "
                       f"| {mib(m['activations']) if m['activations_measured'] else 'not measured'} | {mib(counted)} "
                       f"| {mib(f['total'])} | {mib(m['peak_tensor_bytes'] or 0)} | {mib(m['peak_rss'])} "
                       f"| {r['tokens_per_s']:.0f} | {r['step_time_s']:.3f} s "
                       f"| {mib(r['comm_bytes_per_step'])}{'' if r['comm_bytes_counted'] else ' (derived)'} "
                       f"| {mib(r['formula_comm_bytes_per_step'])} |")
        out += ["", "losses (rank 0): " + "; ".join(f"{r['label']} " + ", ".join(f"{x:.5f}" for x in r["losses_per_rank"][0])
                                                  for r in p["runs"])]
    c = s["collectives"]
    out += ["", f"### All-reduce, {c['world_size']} ranks ({c['backend']}), float32, {c['warmup']} warmup + "
                f"{c['iters']} timed operations per size (the slowest rank's mean)", "",
            *table_head("| size | ring | built-in | ring busbw | built-in busbw | ring / built-in "
                        "| medians: ring / built-in | ring sent / op |", "r" * 8)]
    for r in c["sizes"]:
        b = r["bytes"]
        size = f"{b // MIB} MiB" if b >= MIB else f"{b // 1024} KiB" if b >= 1024 else f"{b} B"
        out.append(f"| {size} | {1e3 * r['ring_time_s']:.3f} ms | {1e3 * r['builtin_time_s']:.3f} ms "
                   f"| {r['ring_busbw_GBps']:.3f} GB/s | {r['builtin_busbw_GBps']:.3f} GB/s "
                   f"| {r['ratio_ring_to_builtin']:.3f} | {r['ring_time_median_s'] / r['builtin_time_median_s']:.3f} "
                   f"| {r['ring_send_bytes_per_op']:.0f} B |")
    out += ["", "busbw = 2(n-1)/n x bytes / time (nccl-tests). DP's communication is derived from the bytes given to "
                "all_reduce (2(n-1)/n of them, what a ring sends); ZeRO's is the ring's sends, counted. Gradients are "
                "those kept between steps: during backward every run holds all 4P bytes of them. Activations: CPU "
                "tensor bytes held after the forward pass minus before it (kit::memory); peak tensors: the most CPU "
                "tensor bytes held at once during a step (transients included); peak RSS: the whole process.", ""]
    return "\n".join(out)


# ---- the figures ------------------------------------------------------------------------------

# The parts of a memory bar, bottom to top: (field, title, colour).
PARTS = [("parameters", "parameters", "#4C72B0"), ("gradients", "gradients (kept between steps)", "#DD8452"),
         ("optimizer_state", "optimizer state", "#55A868"), ("activations", "activations (held after forward)", "#C44E52")]


def human_bytes(b):
    return f"{b / MIB:.0f}M" if b >= MIB else f"{b / 1024:.0f}K" if b >= 1024 else f"{b:.0f}"


def human_count(n):
    """A parameter count: 31.6K, 5.03M, 124.4M (powers of 1000)."""
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}K" if n >= 1e3 else f"{n:.0f}"


def memory_figure(s):
    """zero_memory.png: stacked bars per rank and run, one panel per preset; (width, height, script)."""
    p = s.path
    presets = s.records("presets")
    w = round(s.field(s.field(s.data, "settings", p), "world_size", p, "number"))
    script = ("set multiplot layout 1," + str(len(presets)) + " title " +
              quote(f"Memory per rank: plain data parallelism (DP, AdamW) against ZeRO-1 and ZeRO-2, {w} ranks, fp32\n"
                    "bars: bytes counted from the tensors; diamond: the ZeRO paper's formula for parameters + "
                    "gradients + optimizer state;\nunder each bar: the process's peak RSS in MiB or GiB (LibTorch "
                    "itself, the model built from the seed, everything)") + "\n" + BAR_STYLE +
              "set boxwidth 0.75\nset key below horizontal maxrows 3\nset tmargin 7\nset bmargin 11\n"
              'set ylabel "MiB per rank"\n')
    for i, (where, preset) in enumerate(presets):
        rows, places = [], []
        runs = s.field(preset, "runs", where, "list")
        for k, r in enumerate(runs):
            at = f"{where}.runs[{k}]"
            label = s.field(r, "label", at, "text")
            formula = s.field(s.field(r, "formula_bytes", at), "total", at + ".formula_bytes", "number") / MIB
            for rank, m in enumerate(s.field(r, "memory_per_rank", at, "list")):
                m_at = f"{at}.memory_per_rank[{rank}]"
                cum, top = [], 0
                for part, _, _ in PARTS:
                    top += s.field(m, part, m_at, "number") / MIB
                    cum.append(top)
                rss = s.field(m, "peak_rss", m_at, "number") / MIB
                rss = f"RSS {rss / 1024:.1f}G" if rss >= 1024 else f"RSS {rss:.0f}M"
                x = k * (w + 1) + rank
                rows.append((x, *cum, formula))
                places.append((x, f"{label}\nrank {rank}\n{rss}"))
        top = max(max(row[1:]) for row in rows)
        count = human_count(s.field(preset, "parameter_count", where, "number"))
        script += ("set key below horizontal maxrows 3\n" if i == len(presets) - 1 else "unset key\n")  # one key
        script += (f"set title {quote(s.field(preset, 'preset', where, 'text') + f' (P = {count} parameters)')}\n"
                   f"set yrange [0:{1.15 * top if top > 0 else 1.0!r}]\n"
                   f"set xrange [-0.8:{len(runs) * (w + 1) - 1.2!r}]\n" +
                   tics("x", places) +
                   stacked([(c + 2, colour, title) for c, (_, title, colour) in enumerate(PARTS)],
                           "'-' using 1:6 with points pt 13 ps 2.2 lc rgb \"#000000\" title \"formula: 4P + 4P + 8P "
                           "(DP), 4P + 4P + 8P/n (ZeRO-1), 4P + 12P/n (ZeRO-2)\"") + inline(rows) * 5)
    return max(1150, 650 * len(presets) + 200), 680, script + "unset multiplot\n"


def bandwidth_figure(s):
    """ring_bandwidth.png: busbw against the size, the ring and the built-in all-reduce; (width, height, script)."""
    c = s.field(s.data, "collectives", s.path)
    at = s.path + ": collectives"
    rows, ratio64 = [], None
    for i, r in enumerate(s.field(c, "sizes", at, "list")):
        r_at = f"{at}.sizes[{i}]"
        b = s.field(r, "bytes", r_at, "number")
        rows.append((b, s.field(r, "ring_busbw_GBps", r_at, "number"),
                     s.field(r, "builtin_busbw_GBps", r_at, "number")))
        if b == 64 * MIB:
            ratio64 = s.field(r, "ratio_ring_to_builtin", r_at, "number")
    title = (f"All-reduce bus bandwidth, {round(s.field(c, 'world_size', at, 'number'))} ranks "
             f"({s.field(c, 'backend', at, 'text')}), float32\nbusbw = 2(n-1)/n x bytes / time")
    if ratio64 is not None and ratio64 > 0:
        title += f"; at 64M the ring takes {ratio64:.2f} x the built-in's time (goal <= 1.5)"
    return 1000, 620, (f"set title {quote(title)}\n"
                       'set logscale x 2\nset logscale y 10\nset border 3\nset grid lc rgb "#DDDDDD"\n'
                       'set ytics nomirror\n'
                       'set xlabel "tensor size (bytes)"\nset ylabel "bus bandwidth (GB/s, log scale)"\n'
                       "set key bottom right box opaque\n"
                       f"set xrange [{rows[0][0] / 1.5!r}:{rows[-1][0] * 1.5!r}]\n" +
                       tics("x", [(r[0], human_bytes(r[0])) for r in rows], "nomirror out") +
                       "plot '-' using 1:2 with linespoints pt 7 lw 2 lc rgb \"#4C72B0\" title \"ring all-reduce "
                       "(send/recv, Problem 5.1)\", '-' using 1:3 with linespoints pt 5 lw 2 lc rgb \"#DD8452\" "
                       "title \"built-in all-reduce (dist::all_reduce)\"\n" + inline(rows) * 2)


# zero_memory.png and ring_bandwidth.png from runs_dir/summary.json, both read before either is drawn.
draw = summary_figures("bench/zero.py", [("zero_memory.png", memory_figure), ("ring_bandwidth.png", bandwidth_figure)])


def main(argv=None):
    args = parse_args(argv)
    if args.redraw:
        return draw_figures(args, draw)
    if args.world_size < 2:
        sys.exit("error: --world-size must be at least 2 (ZeRO shards across ranks; one rank has nothing to compare)")
    os.makedirs(args.out, exist_ok=True)
    summary = {"settings": {"world_size": args.world_size, "threads": args.threads, "backend": args.backend,
                            "vocab_size": args.vocab_size, "cores": os.cpu_count(),
                            "command": command_line(argv)},
               "presets": [measure(args, p) for p in args.presets],
               "collectives": collectives(args)}
    summary["checks"] = checks(summary, args.world_size)
    write_summary(args.out, summary, markdown)
    draw_figures(args, draw)


if __name__ == "__main__":
    main()
