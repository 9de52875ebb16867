#!/usr/bin/env python3
"""The 3D grid measured (Problem 6): every (d, p, t) factorisation of W ranks, one command.

    python3 bench/grid.py                                  # cpu-small, W = 4, batch 16 x 128: about a minute on 2 cores
    python3 bench/grid.py --preset tiny --world-size 2 --grids "2,1,1 1,2,1 1,1,2" --batch-size 4 \\
        --chunks 2 --seq-len 16 --vocab-size 64 --steps 1 --warmup 1   # smoke: seconds
    python3 bench/grid.py --world-size 2 4 --chunks 1 2 4 8 --repeats 2 --steps 10 --profile-repeats 40 \\
        --out runs/planner_sweep                           # the planner's sweep (bench/planner.py --grid)

For every factorisation d x p x t = W (--world-size, default 4: 4,1,1  2,2,1  2,1,2  1,4,1
1,2,2  1,1,4, data-parallel size first; several W, e.g. --world-size 2 4: those of each W in
turn; --grids: a list of your own, each of a size among --world-size) and the one-process run
1,1,1 as the reference, it runs build/train_parallel with Gloo, --threads per process, one --schedule
(1f1b) with --chunks micro-batches m per replica, on the same global batch (--batch-size rows
of --seq-len tokens) and the same synthetic batches, --warmup untimed steps then --steps timed
ones. Dropout is off (--dropout 0), so every grid trains the same model on the same batches and
its losses must equal the reference's up to float rounding: the check loss_matches_reference
reports the largest relative difference over all steps and grids (PASS within 1e-4).

--chunks takes one m (default 4) or several (--chunks 1 2 4 8): every grid, the reference
included, runs once per m for which the batch is a multiple of d x m (micro-batches of
batch / (d m) rows); the other (grid, m) are skipped and listed (summary.md, summary.json
skipped). A grid with no such m at all stops the script before anything runs. Each run is
compared with the reference of the same m. A grid that cannot split the preset's model (p more
than its blocks; t not dividing its heads, width or --vocab-size), known once the preset's
reference has run, is skipped and listed too. --repeats N (default 1) measures every run N
times, in rounds (the whole list once, then again), so that a slow drift of the machine spreads
over all the runs instead of hitting one.

Writes OUT/summary.json, OUT/summary.md (one table, also printed; with several repeats a noise
column and a line on the noise) and, with gnuplot (unless --no-figures; --redraw: only draw it
again from OUT/summary.json, --figures DIR: into DIR), OUT/figures/grid_sweep.png (one bar per
record with its label).
summary.json, the input of a planner that predicts these numbers:
  settings   preset(s), world_size (the largest W), world_sizes (the list), grids (the d,p,t run
             beside the reference, skipped ones included), global batch_size, chunks (m per
             replica: a number when one m is given, else the list), chunks_list (always the
             list), repeats, seq_len, vocab_size, steps (timed), warmup, schedule, threads,
             dropout, profiles ({preset: OUT/profiles/<preset>.json} with --profile-repeats: the
             layers profiled at the end of every round, each time the rounds' mean; else {}),
             command
  machine    cores (os.cpu_count()), max_processes, oversubscribed (processes > cores: the
             ranks then share cores and every time below includes waiting for a core), note
  records    one per (preset, grid, m) run, per preset the reference first, each grid with its
             m in --chunks' order:
    preset, dp, pp, tp, processes, label ("d=2 p=1 t=2"; with several m "d=2 p=1 t=2 m=4"),
    reference (true for 1,1,1), chunks (m), micro_batch (rows per micro-batch: batch / (d m))
    tokens_per_s            the global batch's tokens per second over the timed steps (each
                            rank measures the same job; the smallest of the ranks' rates);
                            with repeats, the mean of the repeats' values
    step_time_s             the slowest rank's mean of its timed steps; with repeats, the mean
                            of step_times_s
    step_times_s            each repeat's step time (the same definition), in round order
    noise                   (max - min) / mean of step_times_s (0 with one repeat)
    comm_s_per_step         {data, tensor, pipeline, embedding}: seconds per step a rank spent
                            blocked in that kind of communication, the largest over the ranks
                            for each kind separately (pipeline: time waiting in P2P receives,
                            the bubble included; grid/trainer.h); with repeats, the mean of
                            the repeats' values
    comm_s_per_step_per_rank  the same per rank (rank order; with repeats, the means)
    peak_tensor_bytes       the most CPU tensor bytes a rank held at once during a step
                            (kit/memory.h), the largest over the ranks; null on a GPU
    parameter_bytes         the bytes of the parameters a rank holds, the largest over the ranks
    peak_tensor_bytes_per_rank, parameter_bytes_per_rank, peak_rss_bytes_per_rank
    losses                  rank 0's loss of the global batch, every step (warmup included)
    final_loss, loss_max_rel_diff_vs_reference (over every repeat's losses, against the
                            first repeat of the reference with the same preset and m)
    (the memory fields, losses and final_loss: the first repeat's)
    metrics                 the per-rank metrics files train_parallel wrote, the first repeat's
                            (OUT/<preset>/dDpPtT/rankR.json; with several m dDpPtTmM; with
                            repeats .../repeatR/rankR.json)
    metrics_per_repeat      those files for every repeat
  skipped    [{preset, dp, pp, tp, chunks, label, reason}]: each (preset, grid, m) not run
  noise      {repeats, median_relative, max_relative (of the records' noise),
              spearman_between_repeats, kendall_between_repeats (Spearman's rank correlation
              and Kendall's tau-b, ties averaged, of repeat 1's against repeat 2's step times
              over all records; null with one repeat)}
  checks     [{name, goal, value, status: PASS | MISS}]
Python 3 standard library only.
"""
import json
import os
import statistics
import sys

from bench_process import (argument_parser, checks_lines, command_line, common_options, kendall_tau, profile_layers,
                           rel_diff, run_ranks, spearman, table_head, write_summary)
from gnuplot_png import (BAR_STYLE, Summary, bar_panel, draw_figures, figure_options, inline, quote, render_png,
                         stacked, tics)

TARGETS = "train_parallel"  # what the runs need built
KINDS = ["data", "tensor", "pipeline", "embedding"]
LOSS_RTOL = 1e-4
MIB = 2**20


def parse_args(argv=None):
    ap = argument_parser(__doc__, "train_parallel")
    ap.add_argument("--presets", "--preset", nargs="+", default=["cpu-small"], dest="presets")
    ap.add_argument("--world-size", type=int, nargs="+", default=[4],
                    help="W, one or more (e.g. 2 4): every d x p x t = W of each is run")
    ap.add_argument("--grids", default="",
                    help='instead: these grids, e.g. "2,1,1 1,2,1 1,1,2" (d,p,t each; sizes among --world-size)')
    ap.add_argument("--n-layer", type=int, default=0, help="override the presets' blocks (0: theirs; p must fit)")
    ap.add_argument("--batch-size", type=int, default=16,
                    help="the global batch: a multiple of d x m for every grid and at least one m")
    ap.add_argument("--chunks", type=int, nargs="+", default=[4],
                    help="micro-batches m per data-parallel replica, one or more (e.g. 1 2 4 8): every grid runs "
                         "with each m for which the batch is a multiple of d x m")
    ap.add_argument("--repeats", type=int, default=1,
                    help="measure every run this many times, in rounds (the whole list once, then again)")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab-size", type=int, default=1000, help="synthetic tokens (t must divide it)")
    ap.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b"])
    ap.add_argument("--profile-repeats", type=int, default=0,
                    help="also profile the layers (build/profile_layers, this many runs per measurement) at the end "
                         "of every round, so that bench/planner.py prices the runs with the machine as fast as it "
                         "was while they ran (0: no profile)")
    common_options(ap, steps=20, warmup=2, threads=1, timeout=600, out="runs/grid")
    figure_options(ap)
    return ap.parse_args(argv)


def factorisations(w):
    """Every (d, p, t) with d p t = w, d then p largest first: (4,1,1) (2,2,1) ... (1,1,4)."""
    return [(d, p, w // (d * p)) for d in range(w, 0, -1) if w % d == 0
            for p in range(w // d, 0, -1) if (w // d) % p == 0]


def parse_grids(text, world_sizes):
    grids = []
    for item in text.split():
        try:
            g = tuple(int(x) for x in item.split(","))
        except ValueError:
            g = ()
        if len(g) != 3 or min(g) < 1:
            sys.exit(f'error: --grids: "{item}" is not d,p,t (three positive integers, e.g. "2,1,2")')
        n = g[0] * g[1] * g[2]
        if n not in world_sizes:
            given = " ".join(map(str, world_sizes))
            sys.exit(f"error: --grids: {item} has {n} ranks, not one of --world-size {given}: give grids of those "
                     f"sizes (or add {n} to it: --world-size {' '.join(map(str, sorted(world_sizes + [n])))})")
        if g not in grids:
            grids.append(g)
    if not grids:
        sys.exit('error: --grids is empty: give d,p,t triples, e.g. "2,1,1 1,2,1 1,1,2"')
    return grids


def label(d, p, t, m=None):
    """"d=2 p=1 t=2"; with m (when several m are swept) "d=2 p=1 t=2 m=4"."""
    return f"d={d} p={p} t={t}" + ("" if m is None else f" m={m}")


def plan_chunks(args, grids):
    """{grid: the m of --chunks it runs with} for the reference and every grid, and the skipped
    (grid, m, reason); exits when a grid would have no m at all."""
    chunks, skipped = {}, []
    for d, p, t in grids + [(1, 1, 1)]:
        chunks[d, p, t] = [m for m in args.chunks if args.batch_size % (d * m) == 0]
        if not chunks[d, p, t]:
            widest = max(g[0] for g in grids + [(1, 1, 1)])
            if len(args.chunks) == 1:
                sys.exit(f"error: --batch-size {args.batch_size} is not a multiple of d x --chunks = {d} x "
                         f"{args.chunks[0]} (grid {d},{p},{t}): every grid must take the same global batch; use a "
                         f"multiple of {widest * args.chunks[0]}")
            sys.exit(f"error: --batch-size {args.batch_size} is not a multiple of d x m = {d} x m for any m of "
                     f"--chunks {' '.join(map(str, args.chunks))} (grid {d},{p},{t}): every grid must take the same "
                     f"global batch with at least one m; use a multiple of {widest * min(args.chunks)}")
        skipped += [((d, p, t), m, f"--batch-size {args.batch_size} is not a multiple of d x m = {d} x {m}")
                    for m in args.chunks if m not in chunks[d, p, t]]
    return chunks, skipped


def unfit(preset, grid, model, vocab_size):
    """Why the grid cannot split the model (n_layer, n_head, n_embd: the reference run's), or None."""
    (_, p, t), (n_layer, n_head, n_embd) = grid, model
    if p > n_layer:
        return f"p = {p} stages but {preset} has {n_layer} blocks, at least one per stage (--n-layer {p} fits it)"
    bad = [f"{what} ({n})" for what, n in (("heads", n_head), ("width", n_embd), ("--vocab-size", vocab_size)) if n % t]
    return f"t = {t} does not divide {preset}'s " + ", ".join(bad) if bad else None


def run_once(args, preset, d, p, t, m, directory):
    """One run of train_parallel: (the metrics files' paths, their contents), rank 0 first."""
    cmd = [os.path.join(args.build, "train_parallel"), "--dp", str(d), "--pp", str(p), "--tp", str(t),
           "--chunks", str(m), "--schedule", args.schedule, "--preset", preset, "--dropout", "0",
           "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len), "--vocab-size", str(args.vocab_size),
           "--threads", str(args.threads), "--steps", str(args.warmup + args.steps), "--warmup", str(args.warmup)]
    return run_ranks(cmd, directory, d * p * t, args.timeout, TARGETS,
                     ["--n-layer", str(args.n_layer)] if args.n_layer else [])


def mean(values):
    return sum(values) / len(values)


def step_time(ranks):
    """The slowest rank's mean of its timed steps."""
    return max(sum(m["timed_step_seconds"]) / len(m["timed_step_seconds"]) for m in ranks)


def make_record(args, preset, d, p, t, m, name, repeats):
    """The record of one (preset, grid, m) from its repeats [(paths, ranks)]: the times (tokens/s,
    step, communication) are the means over the repeats, the rest (memory, losses) the first's."""
    paths, ranks = repeats[0]
    peaks = [r["peak_tensor_bytes"] for r in ranks]
    times = [step_time(rs) for _, rs in repeats]
    per_rank = [[r["comm_seconds_per_step"] for r in rs] for _, rs in repeats]
    return {
        "preset": preset, "dp": d, "pp": p, "tp": t, "processes": d * p * t, "label": name,
        "reference": d * p * t == 1, "chunks": m, "micro_batch": args.batch_size // (d * m),
        "tokens_per_s": mean([min(r["tokens_per_sec"] for r in rs) for _, rs in repeats]),
        "step_time_s": mean(times), "step_times_s": times,
        "noise": (max(times) - min(times)) / mean(times) if mean(times) > 0 else 0.0,
        "comm_s_per_step": {k: mean([max(c[k] for c in cs) for cs in per_rank]) for k in KINDS},
        "comm_s_per_step_per_rank": per_rank[0] if len(per_rank) == 1 else
        [{k: mean([cs[i][k] for cs in per_rank]) for k in per_rank[0][i]} for i in range(len(ranks))],
        "peak_tensor_bytes": None if None in peaks else max(peaks),
        "parameter_bytes": max(r["parameter_bytes"] for r in ranks),
        "peak_tensor_bytes_per_rank": peaks,
        "parameter_bytes_per_rank": [r["parameter_bytes"] for r in ranks],
        "peak_rss_bytes_per_rank": [r["peak_rss_bytes"] for r in ranks],
        "losses": ranks[0]["losses"], "final_loss": ranks[0]["losses"][-1],
        "n_layer": ranks[0]["n_layer"], "n_head": ranks[0]["n_head"], "n_embd": ranks[0]["n_embd"],
        "metrics": paths, "metrics_per_repeat": [ps for ps, _ in repeats],
        "repeat_losses": [rs[0]["losses"] for _, rs in repeats],
    }


def measure(args, grids, chunks):
    """Every (preset, grid, m) to run, each grid with its m, the reference 1,1,1 first: run
    --repeats times in rounds (the whole list, then again). A grid that cannot split the preset's
    model (learnt from the preset's reference run, which comes first) is skipped in the first
    round. Returns the records in that order and the (preset, grid, m, reason) skipped."""
    several_m = len(args.chunks) > 1
    todo = [(preset, g, m) for preset in args.presets for g in [(1, 1, 1)] + grids for m in chunks[g]]
    done, skipped, dropped, model = {key: [] for key in todo}, [], set(), {}
    for repeat in range(args.repeats):
        if args.repeats > 1:
            print(f"round {repeat + 1} of {args.repeats}", flush=True)
        for key in todo:
            preset, (d, p, t), m = key
            why = unfit(preset, (d, p, t), model[preset], args.vocab_size) if repeat == 0 and p * t > 1 else None
            if why:
                print(f"skipping {preset} {label(d, p, t, m if several_m else None)}: {why}", flush=True)
                skipped.append((preset, (d, p, t), m, why))
                dropped.add(key)
            if key in dropped:
                continue
            where = os.path.join(args.out, preset, f"d{d}p{p}t{t}" + (f"m{m}" if several_m else ""))
            if args.repeats > 1:
                where = os.path.join(where, f"repeat{repeat + 1}")
            done[key].append(run_once(args, preset, d, p, t, m, where))
            if (d, p, t) == (1, 1, 1):
                r0 = done[key][0][1][0]
                model[preset] = (r0["n_layer"], r0["n_head"], r0["n_embd"])
        if args.profile_repeats > 0:
            for preset in args.presets:
                profile_round(args, preset, [key for key in todo if key[0] == preset and key not in dropped], repeat)
    records = [make_record(args, preset, d, p, t, m, label(d, p, t, m if several_m else None), runs)
               for (preset, (d, p, t), m), runs in done.items() if runs]
    for r in records:  # every repeat's losses against the first repeat's of the reference of its preset and m
        ref = next(x for x in records if x["reference"] and x["preset"] == r["preset"] and x["chunks"] == r["chunks"])
        r["loss_max_rel_diff_vs_reference"] = max(rel_diff(ls, ref["losses"]) for ls in r["repeat_losses"])
    for r in records:
        del r["repeat_losses"]
    return records, skipped


def profile_round(args, preset, keys, repeat):
    """build/profile_layers for the preset as this round ran it (every t, every micro-batch
    size): OUT/profiles/<preset>/round<R>.json."""
    profile_layers(args.build, preset,
                   ["--seq-len", str(args.seq_len), "--vocab-size", str(args.vocab_size)] +
                   (["--n-layer", str(args.n_layer)] if args.n_layer else []),
                   [t for _, (_, _, t), _ in keys], [args.batch_size // (d * m) for _, (d, _, _), m in keys],
                   args.threads, args.profile_repeats,
                   os.path.join(args.out, "profiles", preset, f"round{repeat + 1}.json"), args.timeout,
                   "train_parallel profile_layers")


def merge_profiles(args):
    """Each preset's rounds' profiles as one, OUT/profiles/<preset>.json: every time the mean of
    the rounds' (as a record's step time is the mean of its repeats), spread the largest."""
    out = {}
    for preset in args.presets:
        rounds = [json.load(open(os.path.join(args.out, "profiles", preset, f"round{k + 1}.json")))
                  for k in range(args.repeats)]
        merged = rounds[0]
        for section, keys, fields in (("times", ("kind", "tp", "micro_batch"), ("forward_s", "backward_s")),
                                      ("optimizer", ("kind", "tp"), ("seconds",))):
            for entry in merged[section]:
                same = [next(e for e in r[section] if all(e[k] == entry[k] for k in keys)) for r in rounds]
                for f in fields:
                    entry[f] = statistics.mean(e[f] for e in same)
                if "spread" in entry:
                    entry["spread"] = max(e["spread"] for e in same)
        merged["rounds"] = len(rounds)
        out[preset] = os.path.join(args.out, "profiles", preset + ".json")
        with open(out[preset], "w") as f:
            json.dump(merged, f, indent=1)
    return out


def noise(records, repeats):
    """How much the repeats of a run differ, and whether they order the runs alike."""
    first = [r["step_times_s"][0] for r in records]
    second = [r["step_times_s"][1] for r in records] if repeats > 1 else None
    return {"repeats": repeats,
            "median_relative": statistics.median(r["noise"] for r in records),
            "max_relative": max(r["noise"] for r in records),
            "spearman_between_repeats": spearman(first, second) if second else None,
            "kendall_between_repeats": kendall_tau(first, second) if second else None}


def machine(args, grids):
    cores = os.cpu_count() or 1
    most = max(d * p * t for d, p, t in grids) * args.threads
    note = f"{cores} cores; the largest run has {most} thread(s) in all ({args.threads} per process)"
    if most > cores:
        note += (f": it oversubscribes the CPU ({most} > {cores}), so ranks wait for a core and every time here, "
                 "communication included, holds that waiting; compare the grids with each other on this machine, "
                 "not with a machine that has a core per rank")
    return {"cores": cores, "max_processes": most // args.threads, "oversubscribed": most > cores, "note": note}


def checks(records, several_m):
    worst = max(r["loss_max_rel_diff_vs_reference"] for r in records)
    which = max(records, key=lambda r: r["loss_max_rel_diff_vs_reference"])
    return [{"name": "loss_matches_reference",
             "goal": f"every grid's loss at every step within {LOSS_RTOL:g} (relative) of the 1,1,1 run's" +
                     (" with the same m" if several_m else ""),
             "value": f"{worst:.2e} (largest: {which['preset']} {which['label']})",
             "status": "PASS" if worst <= LOSS_RTOL else "MISS"}]


def mib(b):
    return "n/a" if b is None else f"{b / MIB:.2f}"


def numbers(values):
    return ", ".join(map(str, values))


def markdown(s):
    st, repeats = s["settings"], s["settings"]["repeats"]
    chunks = (f"{st['chunks']} micro-batches per replica" if len(st["chunks_list"]) == 1 else
              f"m = {numbers(st['chunks_list'])} micro-batches per replica (each grid with every m for which the "
              "batch is a multiple of d x m)")
    out = [("" if len(st["world_sizes"]) == 1 else f"W = {numbers(st['world_sizes'])}; ") +
           f"{', '.join(st['presets'])}; global batch {st['batch_size']} x {st['seq_len']} tokens, {st['schedule']} with "
           f"{chunks}, {st['threads']} thread(s) per process, {st['steps']} timed steps after {st['warmup']}" +
           ("" if repeats == 1 else f", every run measured {repeats} times in rounds") + f"; `{st['command']}`", "",
           f"machine: {s['machine']['note']}", "",
           *table_head("| preset | grid | processes | tokens/s | step | " + ("noise | " if repeats > 1 else "") +
                       "comm data | comm tensor | comm pipeline | comm embedding | peak tensors / rank | params / rank "
                       "| final loss | loss vs 1,1,1 |", "ll" + "r" * (11 + (repeats > 1)))]
    for r in s["records"]:
        c = r["comm_s_per_step"]
        out.append(f"| {r['preset']} | {r['label']} | {r['processes']} | {r['tokens_per_s']:.0f} "
                   f"| {1e3 * r['step_time_s']:.0f} ms | " + (f"{100 * r['noise']:.1f} % | " if repeats > 1 else "") +
                   " | ".join(f"{1e3 * c[k]:.1f} ms" for k in KINDS) +
                   f" | {mib(r['peak_tensor_bytes'])} MiB | {mib(r['parameter_bytes'])} MiB | {r['final_loss']:.5f} "
                   f"| {'reference' if r['reference'] else format(r['loss_max_rel_diff_vs_reference'], '.1e')} |")
    out += ["", "tokens/s: the global batch's, the slowest rank's measure; step: the slowest rank's mean; comm: seconds "
                "per step blocked in each kind of communication, the largest over the ranks for each kind (pipeline "
                "includes waiting for the neighbour stage, the bubble); peak tensors and params: the largest over the "
                "ranks (MiB); loss vs 1,1,1: the largest relative difference from the one-process run over all steps" +
                (" (the run with the same m)" if len(st["chunks_list"]) > 1 else "") +
                ("." if repeats == 1 else
                 f" and every repeat. tokens/s, step and comm: the means of the {repeats} repeats; noise: (slowest - "
                 "fastest) / mean of the repeats' step times."),
            ""]
    if s["skipped"]:
        out += [f"skipped ({len(s['skipped'])}):"] + [f"- {k['preset']} {k['label']}: {k['reason']}"
                                                       for k in s["skipped"]] + [""]
    if repeats > 1:
        n = s["noise"]
        rho, tau = ("n/a" if n[k] is None else format(n[k], ".3f")
                    for k in ("spearman_between_repeats", "kendall_between_repeats"))
        out += [f"noise over {repeats} repeats: (max - min) / mean of a run's step times "
                f"{100 * n['median_relative']:.1f} % at the median, {100 * n['max_relative']:.1f} % at most; "
                f"repeat 1 against repeat 2 over {len(s['records'])} records: Spearman {rho}, Kendall tau-b {tau}", ""]
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
    n = {k: round(s.field(st, k, p, "number")) for k in ("world_size", "batch_size", "seq_len", "threads")}
    # Several W or m (settings.world_sizes, chunks_list; a summary older than them has one of each).
    sizes = [round(w) for w in s.field(st, "world_sizes", p, "list")] if "world_sizes" in st else [n["world_size"]]
    ms = ([round(c) for c in s.field(st, "chunks_list", p, "list")] if "chunks_list" in st else
          [round(s.field(st, "chunks", p, "number"))])
    repeats = round(s.field(st, "repeats", p, "number")) if "repeats" in st else 1
    several = len(sizes) > 1 or len(ms) > 1
    setup = (f"Every (d, p, t) factorisation of W = {', '.join(map(str, sizes))} ranks (data, pipeline, tensor), "
             f"{s.field(st, 'schedule', p, 'text')}, " +
             (f"{ms[0]} micro-batches per replica" if len(ms) == 1 else
              f"m = {', '.join(map(str, ms))} micro-batches per replica (where d x m divides the batch)") +
             f"\nglobal batch {n['batch_size']} x {n['seq_len']} tokens, {n['threads']} thread(s) per process, "
             f"{round(s.field(m, 'cores', p, 'number'))} cores" +
             (" (oversubscribed: ranks share cores)" if s.field(m, "oversubscribed", p, "boolean") else "") +
             (f", each time the mean of {repeats} repeats" if repeats > 1 else ""))
    heading = "3D grid sweep\n" + setup
    script = (f"set multiplot layout {2 * len(presets)},1 title {quote(heading)}\n" +
              BAR_STYLE + "set boxwidth 0.7\nset key below horizontal\nset tmargin 4\n" +
              ("set bmargin 11\n" if several else ""))
    # One bar per record with its label; with several W or m the labels are slanted to fit (and
    # the bottom margin holds them and the key below them).
    tic_options = "nomirror scale 0" + (" rotate by 40 right" if several else "")
    for preset, bars in presets.items():
        places, xrange = list(enumerate(b[0] for b in bars)), (-0.7, len(bars) - 0.3)
        script += bar_panel(f"{preset}: throughput (the global batch's tokens per second)", "tokens per second",
                            [(i, b[2], REFERENCE_COLOUR if b[1] else GRID_COLOUR) for i, b in enumerate(bars)],
                            xrange, places, "%.0f",
                            [(GRID_COLOUR, "a grid of W ranks"), (REFERENCE_COLOUR, "one process (the reference)")]
                            ).replace(tics("x", places), tics("x", places, tic_options))
        rows = [(i, *(sum(b[4][:k + 1]) for k in range(4)), b[3]) for i, b in enumerate(bars)]
        top = max(max(row[4:]) for row in rows)
        title = (f"{preset}: communication seconds per step, by kind\n(each kind: the largest over the ranks; "
                 "diamond: the step time, the slowest rank's)")
        script += (f"set title {quote(title)}\n"
                   f'set ylabel "seconds per step"\nset yrange [0:{1.15 * top if top > 0 else 1.0!r}]\nunset label\n'
                   f"set xrange [{xrange[0]!r}:{xrange[1]!r}]\n" + tics("x", places, tic_options) +
                   stacked([(k + 2, colour, kind) for k, (kind, colour) in enumerate(KIND_STYLES)],
                           "'-' using 1:6 with points pt 13 ps 2 lc rgb \"#000000\" title \"step time\"") +
                   inline(rows) * 5)
    out = os.path.join(figures_dir, "grid_sweep.png")
    widest = max(len(bars) for bars in presets.values())
    # With several W or m: narrower bars, taller panels for the slanted labels.
    width, panel = (max(1400, 60 * widest + 250), 580) if several else (max(1400, 150 * widest + 200), 470)
    return [render_png(out, width, 80 + 2 * panel * len(presets), script + "unset multiplot\n")]


def main(argv=None):
    args = parse_args(argv)
    if args.redraw:
        return draw_figures(args, draw)
    for flag, values in (("--world-size", args.world_size), ("--chunks", args.chunks), ("--repeats", [args.repeats])):
        if min(values) < 1:
            sys.exit(f"error: {flag} must be at least 1 (got {' '.join(map(str, values))})")
    if args.profile_repeats < 0:
        sys.exit(f"error: --profile-repeats must be 0 (no profile) or more (got {args.profile_repeats})")
    args.world_size, args.chunks = list(dict.fromkeys(args.world_size)), list(dict.fromkeys(args.chunks))
    grids = (parse_grids(args.grids, args.world_size) if args.grids else
             [g for w in args.world_size for g in factorisations(w)])
    grids = [g for g in grids if g != (1, 1, 1)]  # the reference runs anyway, first
    chunks, batch_skipped = plan_chunks(args, grids)
    os.makedirs(args.out, exist_ok=True)
    records, fit_skipped = measure(args, grids, chunks)
    profiles = merge_profiles(args) if args.profile_repeats > 0 else {}
    several_m = len(args.chunks) > 1
    skipped = {(preset, g, m): why for preset in args.presets for g, m, why in batch_skipped}
    skipped.update({(preset, g, m): why for preset, g, m, why in fit_skipped})
    order = [(preset, g, m) for preset in args.presets for g in [(1, 1, 1)] + grids for m in args.chunks]
    summary = {"settings": {"presets": args.presets, "world_size": max(args.world_size),
                            "world_sizes": args.world_size, "grids": [list(g) for g in grids],
                            "batch_size": args.batch_size,
                            "chunks": args.chunks if several_m else args.chunks[0], "chunks_list": args.chunks,
                            "repeats": args.repeats, "seq_len": args.seq_len, "vocab_size": args.vocab_size,
                            "steps": args.steps, "warmup": args.warmup, "schedule": args.schedule,
                            "threads": args.threads, "dropout": 0.0, "profiles": profiles,
                            "command": command_line(argv)},
               "machine": machine(args, grids + [(1, 1, 1)]),
               "records": records,
               "skipped": [{"preset": preset, "dp": g[0], "pp": g[1], "tp": g[2], "chunks": m,
                            "label": label(*g, m if several_m else None), "reason": skipped[preset, g, m]}
                           for preset, g, m in order if (preset, g, m) in skipped],
               "noise": noise(records, args.repeats)}
    summary["checks"] = checks(records, several_m)
    write_summary(args.out, summary, markdown)
    draw_figures(args, draw)


if __name__ == "__main__":
    main()
