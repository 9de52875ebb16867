#!/usr/bin/env python3
"""The planner judged against a measured sweep (Problem 8): AMP's question, on this machine.

    python3 bench/grid.py --world-size 2 4 --chunks 1 2 4 8 --repeats 2 --steps 10 --profile-repeats 40 --out runs/planner_sweep
    python3 bench/planner.py                        # the sweep (about 5 minutes on 2 cores), then this (2 minutes)
    python3 bench/planner.py --grid runs/grid --out runs/planner --max-bytes 64K --iters 3 --no-figures

AMP (NeurIPS 2022) asks of a cost model the right order: does it rank the strategies as the
machine does? And since AMP prices each layer from a measurement (known_cost/*.npy, per
tensor-parallel degree) rather than from FLOPs, so does this planner when the cluster's device
names a profile (planner/profile.h). This script takes a sweep of bench/grid.py (--grid, its
summary.json: every (d, p, t) of each W and the one-process run, at one or more micro-batch
counts m, each measured once or more) and

  1. describes THIS machine the way the planner reads a cluster (planner/cluster.h):
       - its layers: the sweep's profile (grid.py --profile-repeats: build/profile_layers at
         the end of every round, so with the machine as fast as while the runs ran; each t
         as t processes running Problem 4's layers, all-reduces included), else
         build/profile_layers now for every t and micro-batch size the sweep ran
         (--profile-repeats runs, their median): OUT/profiles/<preset>.json;
       - how many of W processes compute at once: W copies of profile_layers (t = 1, the
         sweep's middle micro-batch size) at the same time against one alone, W x alone /
         together (2 cores: about 2 for W = 2, less than 2 for W = 4: sharing cores costs
         switches and caches); the node's shared_flops is that many devices' flops;
       - the device's FLOP/s: build/bench --gemm (a 512 x 512 matmul, the sweep's
         --threads), alone and as many copies at once as there are cores (the FLOP-counted
         description below);
       - its memory: the physical RAM / W;
       - the link: build/run_collectives at W ranks (Gloo's all-reduce, --min-bytes to
         --max-bytes, --iters timed after --warmup), fitted to 2(n-1) latency + 2(n-1)/n bytes
         / bandwidth by least squares of the relative error (the data-parallel all-reduce and
         the pipeline's sends; the tensor-parallel ones are in the profile).
     Per W and preset OUT/this_machine_wW_<preset>.json (the profile); and, the planner as it
     was without one, OUT/this_machine_wW.json: compute = FLOPs / the GEMM rate with every
     core busy, shared_flops = the cores' rates added up when the W processes oversubscribe
     them;
  2. predicts every record of the sweep with build/plan on both descriptions of its world
     size: the same model, global batch, sequence length, schedule and micro-batches per
     replica (the record's m: train_parallel's --chunks), only that grid (--grids "d,p,t"), the
     layers split as train_parallel splits them (--even);
     OUT/predictions/{profiled,flops}/<preset>/dDpPtTmM.json hold plan's answers;
  3. compares, for each: Spearman and Kendall's tau-b of predicted against measured step
     times over all records (average ranks for ties), the predicted rank of the measured
     best, whether the predicted best measures within noise of the measured best, the mean
     absolute relative error; the sweep's own noise (repeat 1 against repeat 2: the ceiling
     of any ranking); and per grid swept at several micro-batch sizes, the size the planner
     predicts fastest against the measured fastest. Within noise: a difference of two runs'
     means no larger than twice its standard error, one measurement's relative standard
     deviation estimated from every run's repeats (median |a - b| / mean / 0.954);
  4. plans the example clusters (starter/planner/clusters/*.json, counted in FLOPs): GPT-2
     (124M), batch 512 x 1024 tokens, schedules 1f1b, gpipe and interleaved, ZeRO 0 and 1,
     the best 5 each (OUT/clusters/<name>.json), and a 2.7B GPT (32 layers, 2560 wide, 32
     heads, 2048 tokens) on a100_4x8 (OUT/clusters/a100_4x8_2.7b.json).

Writes OUT/summary.json, OUT/summary.md (also printed) and, with gnuplot (unless --no-figures;
--redraw: only draw them again from OUT/summary.json, --figures DIR: into DIR),
OUT/figures/planner_accuracy.png (predicted against measured on log axes, one point per run, with the
profile and counting FLOPs, y = x and +-15 %), planner_micro_batch.png (per grid, step time
against micro-batch size, measured and predicted) and planner_clusters.png (the best
strategies of each example cluster). summary.json:
  settings      grid (the sweep's directory), grid_settings (its settings), collective sizes,
                iters, warmup, profile_repeats, command
  machine       cores, memory_bytes, gemm_gflops (one process alone, --threads),
                gemm_gflops_together (each of one copy per core run at once), threads, note
  descriptions  the FLOP-counted ones, one per W: file, devices, flops, shared_flops (null
                unless the W processes oversubscribe the cores), memory_bytes, link
                {bandwidth, latency}, link_fit {sizes, rms_relative, max_relative, file}
                (null for W = 1)
  profiled_descriptions  one per (preset, W): file, devices, preset, profile, concurrency
                {micro_batch, alone_s, together_s, concurrency} (null for W = 1), shared_flops
  records       one per record of the sweep, in its order: preset, dp, pp, tp, chunks (m),
                micro_batch, label, grid, reference, measured_s (the sweep's step_time_s),
                measured_repeats_s, noise (the repeats' spread), predicted_s (plan's total_s
                with the profile), relative_error, predicted_flops_s, relative_error_flops,
                measured_rank, predicted_rank (1: fastest), fits, terms and terms_flops
                {compute_s, tensor_s, p2p_s (the slowest stage's per micro-batch), pipeline_s,
                contention (the slowest stage's compute slowdown with the node busy),
                optimizer_s, data_s, bubble}, measured_comm_s, layers_per_stage, prediction
  noise         repeats, median_relative, max_relative (the records' spreads), records_repeated,
                sigma_relative, spearman_between_repeats, kendall_between_repeats
  accuracy, accuracy_flops   spearman, kendall, measured_best, predicted_best,
                measured_best_predicted_rank, predicted_best_measured_s, measured_best_s,
                predicted_best_within_noise, mean_abs_relative_error, max_abs_relative_error,
                records; accuracy_flops also micro_batch_within_noise (grids whose size chosen
                counting FLOPs measures within noise of the best)
  micro_batch_choices  per (preset, d, p, t) with several sizes: preset, grid, sizes,
                measured_best_micro_batch, measured_best_s, chosen_micro_batch,
                chosen_measured_s, within_noise
  amp_reference AMP's own numbers for the same question, from its cached trials
                (MccRee17/AMP src/results/*_results.txt; p_cost against r_cost, runs that
                did not finish left out): per setting records, spearman, kendall,
                measured_best_predicted_rank, mean_abs_relative_error
  clusters      one per example: name, file, cluster (its name), model, batch, seq_len, devices,
                found (plan's count of what fits), strategies (plan's best 5, as plan --json writes them)
  checks        [{name, goal, value, status: PASS | MISS}]: mean_relative_error (15 % or less),
                spearman (0.935, AMP's own, or the noise ceiling if lower), measured_best (the
                predicted best within noise of the measured best), micro_batch_choice (every
                grid's chosen micro-batch size within noise of its measured best)
Python 3 standard library only.
"""
import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys

import bench_process

from bench_process import (checks_lines, command_line, kendall_tau, last_json_line, ranks, run, spearman, table_head,
                           write_summary)
from gnuplot_png import draw_figures, figure_options, inline, quote, summary_figures, tics

TARGETS = "plan bench run_collectives profile_layers"  # what the script needs built
SPEARMAN_GOAL = 0.935  # AMP's own, on its homogeneous cluster (or the sweep's noise ceiling, if lower)
ERROR_GOAL = 0.15      # mean |predicted - measured| / measured
TOP = 3
CLUSTERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "starter", "planner", "clusters")
# The example clusters' workload: GPT-2 (124M) as AMP's and Megatron's papers train it.
EXAMPLE = ["--model", "gpt2", "--vocab-size", "50257", "--batch", "512", "--schedules", "1f1b,gpipe,interleaved",
           "--zero", "0,1", "--top", "5"]
GPT_2_7B = ["--n-layer", "32", "--n-embd", "2560", "--n-head", "32"]
AMP_REFERENCE = {
    "source": "MccRee17/AMP src/results/*_results.txt at 72eeea4: AMP's cached trials, p_cost (predicted, seconds) "
              "against r_cost (measured seconds per iteration), runs with r_cost inf (out of memory or failed) left out",
    "homogeneous_cluster": {"records": 47, "spearman": 0.935, "kendall": 0.795, "measured_best_predicted_rank": 3,
                            "mean_abs_relative_error": 0.476},
    "heterogeneous_model": {"records": 19, "spearman": 0.853, "kendall": 0.669, "measured_best_predicted_rank": 1,
                            "mean_abs_relative_error": 0.164},
    "heterogeneous_cluster": {"records": 43, "spearman": 0.394, "kendall": 0.306, "measured_best_predicted_rank": 2,
                              "mean_abs_relative_error": 0.494},
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", default="runs/planner_sweep", help="bench/grid.py's output directory (its summary.json)")
    ap.add_argument("--build", default="build", help="directory holding plan, bench and run_collectives")
    ap.add_argument("--clusters", default=os.path.relpath(CLUSTERS), help="example cluster JSON files (*.json)")
    ap.add_argument("--min-bytes", default="4K", help="smallest all-reduce timed for the link (run_collectives)")
    ap.add_argument("--max-bytes", default="4M", help="largest all-reduce timed for the link")
    ap.add_argument("--iters", type=int, default=10, help="timed all-reduces per size")
    ap.add_argument("--warmup", type=int, default=3, help="untimed all-reduces per size before them")
    ap.add_argument("--profile-repeats", type=int, default=40,
                    help="timed runs per layer measurement of profile_layers (their median is kept)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed per command")
    ap.add_argument("--out", default="runs/planner")
    figure_options(ap)
    return ap.parse_args(argv)


# ---- the sweep --------------------------------------------------------------------------------

SWEEP = "python3 bench/grid.py --world-size 2 4 --chunks 1 2 4 8 --repeats 2 --steps 10 --profile-repeats 40 --out {grid}"


def read_grid(grid_dir):
    path = os.path.join(grid_dir, "summary.json")
    if not os.path.isfile(path):
        sys.exit(f"error: {path} does not exist: measure the sweep first ({SWEEP.format(grid=grid_dir)}), "
                 "then run this again")
    try:
        s = json.load(open(path))
        records, settings = s["records"], s["settings"]
        for k in ("batch_size", "chunks", "seq_len", "vocab_size", "schedule", "threads"):
            settings[k]
        for r in records:
            r["preset"], r["dp"], r["pp"], r["tp"], r["step_time_s"], r["n_layer"], r["n_embd"], r["n_head"]
            # A sweep of one m (Problem 6's) has no per-record m, micro-batch size or repeats.
            r.setdefault("chunks", settings["chunks"])
            r.setdefault("micro_batch", settings["batch_size"] // (r["dp"] * r["chunks"]))
            r.setdefault("step_times_s", [r["step_time_s"]])
            r.setdefault("noise", 0.0)
    except (ValueError, KeyError, TypeError) as e:
        sys.exit(f"error: {path} is not bench/grid.py's summary.json ({type(e).__name__}: {e}): "
                 f"run {SWEEP.format(grid=grid_dir)} again")
    if not records:
        sys.exit(f"error: {path} holds no record: run {SWEEP.format(grid=grid_dir)} again")
    return s


# ---- this machine -----------------------------------------------------------------------------

def physical_memory():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        sys.exit("error: cannot read this machine's physical memory (os.sysconf SC_PHYS_PAGES)")


def measure_gemm_together(args, threads, processes):
    """The GEMM rate of each of `processes` copies of bench --gemm run at once (every core busy):
    what one process gets while the others compute, and their sum, what the cores give in all."""
    cmd = [os.path.join(args.build, "bench"), "--gemm", "--threads", str(threads)]
    print(f"$ {processes} x " + " ".join(cmd), flush=True)
    try:
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(processes)]
    except FileNotFoundError as e:
        sys.exit(f"error: cannot run {cmd[0]} ({e}): build it first (cmake --build build --target {TARGETS})")
    rates = []
    for proc in procs:
        out, err = proc.communicate(timeout=args.timeout)
        if proc.returncode != 0:
            sys.exit(f"error: {' '.join(cmd)} exited with {proc.returncode}:\n{err[-2000:]}")
        rates.append(last_json_line(out, "bench --gemm")["gemm_gflops"])
    return rates


def fit_link(samples, n):
    """latency, bandwidth of time = 2(n-1) latency + 2(n-1)/n bytes / bandwidth: least squares of
    the relative error (each residual divided by its measured time, so 4 KiB counts as much as
    4 MiB). A coefficient the fit makes zero or negative (noise) is clamped to a tiny positive
    value and the other refitted alone."""
    k, c = 2 * (n - 1), 2 * (n - 1) / n
    xs = [(k / t, c * b / t) for b, t in samples]  # model / t = latency x + (1 / bandwidth) y, target 1
    sxx, sxy, syy = (sum(x * x for x, _ in xs), sum(x * y for x, y in xs), sum(y * y for _, y in xs))
    sx, sy = sum(x for x, _ in xs), sum(y for _, y in xs)
    det = sxx * syy - sxy * sxy
    latency, inverse_bw = ((sx * syy - sxy * sy) / det, (sxx * sy - sxy * sx) / det) if det > 0 else (0.0, 0.0)
    if latency <= 0:
        latency = 1e-9
        inverse_bw = sum(y * (1 - latency * x) for x, y in xs) / syy
    if inverse_bw <= 0:
        inverse_bw = 1e-15
        latency = max(1e-9, sum(x * (1 - inverse_bw * y) for x, y in xs) / sxx)
    rel = [abs(latency * x + inverse_bw * y - 1) for x, y in xs]
    return latency, 1.0 / inverse_bw, {"rms_relative": (sum(r * r for r in rel) / len(rel)) ** 0.5,
                                       "max_relative": max(rel)}


def measure_link(args, world, threads):
    pattern = os.path.join(args.out, "collectives", "{world}", "rank{rank}.json")
    run([os.path.join(args.build, "run_collectives"), "--world-size", str(world), "--min-bytes", args.min_bytes,
         "--max-bytes", args.max_bytes, "--iters", str(args.iters), "--warmup", str(args.warmup),
         "--threads", str(threads), "--out", pattern], args.timeout, TARGETS)
    path = os.path.join(args.out, "collectives", str(world), "rank0.json")
    sizes = json.load(open(path))["sizes"]
    samples = [(row["bytes"], row["builtin_time_s"]) for row in sizes if row["builtin_time_s"] > 0]
    if not samples:
        sys.exit(f"error: {path} holds no positive all-reduce time: run it again with larger --max-bytes")
    latency, bandwidth, err = fit_link(samples, world)
    return {"bandwidth": bandwidth, "latency": latency}, dict(err, sizes=len(samples), file=path)


def shape_args(record, settings):
    return ["--n-layer", str(record["n_layer"]), "--n-embd", str(record["n_embd"]), "--n-head", str(record["n_head"]),
            "--vocab-size", str(settings["vocab_size"]), "--seq-len", str(settings["seq_len"])]


def profile_layers(args, preset, records, settings):
    """The sweep's model profiled: the sweep's own profile when it took one (grid.py
    --profile-repeats: at the end of every round, the machine then as fast as while the runs
    ran), else profile_layers now for every t and micro-batch size it ran, with the sweep's
    threads per process: OUT/profiles/<preset>.json."""
    own = settings.get("profiles", {}).get(preset)
    if own:
        if not os.path.isfile(own):
            sys.exit(f"error: the sweep's profile {own} does not exist: run the sweep again "
                     f"({SWEEP.format(grid=args.grid)})")
        print(f"the sweep's profile of {preset}: {own}", flush=True)
        return own
    mine = [r for r in records if r["preset"] == preset]
    return bench_process.profile_layers(args.build, preset, shape_args(mine[0], settings), [r["tp"] for r in mine],
                                        [r["micro_batch"] for r in mine], settings["threads"], args.profile_repeats,
                                        os.path.join(args.out, "profiles", preset + ".json"), args.timeout, TARGETS)


def block_seconds(path):
    j = json.load(open(path))
    block = [e for e in j["times"] if e["kind"] == "block"]
    return sum(e["forward_s"] + e["backward_s"] for e in block)


def measure_concurrency(args, preset, records, settings, world):
    """How many of `world` processes of this machine compute at once: the blocks of one
    micro-batch size profiled by one process alone, then by `world` copies at the same time,
    world x alone / together (2 cores: about 2 for world 2; for world 4, less than 2, since
    sharing cores costs switches and caches). The node's shared_flops is this many devices."""
    mine = [r for r in records if r["preset"] == preset]
    size = sorted({r["micro_batch"] for r in mine})[len({r["micro_batch"] for r in mine}) // 2]
    base = os.path.join(args.out, "concurrency", preset, f"w{world}")
    cmd = [os.path.join(args.build, "profile_layers"), "--preset", preset, *shape_args(mine[0], settings), "--tp", "1",
           "--micro-batch-sizes", str(size), "--threads", str(settings["threads"]),
           "--repeats", str(3 * args.profile_repeats)]  # long enough that the copies' starts and ends do not count
    alone = os.path.join(base, "alone.json")
    run(cmd + ["--out", alone], args.timeout, TARGETS)
    together = [os.path.join(base, f"copy{k}.json") for k in range(world)]
    print(f"$ {world} x " + " ".join(cmd), flush=True)
    procs = [subprocess.Popen(cmd + ["--out", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for path in together]
    for proc in procs:
        _, err = proc.communicate(timeout=args.timeout)
        if proc.returncode != 0:
            sys.exit(f"error: {' '.join(cmd)} exited with {proc.returncode}:\n{err[-2000:]}")
    a, t = block_seconds(alone), [block_seconds(path) for path in together]
    return {"micro_batch": size, "alone_s": a, "together_s": t, "concurrency": world * a / (sum(t) / len(t))}


def describe(args, world, gemm, together, threads, memory, link, link_fit):
    """The FLOP-counted cluster JSON (planner/cluster.h) of one node of `world` devices of this
    machine, the planner without a profile: one process alone runs at `gemm`; with others on
    the other cores at `together` (their mean), and when the W processes need more cores than
    there are, the node gives at most what all cores give together (shared_flops)."""
    cores = os.cpu_count() or 1
    oversubscribed = world * threads > cores
    flops = (gemm if world == 1 else sum(together) / len(together)) * 1e9
    node = {"device_type": "cpu", "devices": world}
    if oversubscribed:
        node["shared_flops"] = sum(together) * 1e9
    cluster = {"name": f"this machine: {world} process(es) x {threads} thread(s) on {cores} cores",
               "device_types": {"cpu": {"flops": flops, "memory_bytes": memory / world}},
               "nodes": [node], "intra_node": link, "inter_node": link}
    path = os.path.join(args.out, f"this_machine_w{world}.json")
    with open(path, "w") as f:
        json.dump(cluster, f, indent=1)
    return {"file": path, "devices": world, "flops": flops, "shared_flops": node.get("shared_flops"),
            "memory_bytes": memory / world, "link": link, "link_fit": link_fit}


def describe_profiled(args, world, preset, gemm, threads, memory, link, profile, concurrency):
    """The same machine with its layers' measured times (planner/profile.h): the device names
    the profile; flops is one process's GEMM rate alone, and a node of several devices gives
    what `concurrency` of them compute at once (shared_flops = concurrency x flops)."""
    cores = os.cpu_count() or 1
    flops = gemm * 1e9
    node = {"device_type": "cpu", "devices": world}
    if concurrency is not None:
        node["shared_flops"] = concurrency["concurrency"] * flops
    cluster = {"name": f"this machine, profiled ({preset}): {world} process(es) x {threads} thread(s) on {cores} cores",
               "device_types": {"cpu": {"flops": flops, "memory_bytes": memory / world,
                                        "profile": os.path.relpath(profile, args.out)}},
               "nodes": [node], "intra_node": link, "inter_node": link}
    path = os.path.join(args.out, f"this_machine_w{world}_{preset}.json")
    with open(path, "w") as f:
        json.dump(cluster, f, indent=1)
    return {"file": path, "devices": world, "preset": preset, "profile": profile, "concurrency": concurrency,
            "shared_flops": node.get("shared_flops")}


# ---- predictions ------------------------------------------------------------------------------

def plan_record(args, record, settings, cluster_file, kind):
    d, p, t, m = record["dp"], record["pp"], record["tp"], record["chunks"]
    path = os.path.join(args.out, "predictions", kind, record["preset"], f"d{d}p{p}t{t}m{m}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    run([os.path.join(args.build, "plan"), "--cluster", cluster_file, "--model", record["preset"],
         *shape_args(record, settings), "--batch", str(settings["batch_size"]), "--micro-batches", str(m),
         "--schedules", settings["schedule"], "--recompute", "on" if settings.get("recompute") else "off",
         "--grids", f"{d},{p},{t}", "--even", "--keep-infeasible", "--top", "1", "--json", path],
        args.timeout, TARGETS)
    strategies = json.load(open(path))["strategies"]
    if not strategies:
        sys.exit(f"error: build/plan found no strategy for {record['label']} ({path}): does t = {t} divide the "
                 f"model's heads ({record['n_head']}) and p = {p} fit its {record['n_layer']} blocks?")
    return strategies[0], path


TERMS = ("compute_s", "tensor_s", "p2p_s", "pipeline_s", "contention", "optimizer_s", "data_s", "bubble")


def predict(args, record, settings, profiled, flops):
    """plan's prediction of one record, with the profile (the planner's answer) and counting
    FLOPs (the planner before profiles), beside the measurement."""
    c, path = plan_record(args, record, settings, profiled["file"], "profiled")
    f, _ = plan_record(args, record, settings, flops["file"], "flops")
    measured = record["step_time_s"]
    return {"preset": record["preset"], "dp": record["dp"], "pp": record["pp"], "tp": record["tp"],
            "chunks": record["chunks"], "micro_batch": record["micro_batch"], "label": record["label"],
            "grid": f"d={record['dp']} p={record['pp']} t={record['tp']}",
            "reference": record.get("reference", record["dp"] * record["pp"] * record["tp"] == 1),
            "measured_s": measured, "measured_repeats_s": record["step_times_s"], "noise": record["noise"],
            "predicted_s": c["total_s"], "relative_error": abs(c["total_s"] - measured) / measured,
            "predicted_flops_s": f["total_s"], "relative_error_flops": abs(f["total_s"] - measured) / measured,
            "fits": c["fits"], "layers_per_stage": c["layers_per_stage"],
            "terms": {k: c.get(k, 0.0) for k in TERMS}, "terms_flops": {k: f.get(k, 0.0) for k in TERMS},
            "measured_comm_s": record.get("comm_s_per_step"), "prediction": path}


# ---- how well it ranks ------------------------------------------------------------------------

def within_noise(a, b, sigma):
    """Measured a no slower than measured b beyond the noise: by at most twice the standard
    error of the difference of their means (sigma: one measurement's relative standard
    deviation, from the sweep's repeats; each mean over its runs' repeats)."""
    band = 2 * sigma * math.sqrt(1 / len(a["measured_repeats_s"]) + 1 / len(b["measured_repeats_s"]))
    return a["measured_s"] <= b["measured_s"] * (1 + band)


def accuracy(records, key, sigma):
    """Spearman, Kendall's tau-b, the measured best's predicted rank, whether the predicted best
    is the measured best or within noise of it, and the mean relative error, of predictions
    `key` ("predicted_s" or "predicted_flops_s") against the measured step times."""
    measured = [r["measured_s"] for r in records]
    predicted = [r[key] for r in records]
    best = min(records, key=lambda r: r["measured_s"])
    chosen = min(records, key=lambda r: r[key])
    error = "relative_error" if key == "predicted_s" else "relative_error_flops"
    return {"spearman": spearman(predicted, measured), "kendall": kendall_tau(predicted, measured),
            "measured_best": best["label"], "predicted_best": chosen["label"],
            "measured_best_predicted_rank": 1 + sum(r[key] < best[key] for r in records),
            "predicted_best_measured_s": chosen["measured_s"], "measured_best_s": best["measured_s"],
            "predicted_best_within_noise": within_noise(chosen, best, sigma),
            "mean_abs_relative_error": sum(r[error] for r in records) / len(records),
            "max_abs_relative_error": max(r[error] for r in records), "records": len(records)}


def micro_batch_choices(records, sigma, key="predicted_s"):
    """Per (preset, d, p, t) swept at several micro-batch sizes: the size the planner predicts
    fastest (predictions `key`) against the measured fastest, and whether its measured time is
    within noise."""
    out = []
    for grid in sorted({(r["preset"], r["dp"], r["pp"], r["tp"]) for r in records}):
        mine = [r for r in records if (r["preset"], r["dp"], r["pp"], r["tp"]) == grid]
        if len(mine) < 2:
            continue
        best = min(mine, key=lambda r: r["measured_s"])
        chosen = min(mine, key=lambda r: r[key])
        out.append({"preset": grid[0], "grid": best["grid"], "sizes": sorted(r["micro_batch"] for r in mine),
                    "measured_best_micro_batch": best["micro_batch"], "measured_best_s": best["measured_s"],
                    "chosen_micro_batch": chosen["micro_batch"], "chosen_measured_s": chosen["measured_s"],
                    "within_noise": within_noise(chosen, best, sigma)})
    return out


def noise_of(grid, records):
    """The sweep's own repeatability: each record's spread over its repeats; one measurement's
    relative standard deviation, from repeat 1 against repeat 2 of every record (robust: the
    median of |a - b| / mean is 0.954 sigma for normal noise, whatever a few outliers do); and
    the rank correlations of repeat 1 against repeat 2 (the ceiling of any prediction's: a
    model cannot be expected to rank the runs better than the machine ranks them twice)."""
    spreads = sorted(r["noise"] for r in records)
    twice = [r for r in records if len(r["measured_repeats_s"]) >= 2]
    first, second = [r["measured_repeats_s"][0] for r in twice], [r["measured_repeats_s"][1] for r in twice]
    pairs = sorted(abs(a - b) / ((a + b) / 2) for a, b in zip(first, second))
    return {"repeats": grid["settings"].get("repeats", 1), "median_relative": spreads[len(spreads) // 2],
            "max_relative": spreads[-1], "records_repeated": len(twice),
            "sigma_relative": pairs[len(pairs) // 2] / 0.954 if pairs else 0.0,
            "spearman_between_repeats": spearman(first, second) if len(twice) >= 2 else None,
            "kendall_between_repeats": kendall_tau(first, second) if len(twice) >= 2 else None}


def checks(acc, noise, choices):
    rho, ceiling = acc["spearman"], noise["spearman_between_repeats"]
    goal = SPEARMAN_GOAL if ceiling is None else min(SPEARMAN_GOAL, ceiling)
    good = [c for c in choices if c["within_noise"]]
    return [{"name": "mean_relative_error", "goal": f"mean |predicted - measured| / measured <= {ERROR_GOAL:.0%}",
             "value": f"{100 * acc['mean_abs_relative_error']:.1f} % over {acc['records']} records (largest "
                      f"{100 * acc['max_abs_relative_error']:.0f} %)",
             "status": "PASS" if acc["mean_abs_relative_error"] <= ERROR_GOAL else "MISS"},
            {"name": "spearman", "goal": f"Spearman >= {SPEARMAN_GOAL} (AMP's own), or the noise ceiling if lower "
                                         f"(repeat 1 against repeat 2: {'n/a' if ceiling is None else f'{ceiling:.3f}'})",
             "value": "n/a" if rho is None else f"{rho:.3f} (Kendall {acc['kendall']:.3f}) over {acc['records']} records",
             "status": "PASS" if rho is not None and rho >= goal else "MISS"},
            {"name": "measured_best", "goal": "the predicted best is the measured best, or within noise of it",
             "value": f"predicted best {acc['predicted_best']} ({ms(acc['predicted_best_measured_s'])} measured); "
                      f"measured best {acc['measured_best']} ({ms(acc['measured_best_s'])}), predicted "
                      f"#{acc['measured_best_predicted_rank']}",
             "status": "PASS" if acc["predicted_best_within_noise"] else "MISS"},
            {"name": "micro_batch_choice", "goal": "for every grid, the micro-batch size predicted fastest measures "
                                                   "within noise of the measured fastest",
             "value": f"{len(good)} of {len(choices)} grids",
             "status": "PASS" if choices and len(good) == len(choices) else "MISS"}]


# ---- the example clusters ---------------------------------------------------------------------

def plan_cluster(args, name, path, extra, seq_len):
    out = os.path.join(args.out, "clusters", name + ".json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    text = run([os.path.join(args.build, "plan"), "--cluster", path] + EXAMPLE + extra +
               ["--seq-len", str(seq_len), "--json", out], args.timeout, TARGETS)
    found = re.search(r": (\d+) (strategies|grids)", text)  # plan's count of what fits
    j = json.load(open(out))
    devices = sum(n["devices"] for n in j["cluster"]["nodes"])
    model = "GPT 2.7B (32 x 2560, 32 heads)" if extra else "GPT-2 124M (12 x 768)"
    return {"name": name, "file": out, "cluster": j["cluster"]["name"], "devices": devices, "model": model,
            "batch": j["batch"], "seq_len": j["seq_len"], "found": int(found.group(1)) if found else None,
            "strategies": j["strategies"]}


def example_clusters(args):
    files = sorted(glob.glob(os.path.join(args.clusters, "*.json")))
    if not files:
        sys.exit(f"error: no *.json in {args.clusters} (--clusters): give the directory of the example clusters, "
                 "starter/planner/clusters")
    out = []
    for path in files:
        name = os.path.splitext(os.path.basename(path))[0]
        out.append(plan_cluster(args, name, path, [], 1024))
        if name == "a100_4x8":
            out.append(plan_cluster(args, name + "_2.7b", path, GPT_2_7B, 2048))
    return out


# ---- the report -------------------------------------------------------------------------------

def accuracy_line(name, a):
    rho = "n/a" if a["spearman"] is None else f"{a['spearman']:.3f}"
    tau = "n/a" if a.get("kendall") is None else f"{a['kendall']:.3f}"
    return (f"| {name} | {a['records']} | {rho} | {tau} | #{a['measured_best_predicted_rank']} "
            f"| {100 * a['mean_abs_relative_error']:.1f} % |")


def markdown(s):
    st, g, m, acc = s["settings"], s["settings"]["grid_settings"], s["machine"], s["accuracy"]
    worlds = ", ".join(str(w) for w in g.get("world_sizes", [g["world_size"]]))
    chunks = ", ".join(str(c) for c in g.get("chunks_list", [g["chunks"]]))
    out = [f"the sweep: {s['settings']['grid']}/summary.json ({', '.join(g['presets'])}, W = {worlds}, batch "
           f"{g['batch_size']} x {g['seq_len']} tokens, {g['schedule']} with m = {chunks} micro-batches per replica, "
           f"{g['threads']} thread(s) per process, {g.get('repeats', 1)} measurement(s) each); `{st['command']}`", "",
           f"machine: {m['note']}", "",
           *table_head("| W (devices) | FLOP/s per device | shared by the node | memory per device | link bandwidth "
                       "| link latency | link fit rms / max |", "r" * 7)]
    for d in s["descriptions"]:
        fit = d["link_fit"]
        err = "(not used)" if fit is None else f"{100 * fit['rms_relative']:.0f} % / {100 * fit['max_relative']:.0f} %"
        shared = "-" if not d["shared_flops"] else f"{d['shared_flops'] / 1e9:.1f} G"
        out.append(f"| {d['devices']} | {d['flops'] / 1e9:.1f} G | {shared} "
                   f"| {d['memory_bytes'] / 2**30:.1f} GiB | {d['link']['bandwidth'] / 1e9:.2f} GB/s | "
                   f"{1e6 * d['link']['latency']:.1f} us | {err} |")
    out += ["", *table_head("| profiled: W | preset | profile | processes computing at once (measured) |", "rllr")]
    for d in s["profiled_descriptions"]:
        c = d["concurrency"]
        at_once = "-" if c is None else (f"{c['concurrency']:.2f} (a block at micro-batch {c['micro_batch']}: "
                                         f"{ms(c['alone_s'])} alone, {ms(sum(c['together_s']) / len(c['together_s']))} "
                                         f"each with {d['devices']} at once)")
        out.append(f"| {d['devices']} | {d['preset']} | {d['profile']} | {at_once} |")
    out += ["", *table_head("| run | measured | repeats' spread | predicted | error | counting FLOPs | error "
                            "| measured rank | predicted rank | compute | tensor | p2p | pipeline | optimizer | data |",
                            "l" + "r" * 14)]
    for r in s["records"]:
        t = r["terms"]
        out.append(f"| {r['label']}{' (reference)' if r['reference'] else ''} | {ms(r['measured_s'])} "
                   f"| {100 * r['noise']:.0f} % | {ms(r['predicted_s'])} | {100 * r['relative_error']:.0f} % "
                   f"| {ms(r['predicted_flops_s'])} | {100 * r['relative_error_flops']:.0f} % "
                   f"| {r['measured_rank']:g} | {r['predicted_rank']:g} | {ms(t['compute_s'])} | {ms(t['tensor_s'])} "
                   f"| {ms(t['p2p_s'])} | {ms(t['pipeline_s'])} | {ms(t['optimizer_s'])} | {ms(t['data_s'])} |")
    n = s["noise"]
    ceiling = "n/a" if n["spearman_between_repeats"] is None else (
        f"Spearman {n['spearman_between_repeats']:.3f}, Kendall {n['kendall_between_repeats']:.3f}")
    amp = s["amp_reference"]
    out += ["", "measured: the sweep's step time (the slowest rank's mean, averaged over the repeats); repeats' "
                "spread: (slowest - fastest) / mean; predicted: plan's total (pipeline + optimizer + data) with the "
                "profile; counting FLOPs: the same without it; compute, tensor (all-reduces), p2p (sends): the "
                "slowest stage's per micro-batch; ranks: 1 = fastest.", "",
            f"noise: median spread {100 * n['median_relative']:.1f} %, largest {100 * n['max_relative']:.0f} %; one "
            f"measurement's standard deviation {100 * n['sigma_relative']:.1f} % (within noise: a difference of two "
            f"runs' means up to twice its standard error); repeat 1 against repeat 2 over {n['records_repeated']} "
            f"runs: {ceiling} (the noise ceiling)", "",
            *table_head("| predictions | runs | Spearman | Kendall | measured best predicted | mean error |", "lrrrrr"),
            accuracy_line("profiled (plan with the profile)", acc),
            accuracy_line("counting FLOPs (no profile)", s["accuracy_flops"])]
    for key, name in (("homogeneous_cluster", "AMP, homogeneous cluster"), ("heterogeneous_model", "AMP, heterogeneous model"),
                      ("heterogeneous_cluster", "AMP, heterogeneous cluster")):
        out.append(accuracy_line(name, amp[key]))
    out += ["", f"AMP: {amp['source']}.", "",
            f"the measured best: {acc['measured_best']} ({ms(acc['measured_best_s'])}); the predicted best: "
            f"{acc['predicted_best']} ({ms(acc['predicted_best_measured_s'])} measured)", ""]
    if s["micro_batch_choices"]:
        out += table_head("| grid | sizes swept | measured fastest | planner's choice | its measured time | within noise |",
                          "llrrrl")
        for c in s["micro_batch_choices"]:
            out.append(f"| {c['preset']} {c['grid']} | {', '.join(str(x) for x in c['sizes'])} "
                       f"| {c['measured_best_micro_batch']} ({ms(c['measured_best_s'])}) | {c['chosen_micro_batch']} "
                       f"| {ms(c['chosen_measured_s'])} | {'yes' if c['within_noise'] else 'no'} |")
        good = sum(c["within_noise"] for c in s["micro_batch_choices"])
        out += [f"the micro-batch size chosen within noise of the measured best: {good} of "
                f"{len(s['micro_batch_choices'])} grids with the profile, "
                f"{s['accuracy_flops'].get('micro_batch_within_noise', 'n/a')} counting FLOPs (there every size costs the "
                "same per token: only the bubble and the messages tell the sizes apart)", ""]
    for c in s["clusters"]:
        out += [f"{c['name']}: {c['cluster']}, {c['model']}, batch {c['batch']} x {c['seq_len']} tokens, "
                f"{c['found']} that fit, the best {len(c['strategies'])}:", "",
                *table_head("| # | strategy | step | pipeline | data | bubble | memory / rank |", "rl" + "r" * 5)]
        for k, x in enumerate(c["strategies"]):
            out.append(f"| {k + 1} | {x['label']} | {ms(x['total_s'])} | {ms(x['pipeline_s'])} | {ms(x['data_s'])} "
                       f"| {100 * x['bubble']:.1f} % | {x['memory_bytes']['total'] / 2**30:.2f} GiB |")
        out.append("")
    out += checks_lines(s["checks"])
    return "\n".join(out)


# ---- the figures ------------------------------------------------------------------------------

GRID_COLOUR, REFERENCE_COLOUR, BEST_COLOUR = "#4C72B0", "#999999", "#C44E52"


def ms(seconds):
    return f"{seconds:.2f} s" if seconds >= 1 else f"{1e3 * seconds:.1f} ms" if seconds < 0.1 else f"{1e3 * seconds:.0f} ms"


WORLD_COLOURS = {1: "#999999", 2: "#55A868", 4: "#4C72B0", 8: "#8172B2"}
FLOPS_COLOUR = "#DD8452"


def world_colour(w):
    return WORLD_COLOURS.get(w, "#C44E52")


def accuracy_figure(s):
    """planner_accuracy.png: predicted against measured step time, one point per run with the
    profile (coloured by W) and one counting FLOPs, the measured repeats' range as a bar, y = x
    and +-15 %; (width, height, script)."""
    points = []
    for at, r in s.records("records"):
        repeats = s.field(r, "measured_repeats_s", at, "list")
        world = s.field(r, "dp", at, "integer") * s.field(r, "pp", at, "integer") * s.field(r, "tp", at, "integer")
        points.append((world, 1e3 * s.field(r, "measured_s", at, "number"), 1e3 * min(repeats), 1e3 * max(repeats),
                       1e3 * s.field(r, "predicted_s", at, "number"), 1e3 * s.field(r, "predicted_flops_s", at, "number")))
    acc, flops, noise = (s.field(s.data, k, s.path) for k in ("accuracy", "accuracy_flops", "noise"))
    at = s.path + ": accuracy"

    def line(name, a):
        rho, tau = s.field(a, "spearman", at, "number or null"), s.field(a, "kendall", at, "number or null")
        return (f"{name}: Spearman {'n/a' if rho is None else format(rho, '.3f')}, Kendall "
                f"{'n/a' if tau is None else format(tau, '.3f')}, measured best predicted "
                f"#{s.field(a, 'measured_best_predicted_rank', at, 'integer')}, mean error "
                f"{100 * s.field(a, 'mean_abs_relative_error', at, 'number'):.1f} %")
    ceiling = s.field(noise, "spearman_between_repeats", s.path + ": noise", "number or null")
    heading = (f"The planner against {len(points)} measured runs of this machine\n{line('with the profile', acc)}\n"
               f"{line('counting FLOPs', flops)}\nnoise ceiling (repeat 1 against repeat 2): Spearman "
               f"{'n/a' if ceiling is None else format(ceiling, '.3f')}")
    # Log axes: the runs span a factor of ten or more, and a ratio (the error) is then a distance.
    top = 1.25 * max(max(p[3], p[4], p[5]) for p in points)
    bottom = 0.8 * min(min(p[2], p[4], p[5]) for p in points)
    worlds = sorted({p[0] for p in points})
    script = (f"set title {quote(heading)}\n"
              'set border 3\nset grid lc rgb "#DDDDDD"\nset xtics nomirror\nset ytics nomirror\n'
              "set size ratio -1\nset key top left\nset logscale xy\n"
              'set xlabel "measured step time (ms, log scale): the slowest rank\'s mean; bar: the repeats\' range"\n'
              'set ylabel "predicted step time (ms, log scale): plan\'s pipeline + optimizer + data terms"\n'
              f"set xrange [{bottom!r}:{top!r}]\nset yrange [{bottom!r}:{top!r}]\n"
              'plot x with lines dt 2 lw 1.5 lc rgb "#555555" title "y = x (predicted = measured)", '
              '1.15 * x with lines dt 3 lc rgb "#AAAAAA" title "+-15 %", 0.85 * x with lines dt 3 lc rgb "#AAAAAA" '
              "notitle, '-' using 2:6:3:4 with xerrorbars pt 6 ps 1.3 lc rgb " + quote(FLOPS_COLOUR) +
              ' title "counting FLOPs (no profile)"' +
              "".join(f", '-' using 2:5:3:4 with xerrorbars pt 7 ps 1.5 lc rgb {quote(world_colour(w))} "
                      f"title {quote(f'with the profile, W = {w}')}" for w in worlds) + "\n" +
              inline(points) + "".join(inline([p for p in points if p[0] == w]) for w in worlds))
    return 1100, 1050, script


def micro_batch_figure(s):
    """planner_micro_batch.png: one panel per grid swept at several micro-batch sizes: the
    measured step time (points, the repeats' range) and the predictions (lines) against the
    micro-batch size; (width, height, script)."""
    grids = {}
    for at, r in s.records("records"):
        key = (s.field(r, "preset", at, "text"), s.field(r, "dp", at, "integer"), s.field(r, "pp", at, "integer"),
               s.field(r, "tp", at, "integer"))
        repeats = [1e3 * v for v in s.field(r, "measured_repeats_s", at, "list")]
        grids.setdefault(key, []).append((s.field(r, "micro_batch", at, "integer"),
                                          1e3 * s.field(r, "measured_s", at, "number"), min(repeats), max(repeats),
                                          1e3 * s.field(r, "predicted_s", at, "number"),
                                          1e3 * s.field(r, "predicted_flops_s", at, "number")))
    panels = [(k, sorted(v)) for k, v in sorted(grids.items(), key=lambda kv: (kv[0][1] * kv[0][2] * kv[0][3], kv[0]))
              if len(v) >= 2]
    if not panels:  # a sweep of one micro-batch size: one panel of all runs, nothing to compare
        panels = [(k, sorted(v)) for k, v in sorted(grids.items())]
    cols = min(4, len(panels))
    rows = (len(panels) + cols - 1) // cols
    script = ("set multiplot layout " + f"{rows},{cols} title " +
              quote("Step time against micro-batch size (sequences), per grid: measured (points, the repeats' range) "
                    "and predicted (lines)\nthe global batch is fixed, so a smaller micro-batch means more of them: "
                    "less bubble, but each runs slower per token") +
              '\nset border 3\nset grid lc rgb "#DDDDDD"\nset xtics nomirror\nset ytics nomirror\n'
              "set logscale x 2\nset key top right font \",9\"\nset xlabel \"micro-batch size\"\n"
              "set ylabel \"step time (ms)\"\n")
    for (preset, d, p, t), pts in panels:
        sizes = [x[0] for x in pts]
        top = 1.2 * max(max(x[3], x[4], x[5]) for x in pts)
        script += (f"set title {quote(f'{preset} d={d} p={p} t={t}')}\n"
                   f"set xrange [{min(sizes) / 1.5!r}:{max(sizes) * 1.5!r}]\nset yrange [0:{top!r}]\n" +
                   tics("x", [(x, str(x)) for x in sizes], "nomirror") +
                   "plot '-' using 1:2:3:4 with yerrorbars pt 7 ps 1.2 lc rgb \"#333333\" title \"measured\", "
                   f"'-' using 1:5 with linespoints lw 2 pt 5 lc rgb {quote(world_colour(d * p * t))} "
                   "title \"with the profile\", '-' using 1:6 with linespoints dt 2 pt 4 lc rgb " +
                   quote(FLOPS_COLOUR) + ' title "counting FLOPs"\n' + inline(pts) * 3)
    return 420 * cols, 80 + 340 * rows, script + "unset multiplot\n"


def clusters_figure(s):
    """planner_clusters.png: each example cluster's best strategies as bars of predicted step
    time, the pipeline term then the data-parallel all-reduce; (width, height, script)."""
    panels = []
    for at, c in s.records("clusters"):
        title = (f"{s.field(c, 'name', at, 'text')}: {s.field(c, 'cluster', at, 'text')}\n"
                 f"{s.field(c, 'model', at, 'text')}, "
                 f"batch {s.field(c, 'batch', at, 'integer')} x {s.field(c, 'seq_len', at, 'integer')} tokens")
        bars = [(s.field(x, "label", f"{at}.strategies[{k}]", "text"),
                 *(s.field(x, key, f"{at}.strategies[{k}]", "number") for key in ("pipeline_s", "data_s", "total_s")))
                for k, x in enumerate(s.field(c, "strategies", at, "list"))]
        panels.append((title, bars))
    cols = min(len(panels), 2)
    rows = (len(panels) + cols - 1) // cols
    script = ("set multiplot layout " + f"{rows},{cols} title " +
              quote("The planner's best strategies for the example clusters (starter/planner/clusters/), fastest on "
                    "top\nbar: the predicted step time, the pipeline term and the data-parallel all-reduce after it") +
              '\nset border 3\nset grid xtics lc rgb "#DDDDDD"\nset xtics nomirror\n'
              'set style fill solid 0.85 border rgb "#333333"\nset key below horizontal samplen 2\nset tmargin 4\n'
              "set lmargin 40\n")
    for title, bars in panels:
        n, top = len(bars), max(b[3] for b in bars)
        unit = 1.0 if top >= 1 else 1e3
        script += (f"set title {quote(title)}\n"
                   f'set xlabel "predicted step time ({"s" if top >= 1 else "ms"})"\n'
                   f"set xrange [0:{1.3 * unit * top if top > 0 else 1.0!r}]\nset yrange [-0.7:{n - 0.3!r}]\n"
                   "unset label\n" + tics("y", [(n - 1 - i, f"{i + 1}. {b[0]}") for i, b in enumerate(bars)]))
        pipeline, data = [], []  # x y xlow xhigh ylow yhigh
        for i, (_, pipeline_s, data_s, total_s) in enumerate(bars):
            y, x0, x1 = n - 1 - i, unit * pipeline_s, unit * (pipeline_s + data_s)
            pipeline.append((x0 / 2, y, 0, x0, y - 0.35, y + 0.35))
            data.append(((x0 + x1) / 2, y, x0, x1, y - 0.35, y + 0.35))
            script += f"set label {i + 1} {quote(ms(total_s))} at {unit * total_s!r},{y!r} left offset 0.6,0 front\n"
        script += ("plot '-' using 1:2:3:4:5:6 with boxxyerror fc rgb \"#4C72B0\" title \"pipeline ((m - 1) max T "
                   "+ sum T)\", '-' using 1:2:3:4:5:6 with boxxyerror fc rgb \"#DD8452\" title \"data-parallel "
                   "all-reduce\"\n" + inline(pipeline) + inline(data))
    tallest = max(len(bars) for _, bars in panels)
    return 1000 * cols, 110 + rows * (200 + 45 * tallest), script + "unset multiplot\n"


# planner_accuracy.png, planner_micro_batch.png and planner_clusters.png from runs_dir/summary.json, all read
# before any is drawn.
draw = summary_figures("bench/planner.py", [("planner_accuracy.png", accuracy_figure),
                                            ("planner_micro_batch.png", micro_batch_figure),
                                            ("planner_clusters.png", clusters_figure)])


def main(argv=None):
    args = parse_args(argv)
    if args.redraw:
        return draw_figures(args, draw)
    if args.iters < 1 or args.warmup < 1:
        sys.exit("error: --iters and --warmup must be at least 1")
    grid = read_grid(args.grid)
    settings = grid["settings"]
    threads = settings["threads"]
    os.makedirs(args.out, exist_ok=True)
    cores, memory = os.cpu_count() or 1, physical_memory()
    gemm = measure_gemm_together(args, threads, 1)[0]  # one process alone
    together = measure_gemm_together(args, threads, max(1, cores // threads))
    worlds = sorted({r["dp"] * r["pp"] * r["tp"] for r in grid["records"]})
    links = {w: measure_link(args, w, threads) for w in worlds if w > 1}
    # One device never communicates; its link is any positive one (the largest W's, if measured).
    fallback = links[max(links)] if links else ({"bandwidth": 1e9, "latency": 1e-6}, None)
    descriptions = {w: describe(args, w, gemm, together, threads, memory, *(links.get(w) or (fallback[0], None)))
                    for w in worlds}
    presets = sorted({r["preset"] for r in grid["records"]})
    profiles = {p: profile_layers(args, p, grid["records"], settings) for p in presets}
    concurrency = {(p, w): measure_concurrency(args, p, grid["records"], settings, w) for p in presets for w in worlds
                   if w > 1}
    profiled = {(p, w): describe_profiled(args, w, p, gemm, threads, memory, descriptions[w]["link"], profiles[p],
                                          concurrency.get((p, w)))
                for p in presets for w in worlds}
    records = [predict(args, r, settings, profiled[(r["preset"], r["dp"] * r["pp"] * r["tp"])],
                       descriptions[r["dp"] * r["pp"] * r["tp"]]) for r in grid["records"]]
    noise = noise_of(grid, records)
    sigma = noise["sigma_relative"]
    acc, acc_flops = accuracy(records, "predicted_s", sigma), accuracy(records, "predicted_flops_s", sigma)
    for r, m, p in zip(records, ranks([r["measured_s"] for r in records]), ranks([r["predicted_s"] for r in records])):
        r["measured_rank"], r["predicted_rank"] = m, p
    choices = micro_batch_choices(records, sigma)
    acc_flops["micro_batch_within_noise"] = sum(c["within_noise"] for c in micro_batch_choices(records, sigma,
                                                                                                "predicted_flops_s"))
    note = (f"{cores} cores, {memory / 2**30:.1f} GiB; GEMM {gemm:.1f} GFLOP/s for one process alone "
            f"({threads} thread(s)), {sum(together) / len(together):.1f} each with {len(together)} at once "
            f"({sum(together):.1f} in all). Profiled: each layer's measured time (profile_layers, one process), "
            f"and a node of W processes computes as `concurrency` of them at once (measured: W copies of the "
            f"profile at once against one). Counting FLOPs (the planner without a profile): a device of W > 1 "
            f"computes at the GEMM rate with every core busy, and when the W processes need more cores than there "
            f"are, the node gives at most the sum (shared_flops). Memory: the RAM / W; the link: Gloo's "
            f"all-reduce among W processes on this machine")
    summary = {"settings": {"grid": args.grid, "grid_settings": settings, "min_bytes": args.min_bytes,
                            "max_bytes": args.max_bytes, "iters": args.iters, "warmup": args.warmup,
                            "profile_repeats": args.profile_repeats, "command": command_line(argv)},
               "machine": {"cores": cores, "memory_bytes": memory, "gemm_gflops": gemm,
                           "gemm_gflops_together": together, "threads": threads,
                           "note": note},
               "descriptions": [descriptions[w] for w in worlds],
               "profiled_descriptions": [profiled[k] for k in sorted(profiled)],
               "records": records, "noise": noise, "accuracy": acc, "accuracy_flops": acc_flops,
               "micro_batch_choices": choices, "amp_reference": AMP_REFERENCE,
               "clusters": example_clusters(args)}
    summary["checks"] = checks(acc, noise, choices)
    write_summary(args.out, summary, markdown)
    draw_figures(args, draw)


if __name__ == "__main__":
    main()
