#!/usr/bin/env python3
"""Tensor parallelism measured (Problem 4): throughput, communication and memory per rank.

    python3 bench/tensor_parallel.py                       # cpu-small and cpu-base, batch 16 x 128: a few minutes
    python3 bench/tensor_parallel.py --presets tiny --n-head 4 --batch-size 4 --seq-len 16 --steps 1 --warmup 1   # smoke

For each preset, with one global batch (--batch-size rows of --seq-len tokens per step) and
--threads per process, it runs
  - one process: build/train_parallel --tp 1 (the same program, no peers);
  - tensor parallel, t = 2: build/train_parallel --tp 2 (Gloo), every rank
    running the whole batch on half of each block;
  - data parallel, 2 ranks: build/bench --config dp with --batch-size / 2 rows per rank
    (Problem 1.2's average_gradients after backward), so both see the same global batch;
and reports per run
  - tokens/s over the timed steps (TP: every rank sees every token, the slowest rank's rate;
    DP: both ranks' tokens over the slowest's time, bench's definition);
  - communication seconds per step: TP, the time a rank spent blocked in the group's
    collectives (dist::Counters::comm_seconds, the larger of the two ranks); one process,
    the same for its group of one (the mappings' all-reduces still run, with no peer: the
    cost of the calls alone); DP, the time in average_gradients (bench's comm_time_s, rank 0);
  - bytes all-reduced per step: TP measured by the group's counters against the formula
    4 L B T C x 4 bytes (the blocks' 2 forward + 2 backward all-reduces of B T C floats);
    DP computed: every gradient once, i.e. the model's parameter bytes;
  - parameter and optimizer-state bytes per rank, and the blocks' share per rank against 1/t
    (the goal: within 1 %).
Writes OUT/summary.json and OUT/summary.md, prints the tables, and draws
OUT/figures/tp_throughput_communication.png with gnuplot (--no-figures: skip; --redraw: only
draw it again from OUT/summary.json, --figures DIR: into DIR). Python 3 standard library only.
"""
import os
import sys

from bench_process import (argument_parser, command_line, common_options, last_json_line, run, run_ranks, table_head,
                           measure_or_redraw)
from gnuplot_png import BAR_STYLE, Summary, bar_panel, figure_options, quote, render_png

TARGETS = "train_parallel bench"  # what the runs need built
FIGURE = "tp_throughput_communication.png"
RUN_COLOURS = ["#4C72B0", "#DD8452", "#55A868"]  # one per kind of run, the same in both panels and every preset

T = 2  # the tensor-parallel size and the data-parallel ranks compared


def parse_args(argv=None):
    ap = argument_parser(__doc__, "train_parallel and bench")
    ap.add_argument("--presets", nargs="+", default=["cpu-small", "cpu-base"])
    ap.add_argument("--n-head", type=int, default=0, help="override the presets' heads (0: theirs; t must divide it)")
    ap.add_argument("--batch-size", type=int, default=16, help="the global batch, the same in every run")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab-size", type=int, default=1000)
    common_options(ap, threads=1, steps=5, warmup=2, timeout=900, out="runs/tensor_parallel")
    figure_options(ap)
    return ap.parse_args(argv)


def tp_run(args, preset, t):
    cmd = [os.path.join(args.build, "train_parallel"), "--tp", str(t), "--preset", preset,
           "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len), "--vocab-size", str(args.vocab_size),
           "--threads", str(args.threads), "--steps", str(args.warmup + args.steps), "--warmup", str(args.warmup)]
    _, ranks = run_ranks(cmd, os.path.join(args.out, preset, f"tp{t}"), t, args.timeout, TARGETS,
                         ["--n-head", str(args.n_head)] if args.n_head else [])
    r0 = ranks[0]
    return {
        "tokens_per_s": min(m["tokens_per_sec"] for m in ranks),
        "step_time_s": max(sum(m["timed_step_seconds"]) / len(m["timed_step_seconds"]) for m in ranks),
        "comm_s_per_step": max(m["tp_comm_seconds_per_step"] for m in ranks),
        "all_reduce_calls_per_step": r0["tp_all_reduce_calls_per_step"],
        "all_reduce_bytes_per_step": r0["tp_all_reduce_bytes_per_step"],
        "formula_all_reduce_bytes_per_step": r0["formula_all_reduce_bytes_per_step"],
        "parameter_bytes_per_rank": [m["parameter_bytes_by_kind"] for m in ranks],
        "full_parameter_bytes": r0["full_parameter_bytes"],
        "blocks_fraction_per_rank": [m["blocks_fraction"] for m in ranks],
        "optimizer_state_bytes_per_rank": [m["optimizer_state_bytes"] for m in ranks],
        "n_layer": r0["n_layer"], "n_head": r0["n_head"], "n_embd": r0["n_embd"],
    }


def dp_run(args, preset, full_bytes):
    if args.batch_size % T:
        sys.exit(f"error: --batch-size {args.batch_size} must be a multiple of {T} (data parallel splits it)")
    cmd = [os.path.join(args.build, "bench"), "--config", "dp", "--preset", preset,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-size", str(args.batch_size // T),
           "--seq-len", str(args.seq_len), "--threads", str(args.threads)]
    out = run(cmd, args.timeout, TARGETS)
    j = last_json_line(out, "bench")
    return {
        "tokens_per_s": j["tokens_per_s"], "step_time_s": j["step_time_s"], "comm_s_per_step": j["comm_time_s"],
        # average_gradients all-reduces every gradient once: the model's parameter bytes.
        "all_reduce_bytes_per_step": 4 * j["n_params"], "all_reduce_bytes_computed": True,
        "parameter_bytes_per_rank": [full_bytes] * T,
        "optimizer_state_bytes_per_rank": [2 * full_bytes["total"]] * T,  # AdamW: two moments per parameter
        "note": "bench --config dp; the bench's model keeps the preset's n_head and dropout",
    }


def measure(args, preset):
    one = tp_run(args, preset, 1)
    tp = tp_run(args, preset, T)
    dp = dp_run(args, preset, one["full_parameter_bytes"])
    full_blocks = one["full_parameter_bytes"]["blocks"]
    fractions = tp["blocks_fraction_per_rank"]
    return {
        "preset": preset, "n_layer": one["n_layer"], "n_head": one["n_head"], "n_embd": one["n_embd"],
        "runs": [{"name": "single", "label": "one process", "processes": 1, **one},
                 {"name": "tp", "label": f"tensor parallel t = {T}", "processes": T, **tp},
                 {"name": "dp", "label": f"data parallel, {T} ranks", "processes": T, **dp}],
        "blocks_per_rank": {"full_blocks_bytes": full_blocks, "fraction_per_rank": fractions, "goal": 1 / T,
                            "worst_relative_error": max(abs(f * T - 1) for f in fractions),
                            "goal_met": all(abs(f * T - 1) <= 0.01 for f in fractions)},
        "bytes_vs_formula": tp["all_reduce_bytes_per_step"] / tp["formula_all_reduce_bytes_per_step"],
    }


def mib(b):
    return f"{b / 2**20:.2f} MiB"


def markdown(s):
    st = s["settings"]
    out = [f"global batch {st['batch_size']} x {st['seq_len']} tokens, {st['threads']} thread(s) per process, "
           f"{st['steps']} timed steps after {st['warmup']}; {st['cores']} cores", ""]
    for p in s["presets"]:
        out += [f"### {p['preset']} ({p['n_layer']} layers, n_embd {p['n_embd']}, {p['n_head']} heads)", "",
                *table_head("| run | processes | tokens/s | step | comm / step | all-reduced / step | params / rank "
                            "| AdamW state / rank |", "l" + "r" * 7)]
        for r in p["runs"]:
            ar = r.get("all_reduce_bytes_per_step", 0)
            out.append(f"| {r['label']} | {r['processes']} | {r['tokens_per_s']:.0f} | {1e3 * r['step_time_s']:.1f} ms "
                       f"| {1e3 * r['comm_s_per_step']:.1f} ms | {mib(ar)}{' (computed)' if r.get('all_reduce_bytes_computed') else ''} "
                       f"| {mib(r['parameter_bytes_per_rank'][0]['total'])} | {mib(r['optimizer_state_bytes_per_rank'][0])}"
                       f"{' (computed)' if r['name'] == 'dp' else ''} |")
        tp = p["runs"][1]
        b = p["blocks_per_rank"]
        out += ["", f"TP all-reduced {mib(tp['all_reduce_bytes_per_step'])} per step in "
                    f"{tp['all_reduce_calls_per_step']:.0f} calls; the formula 4 L B T C x 4 B gives "
                    f"{mib(tp['formula_all_reduce_bytes_per_step'])} (measured / formula = {p['bytes_vs_formula']:.3f}: "
                    "the rest is the embedding, the lm_head and the loss)",
                f"blocks' parameters per rank / full: {', '.join(f'{f:.4f}' for f in b['fraction_per_rank'])} "
                f"(goal 1/t = {b['goal']:.3f} within 1 %: {'met' if b['goal_met'] else 'not met'})", ""]
    return "\n".join(out)


def draw(runs_dir, figures_dir):
    """FIGURE from runs_dir/summary.json: tokens/s and communication per step, one bar per run,
    grouped by preset."""
    s = Summary("bench/tensor_parallel.py", runs_dir)
    p = s.path
    st = s.field(s.data, "settings", p)
    setup = (f"global batch {s.field(st, 'batch_size', p, 'integer')} x {s.field(st, 'seq_len', p, 'integer')} "
             f"tokens, {s.field(st, 'threads', p, 'integer')} thread(s) per process, "
             f"{s.field(st, 'cores', p, 'integer')} cores")
    tokens, comm, places, keys = [], [], [], {}
    for i, (where, preset) in enumerate(s.records("presets")):
        for k, r in enumerate(s.field(preset, "runs", where, "list")):
            r_where, colour = f"{where}.runs[{k}]", RUN_COLOURS[k % 3]
            keys[colour] = s.field(r, "label", r_where, "text")
            tokens.append((4 * i + k, s.field(r, "tokens_per_s", r_where, "number"), colour))
            comm.append((4 * i + k, s.field(r, "comm_s_per_step", r_where, "number"), colour))
        places.append((4 * i + 1, s.field(preset, "preset", where, "text")))
    keys = [(c, keys.get(c, "")) for c in RUN_COLOURS]
    xrange = (-0.8, 4 * len(places) - 1.2)
    out = os.path.join(figures_dir, FIGURE)
    render_png(out, 1400, 620,
               "set multiplot layout 1,2 title " +
               quote("Tensor parallelism (t = 2) against one process and data parallelism (2 ranks)\n" + setup) +
               "\n" + BAR_STYLE + "set boxwidth 0.8\nset key below horizontal\nset tmargin 5\n" +
               bar_panel("Throughput", "tokens per second", tokens, xrange, places, "%.0f", keys) +
               bar_panel("Communication per step\n(TP: time blocked in the group's all-reduces; DP: in "
                         "average_gradients)", "seconds per step", comm, xrange, places, "%.3f", keys) +
               "unset multiplot\n")
    return [out]


def main(argv=None):
    args = parse_args(argv)
    measure_or_redraw(args, lambda: {
        "settings": {"batch_size": args.batch_size, "seq_len": args.seq_len, "threads": args.threads,
                     "steps": args.steps, "warmup": args.warmup, "tensor_parallel": T,
                     "vocab_size": args.vocab_size, "cores": os.cpu_count(), "command": command_line(argv)},
        "presets": [measure(args, p) for p in args.presets]}, markdown, draw)

if __name__ == "__main__":
    main()
