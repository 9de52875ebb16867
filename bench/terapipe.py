#!/usr/bin/env python3
"""TeraPipe measured (Problem 7): no slicing, uniform slicings and the DP's, beside predictions.

    python3 bench/terapipe.py                      # cpu-small, 2 stages, L = 128 256 512: a few minutes on 2 cores
    python3 bench/terapipe.py --preset tiny --seq-lens 16 --uniform 2 4 --steps 1 --warmup 1 \\
        --batch-size 1 --profile-repeats 1        # smoke: seconds

For every sequence length L (--seq-lens) it
  1. profiles one stage alone (build/train_parallel --profile): forward + backward of the stage's
     blocks on l tokens after c tokens of context over a grid of (l, c), fitted to
     t(l, c) = a + b l + d l (c + l) (terapipe/latency.h), with its fit error;
  2. calibrates the same model in the pipeline: --stages processes run uniform slicings with
     the slice counts of --calibration (not the measured ones), and each unit's forward +
     backward compute on the slower stage (its actions' spans less their P2P receives, the
     median over the timed steps) is a sample of t(l, c) under the real conditions: both
     cores busy, messages sent, the embedding, head and loss included. The DP and the
     predictions use this fit; the profile alone is reported beside it (it misses those);
  3. trains --stages processes (Gloo, --threads each) on the same synthetic batches with each
     slicing: none (GPipe: the sequence whole), uniform:K for K in --uniform, and dp
     (TeraPipe's program on the calibrated model), --warmup untimed steps then --steps timed;
  4. records per run the measured pipeline time (the schedule's span, the slowest rank, the
     median over the timed steps, and the spread (max - min) / median of those steps) beside
     the predicted m * sum_i t(l_i, c_i) + (K - 1) * max_i t(l_i, c_i);
  5. asks the program for the DP's slicing at K = 1, 2, 4, 8 and 16 stages on the same model
     (no training): TeraPipe's claim is that the best slice size is set by where the device's
     throughput saturates, not by the pipeline depth.

Writes OUT/summary.json, OUT/summary.md (also printed) and, with build/plot_figures
--terapipe-runs OUT (unless --no-figures), OUT/figures/terapipe_slicing.png and
terapipe_timeline.png. summary.json:
  settings   preset, stages, batch_size, chunks, seq_lens, uniform, steps, warmup, threads, command
  machine    cores, processes, note
  lengths    one per L: seq_len, latency (the calibrated fit: {model {a, b, d}, fit_error
             {rms_relative, max_relative}, samples, file}), isolated_profile (the same for the
             profile alone), depth [{stages, lengths, slices}] (the DP at other K)
  records    one per (L, slicing): seq_len, slicing ("none", "uniform:8", "dp"), lengths,
             slices, measured_s, spread, step_s (the whole step, AdamW included, median),
             predicted_s, prediction_error, predicted_isolated_s and prediction_error_isolated
             (the profile alone's model), losses (every step's, the last stage's rank) (|predicted - measured| / measured), metrics (files)
  checks     loss_matches_unsliced (slicing changes the order of the work, not the model: every
             run's losses equal the unsliced run's), dp_fastest (per L: the DP's measured time at most the best other slicing's plus
             the larger of their spreads), prediction_error_dp (the DP's run within 10 % at every
             L), prediction_error (every run within 10 %)
Python 3 standard library only.
"""
import json
import os
import statistics
import sys

from bench_process import (argument_parser, checks_lines, command_line, common_options, last_json_line, rel_diff, run,
                           run_plot_figures, table_head, write_summary)

TARGETS = "train_parallel plot_figures"
PREDICTION_GOAL = 0.10
LOSS_RTOL = 1e-4
DEPTHS = [1, 2, 4, 8, 16]


def parse_args(argv=None):
    ap = argument_parser(__doc__, "train_parallel and plot_figures")
    ap.add_argument("--preset", default="cpu-small")
    ap.add_argument("--stages", type=int, default=2, help="pipeline stages K, one process each")
    ap.add_argument("--seq-lens", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--uniform", type=int, nargs="+", default=[2, 4, 8, 16], help="uniform slicings: slice counts")
    ap.add_argument("--batch-size", type=int, default=2, help="rows per batch")
    ap.add_argument("--chunks", type=int, default=1, help="micro-batches m (each cut into the slices)")
    ap.add_argument("--vocab-size", type=int, default=1000)
    common_options(ap, steps=10, warmup=2, threads=1)
    ap.add_argument("--calibration", type=int, nargs="+", default=[1, 3, 6, 12, 24],
                    help="uniform slicings (slice counts) whose in-pipeline timings the latency model is fitted to")
    ap.add_argument("--profile-repeats", type=int, default=3, help="timings per (l, c) when profiling (median)")
    common_options(ap, timeout=900, out="runs/terapipe")
    ap.add_argument("--no-figures", action="store_true", help="do not run plot_figures")
    return ap.parse_args(argv)


def common(args, L):
    return ["--preset", args.preset, "--seq-len", str(L), "--n-positions", str(max(args.seq_lens)),
            "--batch-size", str(args.batch_size), "--chunks", str(args.chunks), "--vocab-size", str(args.vocab_size),
            "--threads", str(args.threads), "--dropout", "0", "--pp", str(args.stages)]


def profile(args, L):
    path = os.path.join(args.out, f"L{L}", "latency.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    run([os.path.join(args.build, "train_parallel"), "--profile", path, "--profile-repeats", str(args.profile_repeats)]
        + common(args, L), args.timeout, TARGETS)
    j = json.load(open(path))
    return {"model": j["model"], "fit_error": j["fit_error"], "samples": j["samples"], "file": path}


def model_time(model, lengths, m, K):
    """m * sum_i t(l_i, c_i) + (K - 1) * max_i t(l_i, c_i) under model {a, b, d}."""
    ts, c = [], 0
    for l in lengths:
        ts.append(model["a"] + model["b"] * l + model["d"] * l * (c + l))
        c += l
    return m * sum(ts) + (K - 1) * max(ts)


def fit(samples):
    """Least squares of seconds on 1, l, l (c + l) (the same model and fit as terapipe/latency.h),
    with its relative error over the samples."""
    X = [[1.0, s["l"], s["l"] * (s["c"] + s["l"])] for s in samples]
    y = [s["seconds"] for s in samples]
    scale = [max(abs(r[j]) for r in X) or 1.0 for j in range(3)]
    X = [[r[j] / scale[j] for j in range(3)] for r in X]
    A = [[sum(r[i] * r[j] for r in X) for j in range(3)] + [sum(r[i] * v for r, v in zip(X, y))] for i in range(3)]
    for i in range(3):  # Gauss-Jordan with partial pivoting
        p = max(range(i, 3), key=lambda k: abs(A[k][i]))
        if abs(A[p][i]) < 1e-12:
            sys.exit("error: the calibration runs cannot determine t(l, c): use more --calibration slicings")
        A[i], A[p] = A[p], A[i]
        for k in range(3):
            if k != i:
                f = A[k][i] / A[i][i]
                A[k] = [a - f * b for a, b in zip(A[k], A[i])]
    coef = [A[i][3] / A[i][i] / scale[i] for i in range(3)]
    model = {"a": coef[0], "b": coef[1], "d": coef[2]}
    rel = [abs(model["a"] + model["b"] * s["l"] + model["d"] * s["l"] * (s["c"] + s["l"]) - s["seconds"]) / s["seconds"]
           for s in samples]
    return model, {"rms_relative": (sum(r * r for r in rel) / len(rel)) ** 0.5, "max_relative": max(rel)}


def calibrate(args, L, isolated_file):
    """In-pipeline samples of t(l, c): each unit's forward + backward compute on the slower
    stage (its span less its P2P receives, the median over the timed steps), from uniform
    slicings other than the measured ones; fitted, and written where --latency reads it."""
    samples = []
    for n in [k for k in args.calibration if k <= L]:
        r = training_run(args, L, f"uniform:{n}", isolated_file, folder="calibration")
        ranks = [json.load(open(p)) for p in r["metrics"]]
        lengths = r["lengths"]
        for u in range(len(ranks[0]["unit_compute_seconds"])):
            s = u % len(lengths)
            seconds = max(sum(m["unit_compute_seconds"][u]) for m in ranks)
            samples.append({"l": lengths[s], "c": sum(lengths[:s]), "seconds": seconds})
    model, err = fit(samples)
    path = os.path.join(args.out, f"L{L}", "latency_pipeline.json")
    with open(path, "w") as f:
        json.dump({"model": model, "fit_error": err, "samples": samples,
                   "from": "bench/terapipe.py: in-pipeline compute of uniform slicings " +
                           " ".join(map(str, args.calibration))}, f, indent=1)
    return {"model": model, "fit_error": err, "samples": samples, "file": path}


def dp_at_depth(args, L, latency_file, K):
    cmd = [os.path.join(args.build, "train_parallel"), "--print-slicing", "--slices", "dp", "--latency", latency_file]
    cmd += common(args, L)[:-2] + ["--pp", str(K)]
    j = last_json_line(run(cmd, args.timeout, TARGETS), "train_parallel --print-slicing")
    return {"stages": K, "lengths": j["lengths"], "slices": len(j["lengths"])}


def training_run(args, L, slicing, latency_file, folder=""):
    out = os.path.join(args.out, f"L{L}", folder, slicing.replace(":", ""))
    os.makedirs(out, exist_ok=True)
    cmd = [os.path.join(args.build, "train_parallel"), "--slices", slicing, "--latency", latency_file,
           "--steps", str(args.warmup + args.steps), "--warmup", str(args.warmup), "--no-progress",
           "--out", os.path.join(out, "rank{rank}.json")] + common(args, L)
    run(cmd, args.timeout, TARGETS)
    paths = [os.path.join(out, f"rank{r}.json") for r in range(args.stages)]
    ranks = [json.load(open(p)) for p in paths]
    spans = [max(step) for step in zip(*(m["pipeline_seconds"] for m in ranks))]  # the slowest rank, per step
    steps = [max(step) for step in zip(*(m["timed_step_seconds"] for m in ranks))]
    measured = statistics.median(spans)
    predicted = ranks[0]["predicted_seconds"]
    return {"seq_len": L, "slicing": slicing, "lengths": ranks[0]["lengths"], "slices": len(ranks[0]["lengths"]),
            "measured_s": measured, "spread": (max(spans) - min(spans)) / measured if measured > 0 else 0.0,
            "step_s": statistics.median(steps), "predicted_s": predicted, "losses": ranks[-1]["losses"],
            "prediction_error": abs(predicted - measured) / measured if measured > 0 else None,
            "metrics": paths}


def checks(records, seq_lens):
    worst = max((rel_diff(r["losses"], next(x for x in records if x["seq_len"] == r["seq_len"]
                                          and x["slicing"] == "none")["losses"]), r["seq_len"], r["slicing"])
                for r in records)
    out = [{"name": "loss_matches_unsliced",
            "goal": f"every slicing's loss at every step within {LOSS_RTOL:g} (relative) of the unsliced run's",
            "value": f"{worst[0]:.2e} at most (L = {worst[1]}, {worst[2]})",
            "status": "PASS" if worst[0] <= LOSS_RTOL else "MISS"}]
    for L in seq_lens:
        rs = [r for r in records if r["seq_len"] == L]
        dp = next(r for r in rs if r["slicing"] == "dp")
        others = [r for r in rs if r["slicing"] != "dp"]
        best = min(others, key=lambda r: r["measured_s"])
        noise = max(dp["spread"], best["spread"])
        ok = dp["measured_s"] <= best["measured_s"] * (1 + noise)
        out.append({"name": f"dp_fastest_L{L}",
                    "goal": "the DP's slicing measured fastest, within the noise (the larger spread of the two)",
                    "value": f"dp {1e3 * dp['measured_s']:.1f} ms ({dp['slices']} slices) vs best other "
                             f"{best['slicing']} {1e3 * best['measured_s']:.1f} ms; noise {100 * noise:.1f} %",
                    "status": "PASS" if ok else "MISS"})
    dps = [r for r in records if r["slicing"] == "dp"]
    worst_dp = max(dps, key=lambda r: r["prediction_error"])
    out.append({"name": "prediction_error_dp", "goal": f"the DP slicing's predicted time within "
                                                       f"{100 * PREDICTION_GOAL:.0f} % of its measured time, every L",
                "value": f"{100 * worst_dp['prediction_error']:.1f} % at most (L = {worst_dp['seq_len']})",
                "status": "PASS" if worst_dp["prediction_error"] <= PREDICTION_GOAL else "MISS"})
    worst = max(records, key=lambda r: r["prediction_error"])
    out.append({"name": "prediction_error", "goal": f"every run's predicted time within {100 * PREDICTION_GOAL:.0f} % "
                                                    "of its measured pipeline time",
                "value": f"{100 * worst['prediction_error']:.1f} % at most (L = {worst['seq_len']}, "
                         f"{worst['slicing']})",
                "status": "PASS" if worst["prediction_error"] <= PREDICTION_GOAL else "MISS"})
    return out


def markdown(s):
    st = s["settings"]
    out = [f"{st['preset']}, {st['stages']} stages, batch {st['batch_size']} rows in {st['chunks']} micro-batch(es), "
           f"{st['threads']} thread(s) per process, {st['steps']} timed steps after {st['warmup']}; "
           f"`{st['command']}`", "", f"machine: {s['machine']['note']}", "",
           *table_head("| L | t(l, c) calibrated in the pipeline | its fit error rms / max "
                       "| the profile alone: fit error rms / max "
                       "| DP slicing at K = " + ", ".join(map(str, DEPTHS)) + " |", "rlrrl")]
    for x in s["lengths"]:
        m, e, iso = x["latency"]["model"], x["latency"]["fit_error"], x["isolated_profile"]["fit_error"]
        depth = "; ".join(f"{d['slices']}" for d in x["depth"])
        out.append(f"| {x['seq_len']} | {1e3 * m['a']:.3f} + {1e3 * m['b']:.4f} l + {1e6 * m['d']:.4f}e-3 l(c+l) ms "
                   f"| {100 * e['rms_relative']:.1f} % / {100 * e['max_relative']:.1f} % "
                   f"| {100 * iso['rms_relative']:.1f} % / {100 * iso['max_relative']:.1f} % | {depth} slices |")
    out += ["", *table_head("| L | slicing | slices | measured | spread | predicted | error | profile alone predicts "
                            "| its error | step |", "rl" + "r" * 8)]
    for r in s["records"]:
        out.append(f"| {r['seq_len']} | {r['slicing']} | {r['slices']} | {1e3 * r['measured_s']:.1f} ms "
                   f"| {100 * r['spread']:.1f} % | {1e3 * r['predicted_s']:.1f} ms | {100 * r['prediction_error']:.1f} % "
                   f"| {1e3 * r['predicted_isolated_s']:.1f} ms | {100 * r['prediction_error_isolated']:.1f} % "
                   f"| {1e3 * r['step_s']:.1f} ms |")
    out += ["", "measured: the schedule's span on the slowest rank, median over the timed steps; spread: (max - min) / "
                "median of those steps; predicted: m sum t + (K - 1) max t under the fitted model; step: the whole "
                "step (AdamW and the tied-gradient exchange included).", ""]
    out += checks_lines(s["checks"])
    return "\n".join(out)


def main(argv=None):
    args = parse_args(argv)
    if args.stages < 1 or args.steps < 1 or args.warmup < 0:
        sys.exit("error: --stages and --steps must be at least 1 and --warmup at least 0")
    os.makedirs(args.out, exist_ok=True)
    lengths, records = [], []
    for L in args.seq_lens:
        bad = [k for k in args.uniform if k < 1 or k > L]
        if bad:
            sys.exit(f"error: --uniform {bad}: a uniform slicing of L = {L} tokens has 1 to {L} slices")
        isolated = profile(args, L)
        lat = calibrate(args, L, isolated["file"])
        depth = [dp_at_depth(args, L, lat["file"], K) for K in DEPTHS]
        lengths.append({"seq_len": L, "latency": lat, "isolated_profile": isolated, "depth": depth})
        for slicing in ["none"] + [f"uniform:{k}" for k in args.uniform] + ["dp"]:
            r = training_run(args, L, slicing, lat["file"])
            r["predicted_isolated_s"] = model_time(isolated["model"], r["lengths"], args.chunks, args.stages)
            r["prediction_error_isolated"] = abs(r["predicted_isolated_s"] - r["measured_s"]) / r["measured_s"]
            records.append(r)
    cores = os.cpu_count() or 1
    procs = args.stages * args.threads
    note = f"{cores} cores; each run has {args.stages} processes x {args.threads} thread(s)"
    if procs > cores:
        note += f": it oversubscribes the CPU ({procs} > {cores}), so stages wait for a core"
    summary = {"settings": {"preset": args.preset, "stages": args.stages, "batch_size": args.batch_size,
                            "chunks": args.chunks, "seq_lens": args.seq_lens, "uniform": args.uniform,
                            "steps": args.steps, "warmup": args.warmup, "threads": args.threads,
                            "command": command_line(argv)},
               "machine": {"cores": cores, "processes": args.stages, "note": note},
               "lengths": lengths, "records": records}
    summary["checks"] = checks(records, args.seq_lens)
    write_summary(args.out, summary, markdown)
    run_plot_figures(args, "--terapipe-runs", TARGETS)


if __name__ == "__main__":
    main()
