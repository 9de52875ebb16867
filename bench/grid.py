#!/usr/bin/env python3
"""The 3D grid measured (Problem 6): every (d, p, t) factorisation of W ranks, one command.

    python3 bench/grid.py                                  # cpu-small, W = 4, batch 16 x 128: about a minute on 2 cores
    python3 bench/grid.py --preset tiny --world-size 2 --grids "2,1,1 1,2,1 1,1,2" --batch-size 4 \\
        --chunks 2 --seq-len 16 --vocab-size 64 --steps 1 --warmup 1   # smoke: seconds

For every factorisation d x p x t = W (--world-size, default 4: 4,1,1  2,2,1  2,1,2  1,4,1
1,2,2  1,1,4, data-parallel size first; --grids: a list of your own) and the one-process run
1,1,1 as the reference, it runs build/run_3d with Gloo, --threads per process, one --schedule
(1f1b) with --chunks micro-batches per replica, on the same global batch (--batch-size rows of
--seq-len tokens; it must be a multiple of d x chunks for every grid, checked first) and the
same synthetic batches, --warmup untimed steps then --steps timed ones. Dropout is off
(--dropout 0), so every grid trains the same model on the same batches and its losses must
equal the reference's up to float rounding: the check loss_matches_reference reports the
largest relative difference over all steps and grids (PASS within 1e-4).

Writes OUT/summary.json, OUT/summary.md (one table, also printed) and, with gnuplot (unless
--no-figures; --redraw: only draw it again from OUT/summary.json, --figures DIR: into DIR),
OUT/figures/grid_sweep.png.
summary.json, the input of a planner that predicts these numbers:
  settings   preset(s), world_size, global batch_size, chunks (m per replica), seq_len,
             vocab_size, steps (timed), warmup, schedule, threads, dropout, command
  machine    cores (os.cpu_count()), max_processes, oversubscribed (processes > cores: the
             ranks then share cores and every time below includes waiting for a core), note
  records    one per (preset, grid), the reference first:
    preset, dp, pp, tp, processes, label ("d=2 p=1 t=2"), reference (true for 1,1,1)
    tokens_per_s            the global batch's tokens per second over the timed steps (each
                            rank measures the same job; the smallest of the ranks' rates)
    step_time_s             the slowest rank's mean of its timed steps
    comm_s_per_step         {data, tensor, pipeline, embedding}: seconds per step a rank spent
                            blocked in that kind of communication, the largest over the ranks
                            for each kind separately (pipeline: time waiting in P2P receives,
                            the bubble included; grid/trainer.h)
    comm_s_per_step_per_rank  the same per rank (rank order)
    peak_tensor_bytes       the most CPU tensor bytes a rank held at once during a step
                            (kit/memory.h), the largest over the ranks; null on a GPU
    parameter_bytes         the bytes of the parameters a rank holds, the largest over the ranks
    peak_tensor_bytes_per_rank, parameter_bytes_per_rank, peak_rss_bytes_per_rank
    losses                  rank 0's loss of the global batch, every step (warmup included)
    final_loss, loss_max_rel_diff_vs_reference
    metrics                 the per-rank metrics files run_3d wrote (OUT/<preset>/dDpPtT/rankR.json)
  checks     [{name, goal, value, status: PASS | MISS}]
Python 3 standard library only.
"""
import os
import sys

from bench_process import (argument_parser, checks_lines, command_line, common_options, rel_diff, run_ranks, table_head,
                           write_summary)
from gnuplot_png import (BAR_STYLE, Summary, bar_panel, draw_figures, figure_options, inline, quote, render_png,
                         stacked, tics)

TARGETS = "run_3d"  # what the runs need built
KINDS = ["data", "tensor", "pipeline", "embedding"]
LOSS_RTOL = 1e-4
MIB = 2**20


def parse_args(argv=None):
    ap = argument_parser(__doc__, "run_3d")
    ap.add_argument("--presets", "--preset", nargs="+", default=["cpu-small"], dest="presets")
    ap.add_argument("--world-size", type=int, default=4, help="W: every d x p x t = W is run")
    ap.add_argument("--grids", default="", help='instead: these grids, e.g. "2,1,1 1,2,1 1,1,2" (d,p,t each)')
    ap.add_argument("--n-layer", type=int, default=0, help="override the presets' blocks (0: theirs; p must fit)")
    ap.add_argument("--batch-size", type=int, default=16, help="the global batch: a multiple of d x chunks for all")
    ap.add_argument("--chunks", type=int, default=4, help="micro-batches m per data-parallel replica")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab-size", type=int, default=1000, help="synthetic tokens (t must divide it)")
    ap.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b"])
    common_options(ap, steps=20, warmup=2, threads=1, timeout=600, out="runs/grid")
    figure_options(ap)
    return ap.parse_args(argv)


def factorisations(w):
    """Every (d, p, t) with d p t = w, d then p largest first: (4,1,1) (2,2,1) ... (1,1,4)."""
    return [(d, p, w // (d * p)) for d in range(w, 0, -1) if w % d == 0
            for p in range(w // d, 0, -1) if (w // d) % p == 0]


def parse_grids(text, world_size):
    grids = []
    for item in text.split():
        try:
            g = tuple(int(x) for x in item.split(","))
        except ValueError:
            g = ()
        if len(g) != 3 or min(g) < 1:
            sys.exit(f'error: --grids: "{item}" is not d,p,t (three positive integers, e.g. "2,1,2")')
        if g[0] * g[1] * g[2] != world_size:
            sys.exit(f"error: --grids: {item} has {g[0] * g[1] * g[2]} ranks, not --world-size {world_size}: "
                     "give grids of one size (and that size as --world-size)")
        grids.append(g)
    if not grids:
        sys.exit('error: --grids is empty: give d,p,t triples, e.g. "2,1,1 1,2,1 1,1,2"')
    return grids


def label(d, p, t):
    return f"d={d} p={p} t={t}"


def grid_run(args, preset, d, p, t):
    cmd = [os.path.join(args.build, "run_3d"), "--dp", str(d), "--pp", str(p), "--tp", str(t),
           "--chunks", str(args.chunks), "--schedule", args.schedule, "--preset", preset, "--dropout", "0",
           "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len), "--vocab-size", str(args.vocab_size),
           "--threads", str(args.threads), "--steps", str(args.warmup + args.steps), "--warmup", str(args.warmup)]
    paths, ranks = run_ranks(cmd, os.path.join(args.out, preset, f"d{d}p{p}t{t}"), d * p * t, args.timeout, TARGETS,
                             ["--n-layer", str(args.n_layer)] if args.n_layer else [])
    peaks = [m["peak_tensor_bytes"] for m in ranks]
    return {
        "preset": preset, "dp": d, "pp": p, "tp": t, "processes": d * p * t, "label": label(d, p, t),
        "reference": d * p * t == 1,
        "tokens_per_s": min(m["tokens_per_sec"] for m in ranks),
        "step_time_s": max(sum(m["timed_step_seconds"]) / len(m["timed_step_seconds"]) for m in ranks),
        "comm_s_per_step": {k: max(m["comm_seconds_per_step"][k] for m in ranks) for k in KINDS},
        "comm_s_per_step_per_rank": [m["comm_seconds_per_step"] for m in ranks],
        "peak_tensor_bytes": None if None in peaks else max(peaks),
        "parameter_bytes": max(m["parameter_bytes"] for m in ranks),
        "peak_tensor_bytes_per_rank": peaks,
        "parameter_bytes_per_rank": [m["parameter_bytes"] for m in ranks],
        "peak_rss_bytes_per_rank": [m["peak_rss_bytes"] for m in ranks],
        "losses": ranks[0]["losses"], "final_loss": ranks[0]["losses"][-1],
        "n_layer": ranks[0]["n_layer"], "n_head": ranks[0]["n_head"], "n_embd": ranks[0]["n_embd"],
        "metrics": paths,
    }


def measure(args, preset, grids):
    ref = grid_run(args, preset, 1, 1, 1)
    ref["loss_max_rel_diff_vs_reference"] = 0.0
    records = [ref]
    for d, p, t in grids:
        r = grid_run(args, preset, d, p, t)
        r["loss_max_rel_diff_vs_reference"] = rel_diff(r["losses"], ref["losses"])
        records.append(r)
    return records


def machine(args, grids):
    cores = os.cpu_count() or 1
    most = max(d * p * t for d, p, t in grids) * args.threads
    note = f"{cores} cores; the largest run has {most} thread(s) in all ({args.threads} per process)"
    if most > cores:
        note += (f": it oversubscribes the CPU ({most} > {cores}), so ranks wait for a core and every time here, "
                 "communication included, holds that waiting; compare the grids with each other on this machine, "
                 "not with a machine that has a core per rank")
    return {"cores": cores, "max_processes": most // args.threads, "oversubscribed": most > cores, "note": note}


def checks(records):
    worst = max(r["loss_max_rel_diff_vs_reference"] for r in records)
    which = max(records, key=lambda r: r["loss_max_rel_diff_vs_reference"])
    return [{"name": "loss_matches_reference",
             "goal": f"every grid's loss at every step within {LOSS_RTOL:g} (relative) of the 1,1,1 run's",
             "value": f"{worst:.2e} (largest: {which['preset']} {which['label']})",
             "status": "PASS" if worst <= LOSS_RTOL else "MISS"}]


def mib(b):
    return "n/a" if b is None else f"{b / MIB:.2f}"


def markdown(s):
    st = s["settings"]
    out = [f"{', '.join(st['presets'])}; global batch {st['batch_size']} x {st['seq_len']} tokens, {st['schedule']} with "
           f"{st['chunks']} micro-batches per replica, {st['threads']} thread(s) per process, {st['steps']} timed steps "
           f"after {st['warmup']}; `{st['command']}`", "",
           f"machine: {s['machine']['note']}", "",
           *table_head("| preset | grid | processes | tokens/s | step | comm data | comm tensor | comm pipeline "
                       "| comm embedding | peak tensors / rank | params / rank | final loss | loss vs 1,1,1 |",
                       "ll" + "r" * 11)]
    for r in s["records"]:
        c = r["comm_s_per_step"]
        out.append(f"| {r['preset']} | {r['label']} | {r['processes']} | {r['tokens_per_s']:.0f} "
                   f"| {1e3 * r['step_time_s']:.0f} ms | " + " | ".join(f"{1e3 * c[k]:.1f} ms" for k in KINDS) +
                   f" | {mib(r['peak_tensor_bytes'])} MiB | {mib(r['parameter_bytes'])} MiB | {r['final_loss']:.5f} "
                   f"| {'reference' if r['reference'] else format(r['loss_max_rel_diff_vs_reference'], '.1e')} |")
    out += ["", "tokens/s: the global batch's, the slowest rank's measure; step: the slowest rank's mean; comm: seconds "
                "per step blocked in each kind of communication, the largest over the ranks for each kind (pipeline "
                "includes waiting for the neighbour stage, the bubble); peak tensors and params: the largest over the "
                "ranks (MiB); loss vs 1,1,1: the largest relative difference from the one-process run over all steps.",
            ""]
    out += checks_lines(s["checks"])
    return "\n".join(out)


# ---- the figure ---------------------------------------------------------------------------------

GRID_COLOUR, REFERENCE_COLOUR = "#4C72B0", "#999999"
# The kinds of communication, bottom to top of a stacked bar: (title, colour), in KINDS' order.
KIND_STYLES = [("data (gradient all-reduce)", "#4C72B0"), ("tensor (the blocks' all-reduces)", "#DD8452"),
               ("pipeline (P2P receives, bubble included)", "#55A868"), ("embedding (tied wte gradient)", "#8172B3")]


def draw(runs_dir, figures_dir):
    """grid_sweep.png from runs_dir/summary.json: per preset, tokens/s of every grid, then its
    communication seconds per step stacked by kind with the step time marked."""
    s = Summary("bench/grid.py", runs_dir)
    presets = {}  # preset: [(label, reference, tokens/s, step s, [comm s per kind])], in the records' order
    for where, r in s.records("records"):
        comm = s.field(r, "comm_s_per_step", where)
        presets.setdefault(s.field(r, "preset", where, "text"), []).append(
            (s.field(r, "label", where, "text"), s.field(r, "reference", where, "boolean"),
             s.field(r, "tokens_per_s", where, "number"), s.field(r, "step_time_s", where, "number"),
             [s.field(comm, k, where + ".comm_s_per_step", "number") for k in KINDS]))
    p = s.path
    st, m = s.field(s.data, "settings", p), s.field(s.data, "machine", p)
    n = {k: round(s.field(st, k, p, "number")) for k in ("world_size", "chunks", "batch_size", "seq_len", "threads")}
    setup = (f"Every (d, p, t) factorisation of W = {n['world_size']} ranks (data, pipeline, tensor), "
             f"{s.field(st, 'schedule', p, 'text')}, {n['chunks']} micro-batches per replica\nglobal batch "
             f"{n['batch_size']} x {n['seq_len']} tokens, {n['threads']} thread(s) per process, "
             f"{round(s.field(m, 'cores', p, 'number'))} cores" +
             (" (oversubscribed: ranks share cores)" if s.field(m, "oversubscribed", p, "boolean") else ""))
    heading = "3D grid sweep\n" + setup
    script = (f"set multiplot layout {2 * len(presets)},1 title {quote(heading)}\n" +
              BAR_STYLE + "set boxwidth 0.7\nset key below horizontal\nset tmargin 4\n")
    for preset, bars in presets.items():
        places, xrange = list(enumerate(b[0] for b in bars)), (-0.7, len(bars) - 0.3)
        script += bar_panel(f"{preset}: throughput (the global batch's tokens per second)", "tokens per second",
                            [(i, b[2], REFERENCE_COLOUR if b[1] else GRID_COLOUR) for i, b in enumerate(bars)],
                            xrange, places, "%.0f",
                            [(GRID_COLOUR, "a grid of W ranks"), (REFERENCE_COLOUR, "one process (the reference)")])
        rows = [(i, *(sum(b[4][:k + 1]) for k in range(4)), b[3]) for i, b in enumerate(bars)]
        top = max(max(row[4:]) for row in rows)
        title = (f"{preset}: communication seconds per step, by kind\n(each kind: the largest over the ranks; "
                 "diamond: the step time, the slowest rank's)")
        script += (f"set title {quote(title)}\n"
                   f'set ylabel "seconds per step"\nset yrange [0:{1.15 * top if top > 0 else 1.0!r}]\nunset label\n'
                   f"set xrange [{xrange[0]!r}:{xrange[1]!r}]\n" + tics("x", places) +
                   stacked([(k + 2, colour, kind) for k, (kind, colour) in enumerate(KIND_STYLES)],
                           "'-' using 1:6 with points pt 13 ps 2 lc rgb \"#000000\" title \"step time\"") +
                   inline(rows) * 5)
    out = os.path.join(figures_dir, "grid_sweep.png")
    widest = max(len(bars) for bars in presets.values())
    return [render_png(out, max(1400, 150 * widest + 200), 80 + 2 * 470 * len(presets), script + "unset multiplot\n")]


def main(argv=None):
    args = parse_args(argv)
    if args.redraw:
        return draw_figures(args, draw)
    if args.world_size < 1:
        sys.exit("error: --world-size must be at least 1")
    grids = parse_grids(args.grids, args.world_size) if args.grids else factorisations(args.world_size)
    grids = [g for g in grids if g != (1, 1, 1)]  # the reference runs anyway, first
    for d, p, t in grids + [(1, 1, 1)]:
        if args.batch_size % (d * args.chunks):
            sys.exit(f"error: --batch-size {args.batch_size} is not a multiple of d x --chunks = {d} x {args.chunks} "
                     f"(grid {d},{p},{t}): every grid must take the same global batch; use a multiple of "
                     f"{max(g[0] for g in grids) * args.chunks}")
    os.makedirs(args.out, exist_ok=True)
    records = [r for preset in args.presets for r in measure(args, preset, grids)]
    summary = {"settings": {"presets": args.presets, "world_size": args.world_size,
                            "grids": [list(g) for g in grids], "batch_size": args.batch_size,
                            "chunks": args.chunks, "seq_len": args.seq_len, "vocab_size": args.vocab_size,
                            "steps": args.steps, "warmup": args.warmup, "schedule": args.schedule,
                            "threads": args.threads, "dropout": 0.0,
                            "command": command_line(argv)},
               "machine": machine(args, grids + [(1, 1, 1)]),
               "records": records}
    summary["checks"] = checks(records)
    write_summary(args.out, summary, markdown)
    draw_figures(args, draw)


if __name__ == "__main__":
    main()
