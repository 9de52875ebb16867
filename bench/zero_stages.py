#!/usr/bin/env python3
"""The ZeRO stages against data parallelism as the ranks grow (Problem 5.5): memory per rank and step time.

    python3 bench/zero_stages.py                            # cpu-base and gpt2, n = 1, 2, 3, 4: gpt2 the most of it
    python3 bench/zero_stages.py --presets cpu-base         # cpu-base only: about a minute on 2 cores
    python3 bench/zero_stages.py --presets tiny --world-sizes 1 2 --batch-size 2 --seq-len 16 \\
        --vocab-size 64 --steps 1 --warmup 1                # smoke: seconds
    python3 bench/zero_stages.py --precision bf16 ...       # the ZeRO stages in mixed precision

For each preset and each n of --world-sizes (n Gloo ranks, --threads per process; n = 1 runs
one rank in-process), it runs build/train_parallel --dp n four times: --optimizer adamw (plain data
parallelism: all-reduce, then torch::optim::AdamW), zero1 and zero2 (kit::zero::ZeroAdamW:
the optimizer state, then the gradients too, sharded) and zero3 (kit::zero::Fsdp: the
parameters too, gathered unit by unit), each rank on --batch-size rows of the global batch (gpt2:
--gpt2-batch-size, --gpt2-seq-len, --gpt2-steps, kept small: one step of the 124M-parameter
model takes tens of seconds on one CPU thread), and reports per run
  - memory per rank between steps, counted from the tensors (train_parallel's metrics):
    parameters, gradients, optimizer state, against the ZeRO paper's formulas: --precision
    fp32 (the default), fp32 AdamW, DP 4P + 4P + 8P = 16P, ZeRO-1 4P + 4P + 8P/n, ZeRO-2
    4P + 12P/n, ZeRO-3 16P/n; --precision bf16, the paper's mixed precision for the ZeRO
    stages (bf16 parameters and gradients, fp32 master and moments: 2 + 2 + 12 bytes per
    parameter), ZeRO-1 2P + 2P + 12P/n, ZeRO-2 2P + 14P/n, ZeRO-3 16P/n, while DP keeps fp32
    weights under autocast (4P + 4P + 8P, the same 16P);
    the most CPU tensor bytes held at once during a step (peak tensors: activations and
    transients too) and the process's peak RSS;
  - the step time (the slowest rank's mean over the timed steps) and tokens/s of all ranks
    together (the sum of each rank's own rate);
  - bytes communicated per step per rank (ZeRO: the ring's sends, counted; DP: 2(n-1)/n of the
    bytes all-reduced, derived) against 2(n-1)/n x 4P (ZeRO-3: 3(n-1)/n x 4P, three passes;
    2P in place of 4P for the ZeRO stages in bf16);
and checks, each PASS or MISS:
  - memory_formula_<preset>_<run>: on every rank and every n, counted parameters + gradients +
    optimizer state within 0.1 % of the formula (ZeRO-3 also up to units x 4 bytes x 4 above
    it: each unit's shard is ceil(P_u / n) elements, padded);
  - zero3_comm_1.5x_zero1_<preset>: ZeRO-3's bytes sent per step = 1.5 x ZeRO-1's within
    0.5 % at every n > 1 (both 0 at n = 1);
  - zero3_losses_equal_dp_<preset>: ZeRO-3's losses equal DP's at the same n (every rank,
    every step) within 1e-5 relative; in bf16 zero3_losses_close_zero1_<preset>: ZeRO-3's
    within 1e-3 of ZeRO-1's, both mixed precision (their bf16 gradients are summed in
    another order: the units' rings, not one flat ring).
Writes OUT/summary.json and OUT/summary.md, prints the tables, and draws OUT/figures/
zero_stages.png with gnuplot (--no-figures: skip; --redraw: only draw it again from
OUT/summary.json, --figures DIR: into DIR).
Python 3 standard library only.
"""
import os

from bench_process import (argument_parser, command_line, common_options, rel_diff, table_head,
                           measure_or_redraw)
from gnuplot_png import BAR_STYLE, figure_options, inline, quote, summary_figures, tics
from zero import data_parallel_ranks, preset_options, preset_settings

TARGETS = "train_parallel"  # what the runs need built
# (--optimizer, label, colour, gnuplot point type)
VARIANTS = [("adamw", "DP", "#4C72B0", 7), ("zero1", "ZeRO-1", "#DD8452", 5), ("zero2", "ZeRO-2", "#55A868", 9),
            ("zero3", "ZeRO-3", "#C44E52", 13)]
LABELS = {name: label for name, label, _, _ in VARIANTS}
FORMULA_TEXT = {"fp32": {"adamw": "16P", "zero1": "8P + 8P/n", "zero2": "4P + 12P/n", "zero3": "16P/n"},
                "bf16": {"adamw": "16P", "zero1": "4P + 12P/n", "zero2": "2P + 14P/n", "zero3": "16P/n"}}
MIB = 2**20
MEMORY_TOLERANCE = 1e-3    # counted params + grads + state against the formula, relative
COMM_TOLERANCE = 5e-3      # ZeRO-3's bytes sent against 1.5 x ZeRO-1's, relative
LOSS_TOLERANCE = {"fp32": 1e-5, "bf16": 1e-3}  # ZeRO-3's losses against DP's (bf16: ZeRO-1's), relative


def parse_args(argv=None):
    ap = argument_parser(__doc__, "train_parallel")
    ap.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2, 3, 4], help="data-parallel ranks n")
    preset_options(ap, batch_size=4, steps=2)
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: the ZeRO stages in mixed precision (fp32 master weights), DP under autocast")
    common_options(ap, timeout=1200, out="runs/zero_stages")
    figure_options(ap)
    args = ap.parse_args(argv)
    if not args.redraw:
        if any(n < 1 for n in args.world_sizes):
            ap.error("--world-sizes: every n must be at least 1")
        args.world_sizes = sorted(set(args.world_sizes))
    return args


def master_weights(optimizer, precision):
    """Whether train_parallel trains with bf16 parameters and an fp32 master (the ZeRO stages in bf16)."""
    return precision == "bf16" and optimizer != "adamw"


def formula(optimizer, p, n, precision="fp32"):
    """The ZeRO paper's bytes per rank between steps: {parameters, gradients, optimizer_state,
    total}; fp32 AdamW 4 + 4 + 8 bytes per parameter, mixed precision 2 + 2 + 12."""
    w, k = (2, 12) if master_weights(optimizer, precision) else (4, 8)
    params = w * p / n if optimizer == "zero3" else w * p
    grads = w * p / n if optimizer in ("zero2", "zero3") else w * p
    state = k * p if optimizer == "adamw" else k * p / n
    return {"parameters": params, "gradients": grads, "optimizer_state": state, "total": params + grads + state}


def formula_comm(optimizer, p, n, precision="fp32"):
    """Bytes sent per rank per step: 2(n-1)/n x 4P (a ring all-reduce), 3(n-1)/n x 4P for ZeRO-3
    (2P for bf16 parameters and gradients)."""
    w = 2 if master_weights(optimizer, precision) else 4
    return (3 if optimizer == "zero3" else 2) * (n - 1) / n * w * p


def zero_run(args, preset, n, optimizer, st):
    ranks = data_parallel_ranks(args, preset, n, optimizer, st, os.path.join(args.out, preset, f"n{n}", optimizer),
                                TARGETS, ["--precision", args.precision])
    r0 = ranks[0]
    p = r0["parameter_count"]
    return {
        "name": optimizer, "label": LABELS[optimizer], "world_size": n,
        "tokens_per_s": min(m["tokens_per_sec"] for m in ranks),  # the global batch's, the slowest rank's clock
        "step_time_s": max(sum(m["timed_step_seconds"]) / len(m["timed_step_seconds"]) for m in ranks),
        "losses_per_rank": [m["losses"] for m in ranks],
        "memory_per_rank": [{"parameters": m["parameter_bytes"], "gradients": m["gradient_bytes"],
                             "gradients_after_backward": m["gradient_peak_bytes"],
                             "optimizer_state": m["optimizer_state_bytes"],
                             "counted": m["parameter_bytes"] + m["gradient_bytes"] + m["optimizer_state_bytes"],
                             # null where kit::memory cannot count the device
                             "activations": m["activation_bytes"],
                             "peak_tensor_bytes": m["peak_tensor_bytes"], "peak_rss": m["peak_rss_bytes"]}
                            for m in ranks],
        "master_weights": r0["master_weights"],
        "formula_bytes": formula(optimizer, p, n, args.precision),
        "program_formula_bytes": r0["formula_bytes"],  # train_parallel's own, for reference
        "comm_bytes_per_step": max(m["comm_bytes_per_step"] for m in ranks),
        "comm_bytes_counted": r0["comm_bytes_counted"],
        "formula_comm_bytes_per_step": formula_comm(optimizer, p, n, args.precision),
        "comm_s_per_step": max(m["comm_seconds_per_step"]["data"] for m in ranks),
        "parameter_count": p, "n_layer": r0["n_layer"], "n_embd": r0["n_embd"], "n_head": r0["n_head"],
        "vocab_size": r0["vocab_size"],
    }


def measure(args, preset):
    st = preset_settings(args, preset)
    runs = [zero_run(args, preset, n, opt, st) for n in args.world_sizes for opt, _, _, _ in VARIANTS]
    r0 = runs[0]
    return {"preset": preset, "parameter_count": r0["parameter_count"], "n_layer": r0["n_layer"],
            "n_embd": r0["n_embd"], "n_head": r0["n_head"], "vocab_size": r0["vocab_size"],
            "units": r0["n_layer"] + 1,  # Fsdp's: "outer" (embeddings, ln_f, the tied head) and one per block
            "batch_size_per_rank": st["batch_size"], "seq_len": st["seq_len"], "steps": st["steps"],
            "warmup": st["warmup"], "runs": runs}


def checks(summary):
    out = []
    precision = summary["settings"]["precision"]
    text = FORMULA_TEXT[precision]
    for p in summary["presets"]:
        name = p["preset"]
        # ZeRO-3: under one element of padding per unit in each tensor, 16 bytes in all (fp32: the
        # parameter, its gradient, two moments; bf16: 2 + 2 and the master's 4 + 4 + 4)
        slack = p["units"] * 16
        for opt, label, _, _ in VARIANTS:
            worst, where, ok = 0.0, "", True
            for r in (r for r in p["runs"] if r["name"] == opt):
                f = r["formula_bytes"]["total"]
                allowed = MEMORY_TOLERANCE * f + (slack if opt == "zero3" else 0)
                for rank, m in enumerate(r["memory_per_rank"]):
                    d = m["counted"] - f
                    ok = ok and abs(d) <= allowed
                    if abs(d) >= abs(worst) or not where:
                        worst, where = d, f"n = {r['world_size']}, rank {rank}: {m['counted']} vs {f:.0f} bytes"
            goal = (f"{label}: params + grads + state counted = {text[opt]} within 0.1 %"
                    + (f" (+ up to {p['units']} units x 16 B = {slack} B of padding)" if opt == "zero3" else "")
                    + ", every rank and n")
            out.append({"name": f"memory_formula_{name}_{opt}", "goal": goal,
                        "value": f"largest difference {worst:+.0f} B ({where})", "status": "PASS" if ok else "MISS"})
        ratios, ok = [], True
        for n in sorted({r["world_size"] for r in p["runs"]}):
            z1 = next(r for r in p["runs"] if r["name"] == "zero1" and r["world_size"] == n)["comm_bytes_per_step"]
            z3 = next(r for r in p["runs"] if r["name"] == "zero3" and r["world_size"] == n)["comm_bytes_per_step"]
            if n == 1 or z1 == 0:
                ok = ok and z1 == 0 and z3 == 0
                ratios.append(f"n = {n}: {z3:.0f} / {z1:.0f} B")
            else:
                ok = ok and abs(z3 / z1 / 1.5 - 1) <= COMM_TOLERANCE
                ratios.append(f"n = {n}: {z3 / z1:.4f}")
        out.append({"name": f"zero3_comm_1.5x_zero1_{name}",
                    "goal": "ZeRO-3's bytes sent per step per rank = 1.5 x ZeRO-1's within 0.5 % (n = 1: both 0)",
                    "value": "; ".join(ratios), "status": "PASS" if ok else "MISS"})
        # fp32: ZeRO-3 against DP; bf16: against ZeRO-1, the other run with master weights
        other, other_label = ("adamw", "DP") if precision == "fp32" else ("zero1", "ZeRO-1")
        tol = LOSS_TOLERANCE[precision]
        diffs, ok = [], True
        for n in sorted({r["world_size"] for r in p["runs"]}):
            ref = next(r for r in p["runs"] if r["name"] == other and r["world_size"] == n)["losses_per_rank"]
            z3 = next(r for r in p["runs"] if r["name"] == "zero3" and r["world_size"] == n)["losses_per_rank"]
            d = max(rel_diff(a, b) for a, b in zip(z3, ref))
            ok = ok and d <= tol and len(z3) == len(ref) and all(len(a) == len(b) for a, b in zip(z3, ref))
            diffs.append(f"n = {n}: {d:.1e}")
        out.append({"name": (f"zero3_losses_equal_dp_{name}" if precision == "fp32"
                             else f"zero3_losses_close_zero1_{name}"),
                    "goal": f"ZeRO-3's losses = {other_label}'s at the same n, every rank and step, within {tol:g} "
                            "relative",
                    "value": "; ".join(diffs), "status": "PASS" if ok else "MISS"})
    return out


def unit(total):
    """(divisor, name) for a table's bytes: MiB, or KiB for the small presets."""
    return (MIB, "MiB") if total >= MIB else (1024, "KiB")


def markdown(s):
    st = s["settings"]
    precision = st.get("precision", "fp32")
    out = [f"n = {', '.join(str(n) for n in st['world_sizes'])} ranks ({st['backend']}), {st['threads']} thread(s) "
           f"per process, {st['cores']} cores; `{st['command']}`", "", "### Checks", "",
           *table_head("| check | goal | measured | |", "llll")]
    for c in s["checks"]:
        out.append(f"| {c['name']} | {c['goal']} | {c['value']} | **{c['status']}** |")
    for p in s["presets"]:
        div, name = unit(16 * p["parameter_count"])

        def b(x):
            return f"{x / div:.2f}"

        out += ["", f"### {p['preset']} ({p['n_layer']} layers, n_embd {p['n_embd']}, P = {p['parameter_count']:,} "
                    f"parameters; {p['batch_size_per_rank']} rows x {p['seq_len']} tokens per rank, {p['steps']} timed "
                    f"steps after {p['warmup']})", "",
                f"Bytes per rank in {name}, counted / formula (the worst rank's; between steps); peak tensors and "
                f"RSS: the worst rank's; comm: bytes sent per step per rank in {name}, counted / formula:", "",
                *table_head("| n | run | params | grads | optimizer state | params+grads+state | formula "
                            "| peak tensors | peak RSS | step | tokens/s (all ranks) | comm / step / rank "
                            "| losses vs DP |", "rl" + "r" * 11)]
        for r in p["runs"]:
            f = r["formula_bytes"]
            worst = max(r["memory_per_rank"], key=lambda m: m["counted"])
            peak = [m["peak_tensor_bytes"] for m in r["memory_per_rank"] if m["peak_tensor_bytes"] is not None]
            dp = next(d for d in p["runs"] if d["name"] == "adamw" and d["world_size"] == r["world_size"])
            loss = max(rel_diff(a, c) for a, c in zip(r["losses_per_rank"], dp["losses_per_rank"]))
            out.append(f"| {r['world_size']} | {r['label']} | {b(worst['parameters'])} / {b(f['parameters'])} "
                       f"| {b(worst['gradients'])} / {b(f['gradients'])} "
                       f"| {b(worst['optimizer_state'])} / {b(f['optimizer_state'])} "
                       f"| {b(worst['counted'])} / {b(f['total'])} | {FORMULA_TEXT[precision][r['name']]} "
                       f"| {b(max(peak)) if peak else 'not measured'} "
                       f"| {max(m['peak_rss'] for m in r['memory_per_rank']) / MIB:.0f} MiB "
                       f"| {r['step_time_s']:.3f} s | {r['tokens_per_s']:.0f} "
                       f"| {b(r['comm_bytes_per_step'])}{'' if r['comm_bytes_counted'] else ' (derived)'} / "
                       f"{b(r['formula_comm_bytes_per_step'])} | {'same' if loss == 0 else f'{loss:.1e}'} |")
    out += ["", ("Formulas (fp32 AdamW, P parameters, n ranks, per rank between steps): DP 4P + 4P + 8P, ZeRO-1 "
                 "4P + 4P + 8P/n, ZeRO-2 4P + 12P/n, ZeRO-3 16P/n; communication 2(n-1)/n x 4P, ZeRO-3 3(n-1)/n x 4P. "
                 if precision == "fp32" else
                 "Formulas (bf16: the ZeRO stages in the paper's mixed precision, bf16 parameters and gradients, fp32 "
                 "master and moments; DP fp32 weights under autocast; P parameters, n ranks, per rank between steps): "
                 "DP 4P + 4P + 8P, ZeRO-1 2P + 2P + 12P/n, ZeRO-2 2P + 14P/n, ZeRO-3 16P/n; communication "
                 "2(n-1)/n x 2P, ZeRO-3 3(n-1)/n x 2P (DP 2(n-1)/n x 4P). ") +
                "DP's communication is derived from the bytes given to all_reduce (2(n-1)/n of them, what a ring "
                "sends); ZeRO's is the ring's sends, counted. Gradients are those kept between steps: during "
                "backward every run but ZeRO-3 holds all of them (4P bytes, 2P with bf16 parameters). Peak tensors: the most CPU tensor bytes "
                "held at once during a step (activations and transients included; kit::memory); peak RSS: the "
                "whole process (LibTorch itself, the whole model built from the seed on every rank). Step: the "
                "slowest rank's mean over the timed steps; with more ranks than cores they share the cores. "
                "Losses vs DP: the largest relative difference from DP's at the same n, over ranks and steps.", ""]
    return "\n".join(out)


# ---- the figure -------------------------------------------------------------------------------

def line_panel(used, x, column, width, title, ylabel, top, key, shift):
    """One panel of lines, one per variant: column `column` of its rows against n (x: "1", or
    "($1+{shift})" to move each variant sideways by its own shift)."""
    plot = ", ".join(f"'-' using {x.format(shift=repr(shift[opt]))}:{column} with linespoints lw {width} pt {pt} "
                     f"ps 1.2 lc rgb {quote(colour)} title {quote(label)}" for opt, label, colour, pt, _ in used)
    return (f"set title {quote(title)}\n"
            f"set ylabel {quote(ylabel)}\n"
            f"set yrange [0:{1.3 * top if top > 0 else 1.0!r}]\n"
            f"set key {key} horizontal samplen 2 font \",9\" opaque box\n"
            f"plot {plot}\n" + "".join(inline(rows) for *_, rows in used))


def stages_figure(s):
    """zero_stages.png: one row per preset; panels: params + grads + state per rank against n
    (counted, and the formulas dashed), peak tensor bytes per rank, step time; (width, height, script)."""
    presets = s.records("presets")
    st = s.field(s.data, "settings", s.path)
    threads = round(s.field(st, "threads", s.path + ": settings", "number"))
    cores = s.field(st, "cores", s.path + ": settings", "number or null")
    backend = s.field(st, "backend", s.path + ": settings", "text")
    precision = st.get("precision", "fp32")
    text = FORMULA_TEXT[precision]
    rows_n = len(presets)
    script = (f"set multiplot layout {rows_n},3 title " +
              quote("Data parallelism (DP, plain AdamW) against ZeRO stages 1, 2 and 3, "
                    + ("fp32" if precision == "fp32" else "bf16 (the ZeRO stages with fp32 master weights)")
                    + ", per rank against the "
                    f"number of ranks n ({backend}, {threads} thread(s) per process"
                    + (f", {cores} cores" if cores else "") + ")\nmemory: bytes counted from the tensors "
                    "(points) and the ZeRO paper's formulas (dashed, same colour): "
                    + ", ".join(text[opt] for opt, _, _, _ in VARIANTS)) +
              "\n" + BAR_STYLE + 'set grid xtics ytics lc rgb "#DDDDDD"\nset xlabel "ranks n"\n'
              "set tmargin 5\nset bmargin 4\n")
    for where, preset in presets:
        name = s.field(preset, "preset", where, "text")
        p = s.field(preset, "parameter_count", where, "number")
        batch = round(s.field(preset, "batch_size_per_rank", where, "number"))
        seq = round(s.field(preset, "seq_len", where, "number"))
        steps = round(s.field(preset, "steps", where, "number"))
        runs = s.field(preset, "runs", where, "list")
        ns, series = set(), {opt: [] for opt, _, _, _ in VARIANTS}
        for k, r in enumerate(runs):
            at = f"{where}.runs[{k}]"
            opt = s.field(r, "name", at, "text")
            n = round(s.field(r, "world_size", at, "number"))
            mems = s.field(r, "memory_per_rank", at, "list")
            counted = max(s.field(m, "counted", f"{at}.memory_per_rank[{i}]", "number") for i, m in enumerate(mems))
            peaks = [s.field(m, "peak_tensor_bytes", f"{at}.memory_per_rank[{i}]", "number or null")
                     for i, m in enumerate(mems)]
            peak = max((v for v in peaks if v is not None), default=None)
            total = s.field(s.field(r, "formula_bytes", at), "total", at + ".formula_bytes", "number")
            step = s.field(r, "step_time_s", at, "number")
            if opt in series:
                series[opt].append((n, counted / MIB, total / MIB, peak / MIB if peak is not None else float("nan"),
                                    step))
                ns.add(n)
        ns = sorted(ns)
        lo, hi = ns[0] - 0.4, ns[-1] + 0.4
        xt = tics("x", [(n, str(n)) for n in ns], "nomirror")
        used = [(opt, label, colour, pt, sorted(series[opt])) for opt, label, colour, pt in VARIANTS if series[opt]]
        # A small sideways shift per variant, so points that coincide (n = 1, DP and ZeRO-1 at 8P + 8P) stay visible.
        shift = {opt: (k - (len(used) - 1) / 2) * 0.06 for k, (opt, _, _, _, _) in enumerate(used)}
        top = max(max(row[1], row[2]) for *_, rows in used for row in rows)
        top_peak = max((row[3] for *_, rows in used for row in rows if row[3] == row[3]), default=0)
        top_step = max(row[4] for *_, rows in used for row in rows)
        settings = f"{batch} rows x {seq} tokens per rank"
        count = f"{p / 1e6:.1f}M" if p >= 1e6 else f"{p / 1e3:.1f}K"
        # Panel 1: params + grads + state; the formulas drawn last, dashed over the thin counted lines.
        plot = ", ".join(
            f"'-' using ($1+{shift[opt]!r}):2 with linespoints lw 1 pt {pt} ps 1.5 lc rgb {quote(colour)} "
            f"title {quote(label + ': ' + text[opt])}" for opt, label, colour, pt, _ in used)
        plot += "".join(f", '-' using ($1+{shift[opt]!r}):3 with lines dt 2 lw 2.5 lc rgb {quote(colour)} notitle"
                        for opt, _, colour, _, _ in used)
        plot += ', NaN with lines dt 2 lw 2.5 lc rgb "#555555" title "formula (dashed)"'
        title = (f"{name} (P = {count}): parameters + gradients + optimizer state per rank\n"
                 "between steps: counted (points) and formula (dashed)")
        script += (f"set title {quote(title)}\n"
                   'set ylabel "MiB per rank"\n'
                   f"set xrange [{lo!r}:{hi!r}]\nset yrange [0:{1.45 * top if top > 0 else 1.0!r}]\n" + xt +
                   "set key top right vertical maxrows 5 samplen 2.5 font \",9\" opaque box\n"
                   f"plot {plot}\n" + "".join(inline(rows) for *_, rows in used) * 2)
        # Panel 2: peak tensor bytes; panel 3: step time.
        script += line_panel(used, "($1+{shift})", 4, 1.5,
                             f"{name}: peak tensor bytes per rank during a step, counted\n"
                             f"(activations and transients too), {settings}",
                             "MiB per rank (peak)", top_peak, "bottom left", shift)
        script += line_panel(used, "1", 5, 2,
                             f"{name}: step time, the slowest rank (mean of {steps} timed steps)\n"
                             f"{settings}, {threads} thread(s) per rank",
                             "seconds per step", top_step, "top left", shift)
    return 1800, 120 + 470 * rows_n, script + "unset multiplot\n"


# zero_stages.png from runs_dir/summary.json.
draw = summary_figures("bench/zero_stages.py", [("zero_stages.png", stages_figure)])


def main(argv=None):
    args = parse_args(argv)

    def measure_all():
        summary = {"settings": {"world_sizes": args.world_sizes, "threads": args.threads, "backend": args.backend,
                                "precision": args.precision, "vocab_size": args.vocab_size, "cores": os.cpu_count(),
                                "command": command_line(argv)},
                   "presets": [measure(args, p) for p in args.presets]}
        summary["checks"] = checks(summary)
        return summary
    measure_or_redraw(args, measure_all, markdown, draw)

if __name__ == "__main__":
    main()
