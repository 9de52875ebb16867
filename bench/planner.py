#!/usr/bin/env python3
"""The planner judged against a measured sweep (Problem 8): AMP's question, on this machine.

    python3 bench/grid.py && python3 bench/planner.py      # the sweep (about a minute), then this: seconds
    python3 bench/planner.py --grid runs/grid --out runs/planner --max-bytes 64K --iters 3 --no-figures

AMP (NeurIPS 2022) asks of a cost model not exact times but the right order: does it rank
the strategies as the machine does? This script takes Problem 6's sweep (--grid, the
summary.json of bench/grid.py: every (d, p, t) of W ranks and the one-process run, each
with its measured step time) and

  1. describes THIS machine the way the planner reads a cluster (planner/cluster.h), from
     measurements the kit already makes:
       - the device's FLOP/s: build/bench --gemm (the GEMM rate of a 512 x 512 matmul with
         the sweep's --threads), once alone and once as many copies at once as there are
         cores: a process computes at the second rate while the others compute too. When
         the sweep's W processes need more cores than os.cpu_count() (4 one-thread ranks on
         2 cores), the node also gets shared_flops = the copies' sum: one process may run at
         the full rate while its neighbours wait, but the node never does more than all its
         cores (planner/cluster.h);
       - its memory: the physical RAM / W;
       - the link: build/run_collectives at W ranks (Gloo's built-in all-reduce, --min-bytes
         to --max-bytes, --iters timed after --warmup), fitted to AMP's ring model
         time = 2(n-1) latency + 2(n-1)/n bytes / bandwidth by least squares of the relative
         error (each size counts alike; both clamped to positive values). The ranks share
         the cores as in the sweep, so the link holds that waiting too.
     One node of W such devices (inter_node = intra_node) in OUT/this_machine_wW.json; the
     one-process reference gets its own, OUT/this_machine_w1.json (one device, the whole
     GEMM rate; its link is never used);
  2. predicts every record of the sweep with build/plan on the description of its world
     size: the same model (preset, n_layer, n_embd, n_head, vocabulary), global batch,
     sequence length, schedule and micro-batches per replica (--micro-batches: run_3d's
     --chunks), only that grid (--grids "d,p,t"), the layers split as run_3d splits them
     (--even); OUT/predictions/<preset>/dDpPtT.json holds plan's answer with its terms;
  3. compares: the Spearman rank correlation of predicted and measured step times over all
     records (average ranks for ties), the predicted rank of the measured best, and the
     mean absolute relative error of the times;
  4. plans the example clusters (starter/planner/clusters/*.json): GPT-2 (124M), batch 512 x
     1024 tokens, schedules 1f1b, gpipe and interleaved, ZeRO 0 and 1, the best 5 each
     (OUT/clusters/<name>.json), and a 2.7B GPT (32 layers, 2560 wide, 32 heads, 2048
     tokens) on a100_4x8 (OUT/clusters/a100_4x8_2.7b.json).

Writes OUT/summary.json, OUT/summary.md (also printed) and, with gnuplot (unless --no-figures;
--redraw: only draw them again from OUT/summary.json, --figures DIR: into DIR),
OUT/figures/planner_accuracy.png (predicted against measured, one point per grid, the y = x
line) and planner_clusters.png (the best strategies of each example cluster). summary.json:
  settings      grid (the sweep's directory), grid_settings (its settings), collective sizes,
                iters, warmup, command
  machine       cores, memory_bytes, gemm_gflops (one process alone, --threads),
                gemm_gflops_together (each of one copy per core run at once), threads, note
  descriptions  one per world size W: file, devices, flops (the GEMM rate with every core busy;
                W = 1: alone), shared_flops (null unless the W processes oversubscribe the cores),
                memory_bytes, link {bandwidth, latency}, link_fit {sizes, rms_relative,
                max_relative, file} (null for W = 1)
  records       one per record of the sweep, in its order: preset, dp, pp, tp, label, reference,
                measured_s (the sweep's step_time_s), predicted_s (plan's total_s), relative_error,
                measured_rank, predicted_rank (1: fastest), fits, terms {compute_s, tensor_s, p2p_s,
                pipeline_s, shared_s (the shared-node bound), data_s, bubble} (plan's: the slowest stage's per micro-batch, then
                the step's), measured_comm_s (the sweep's comm_s_per_step), micro_batches,
                layers_per_stage, prediction (the file)
  accuracy      spearman, measured_best, measured_best_predicted_rank, measured_best_in_top3,
                predicted_best, mean_abs_relative_error, records
  amp_reference the paper's own numbers for the same question: the Spearman of AMP's cached
                trials (MccRee17/AMP src/results/*_results.txt, predicted against measured,
                out-of-memory runs left out): homogeneous cluster 0.935 (its measured best
                ranked 3rd), heterogeneous model 0.853, heterogeneous cluster 0.394
  clusters      one per example: name, file, cluster (its name), model, batch, seq_len, devices,
                found (plan's count of what fits), strategies (plan's best 5, as plan --json writes them)
  checks        [{name, goal, value, status: PASS | MISS}]: spearman (at least 0.9) and
                measured_best_in_top3 (the measured fastest among the predicted best three)
Python 3 standard library only.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

from bench_process import checks_lines, command_line, last_json_line, run, table_head, write_summary
from gnuplot_png import draw_figures, figure_options, inline, legend, quote, rgb, summary_figures, tics

TARGETS = "plan bench run_collectives"  # what the script needs built
SPEARMAN_GOAL = 0.9
TOP = 3
CLUSTERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "starter", "planner", "clusters")
# The example clusters' workload: GPT-2 (124M) as AMP's and Megatron's papers train it.
EXAMPLE = ["--model", "gpt2", "--vocab-size", "50257", "--batch", "512", "--schedules", "1f1b,gpipe,interleaved",
           "--zero", "0,1", "--top", "5"]
GPT_2_7B = ["--n-layer", "32", "--n-embd", "2560", "--n-head", "32"]
AMP_REFERENCE = {
    "source": "MccRee17/AMP src/results/*_results.txt: AMP's cached trials, predicted against measured step time, "
              "out-of-memory runs left out",
    "homogeneous_cluster": {"spearman": 0.935, "measured_best_predicted_rank": 3},
    "heterogeneous_model": {"spearman": 0.853},
    "heterogeneous_cluster": {"spearman": 0.394},
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", default="runs/grid", help="bench/grid.py's output directory (its summary.json)")
    ap.add_argument("--build", default="build", help="directory holding plan, bench and run_collectives")
    ap.add_argument("--clusters", default=os.path.relpath(CLUSTERS), help="example cluster JSON files (*.json)")
    ap.add_argument("--min-bytes", default="4K", help="smallest all-reduce timed for the link (run_collectives)")
    ap.add_argument("--max-bytes", default="4M", help="largest all-reduce timed for the link")
    ap.add_argument("--iters", type=int, default=10, help="timed all-reduces per size")
    ap.add_argument("--warmup", type=int, default=3, help="untimed all-reduces per size before them")
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed per command")
    ap.add_argument("--out", default="runs/planner")
    figure_options(ap)
    return ap.parse_args(argv)


# ---- the sweep --------------------------------------------------------------------------------

def read_grid(grid_dir):
    path = os.path.join(grid_dir, "summary.json")
    if not os.path.isfile(path):
        sys.exit(f"error: {path} does not exist: measure the sweep first (python3 bench/grid.py --out {grid_dir}), "
                 "then run this again")
    try:
        s = json.load(open(path))
        records, settings = s["records"], s["settings"]
        for k in ("batch_size", "chunks", "seq_len", "vocab_size", "schedule", "threads"):
            settings[k]
        for r in records:
            r["preset"], r["dp"], r["pp"], r["tp"], r["step_time_s"], r["n_layer"], r["n_embd"], r["n_head"]
    except (ValueError, KeyError, TypeError) as e:
        sys.exit(f"error: {path} is not bench/grid.py's summary.json ({type(e).__name__}: {e}): "
                 f"run python3 bench/grid.py --out {grid_dir} again")
    if not records:
        sys.exit(f"error: {path} holds no record: run python3 bench/grid.py --out {grid_dir} again")
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


def describe(args, world, gemm, together, threads, memory, link, link_fit):
    """The cluster JSON (planner/cluster.h) of one node of `world` devices of this machine: one
    process alone runs at `gemm`; with others on the other cores at `together` (their mean), and
    when the W processes need more cores than there are, the node gives at most what all cores
    give together (shared_flops: a waiting process hands its core to the busy ones)."""
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


# ---- predictions ------------------------------------------------------------------------------

def predict(args, record, settings, description):
    d, p, t = record["dp"], record["pp"], record["tp"]
    path = os.path.join(args.out, "predictions", record["preset"], f"d{d}p{p}t{t}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    run([os.path.join(args.build, "plan"), "--cluster", description["file"], "--model", record["preset"],
         "--n-layer", str(record["n_layer"]), "--n-embd", str(record["n_embd"]), "--n-head", str(record["n_head"]),
         "--vocab-size", str(settings["vocab_size"]), "--batch", str(settings["batch_size"]),
         "--seq-len", str(settings["seq_len"]), "--micro-batches", str(settings["chunks"]),
         "--schedules", settings["schedule"], "--recompute", "on" if settings.get("recompute") else "off",
         "--grids", f"{d},{p},{t}", "--even", "--keep-infeasible",
         "--top", "1", "--json", path], args.timeout, TARGETS)
    strategies = json.load(open(path))["strategies"]
    if not strategies:
        sys.exit(f"error: build/plan found no strategy for {record['label']} ({path}): does t = {t} divide the "
                 f"model's heads ({record['n_head']}) and p = {p} fit its {record['n_layer']} blocks?")
    c = strategies[0]
    return {"preset": record["preset"], "dp": d, "pp": p, "tp": t, "label": record["label"],
            "reference": record.get("reference", d * p * t == 1),
            "measured_s": record["step_time_s"], "predicted_s": c["total_s"],
            "relative_error": abs(c["total_s"] - record["step_time_s"]) / record["step_time_s"],
            "fits": c["fits"], "micro_batches": c["micro_batches"], "layers_per_stage": c["layers_per_stage"],
            "terms": {k: c[k] for k in ("compute_s", "tensor_s", "p2p_s", "pipeline_s", "shared_s", "data_s", "bubble")},
            "measured_comm_s": record.get("comm_s_per_step"), "prediction": path}


def ranks(values):
    """1-based ranks, smallest first, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs, ys):
    """Pearson's correlation of the ranks; None with fewer than 2 records or all tied."""
    if len(xs) < 2:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else None


def accuracy(records):
    measured = [r["measured_s"] for r in records]
    predicted = [r["predicted_s"] for r in records]
    for r, m, p in zip(records, ranks(measured), ranks(predicted)):
        r["measured_rank"], r["predicted_rank"] = m, p
    best = min(records, key=lambda r: r["measured_s"])
    # The measured best counts as in the top 3 when fewer than 3 records are predicted faster.
    place = 1 + sum(r["predicted_s"] < best["predicted_s"] for r in records)
    return {"spearman": spearman(predicted, measured), "measured_best": best["label"],
            "measured_best_predicted_rank": place, "measured_best_in_top3": place <= TOP,
            "predicted_best": min(records, key=lambda r: r["predicted_s"])["label"],
            "mean_abs_relative_error": sum(r["relative_error"] for r in records) / len(records),
            "records": len(records)}


def checks(acc):
    rho = acc["spearman"]
    return [{"name": "spearman", "goal": f"predicted and measured step times ranked alike: Spearman >= {SPEARMAN_GOAL}",
             "value": "n/a (fewer than 2 distinct records)" if rho is None else f"{rho:.3f} over {acc['records']} "
                                                                                 "records",
             "status": "PASS" if rho is not None and rho >= SPEARMAN_GOAL else "MISS"},
            {"name": "measured_best_in_top3", "goal": f"the measured fastest among the predicted best {TOP}",
             "value": f"{acc['measured_best']} predicted #{acc['measured_best_predicted_rank']}",
             "status": "PASS" if acc["measured_best_in_top3"] else "MISS"}]


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

def ms(s):
    return f"{1e3 * s:.1f} ms" if s < 1 else f"{s:.2f} s"


def markdown(s):
    st, g, m, acc = s["settings"], s["settings"]["grid_settings"], s["machine"], s["accuracy"]
    out = [f"the sweep: {s['settings']['grid']}/summary.json ({', '.join(g['presets'])}, W = {g['world_size']}, batch "
           f"{g['batch_size']} x {g['seq_len']} tokens, {g['schedule']} with {g['chunks']} micro-batches per replica, "
           f"{g['threads']} thread(s) per process); `{st['command']}`", "",
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
    out += ["", *table_head("| grid | measured | predicted | error | measured rank | predicted rank | compute | tensor "
                            "| p2p | pipeline | data | bubble |", "l" + "r" * 11)]
    for r in s["records"]:
        t = r["terms"]
        out.append(f"| {r['label']}{' (reference)' if r['reference'] else ''} | {ms(r['measured_s'])} "
                   f"| {ms(r['predicted_s'])} | {100 * r['relative_error']:.0f} % | {r['measured_rank']:g} "
                   f"| {r['predicted_rank']:g} | {ms(t['compute_s'])} | {ms(t['tensor_s'])} | {ms(t['p2p_s'])} "
                   f"| {ms(t['pipeline_s'])} | {ms(t['data_s'])} | {100 * t['bubble']:.0f} % |")
    rho = "n/a" if acc["spearman"] is None else f"{acc['spearman']:.3f}"
    amp = s["amp_reference"]
    out += ["", "measured: the sweep's step time (the slowest rank's mean); predicted: plan's total (pipeline + data); "
                "compute, tensor (all-reduces), p2p (sends): the slowest stage's per micro-batch; ranks: 1 = fastest.",
            "", f"Spearman {rho} over {acc['records']} records; the measured best, {acc['measured_best']}, is predicted "
                f"#{acc['measured_best_predicted_rank']} (predicted best: {acc['predicted_best']}); mean absolute "
                f"relative error {100 * acc['mean_abs_relative_error']:.0f} %.",
            f"AMP's own trials: homogeneous cluster {amp['homogeneous_cluster']['spearman']} (measured best predicted "
            f"#{amp['homogeneous_cluster']['measured_best_predicted_rank']}), heterogeneous model "
            f"{amp['heterogeneous_model']['spearman']}, heterogeneous cluster {amp['heterogeneous_cluster']['spearman']} "
            f"({amp['source']}).", ""]
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


def accuracy_figure(s):
    """planner_accuracy.png: predicted against measured step time, one point per record, y = x;
    (width, height, script)."""
    points = [(s.field(r, "label", at, "text"), s.field(r, "reference", at, "boolean"),
               s.field(r, "measured_s", at, "number"), s.field(r, "predicted_s", at, "number"))
              for at, r in s.records("records")]
    acc, machine = s.field(s.data, "accuracy", s.path), s.field(s.data, "machine", s.path)
    at, m_at = s.path + ": accuracy", s.path + ": machine"
    rho = s.field(acc, "spearman", at, "number or null")
    heading = (f"The planner against the measured sweep: Spearman {'n/a' if rho is None else format(rho, '.3f')} "
               f"over {len(points)} runs\nthe measured best ({s.field(acc, 'measured_best', at, 'text')}) predicted "
               f"#{s.field(acc, 'measured_best_predicted_rank', at, 'integer')}; mean |predicted - measured| / measured "
               f"{100 * s.field(acc, 'mean_abs_relative_error', at, 'number'):.0f} %\nthis machine: "
               f"{s.field(machine, 'cores', m_at, 'integer')} cores, "
               f"GEMM {s.field(machine, 'gemm_gflops', m_at, 'number'):.1f} "
               "GFLOP/s per process; W processes share the cores")
    top = max(1e3 * max(p[2], p[3]) for p in points)
    top = 1.15 * top if top > 0 else 1.0
    best = min(range(len(points)), key=lambda i: points[i][2])
    script = (f"set title {quote(heading)}\n"
              'set border 3\nset grid lc rgb "#DDDDDD"\nset xtics nomirror\nset ytics nomirror\n'
              "set size ratio -1\nset key top left\n"
              'set xlabel "measured step time (ms): the sweep\'s, the slowest rank\'s mean"\n'
              'set ylabel "predicted step time (ms): plan\'s pipeline + data terms"\n'
              f"set xrange [0:{top!r}]\nset yrange [0:{top!r}]\n")
    # Labels beside their points, in the order of height alternately below and above, and every
    # other pair on the left, so points close together push their labels apart.
    rows = []
    for k, i in enumerate(sorted(range(len(points)), key=lambda i: points[i][3])):
        label, reference, measured, predicted = points[i]
        x, y = 1e3 * measured, 1e3 * predicted
        side = " right offset -0.8," if (k // 2) % 2 == 1 else " left offset 0.8,"
        script += f"set label {k + 1} {quote(str(i + 1))} at {x!r},{y!r}{side}{'0.5' if k % 2 else '-0.5'} front\n"
        rows.append((x, y, rgb(BEST_COLOUR if i == best else REFERENCE_COLOUR if reference else GRID_COLOUR)))
    # The numbers beside the points, spelled out in the key (close points would hide long labels).
    keys = [f"{i + 1}: {label}{' (one process)' if reference else ''}, {ms(measured)} measured, "
            f"{ms(predicted)} predicted"
            for i, (label, reference, measured, predicted) in enumerate(points)]
    script += ('plot x with lines dt 2 lw 1.5 lc rgb "#555555" title "y = x (predicted = measured)", '
               "'-' using 1:2:3 with points pt 7 ps 2 lc rgb variable notitle" +
               legend("points pt 7 ps 2", [(GRID_COLOUR, "a grid of W ranks"),
                                           (REFERENCE_COLOUR, "one process (1,1,1)"),
                                           (BEST_COLOUR, "the measured best")]) +
               "".join(f", NaN with points pt -1 title {quote(k)}" for k in keys) + "\n" + inline(rows))
    return 1100, 980, script


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


# planner_accuracy.png and planner_clusters.png from runs_dir/summary.json, both read before either is drawn.
draw = summary_figures("bench/planner.py", [("planner_accuracy.png", accuracy_figure),
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
    records = [predict(args, r, settings, descriptions[r["dp"] * r["pp"] * r["tp"]]) for r in grid["records"]]
    acc = accuracy(records)
    note = (f"{cores} cores, {memory / 2**30:.1f} GiB; GEMM {gemm:.1f} GFLOP/s for one process alone "
            f"({threads} thread(s)), {sum(together) / len(together):.1f} each with {len(together)} at once "
            f"({sum(together):.1f} in all); a device of W > 1 computes at the latter, and when the W processes "
            f"need more cores than there are, the node gives at most the sum (shared_flops); its memory is "
            f"the RAM / W; the link Gloo's all-reduce among W processes on this machine")
    summary = {"settings": {"grid": args.grid, "grid_settings": settings, "min_bytes": args.min_bytes,
                            "max_bytes": args.max_bytes, "iters": args.iters, "warmup": args.warmup,
                            "command": command_line(argv)},
               "machine": {"cores": cores, "memory_bytes": memory, "gemm_gflops": gemm,
                           "gemm_gflops_together": together, "threads": threads,
                           "note": note},
               "descriptions": [descriptions[w] for w in worlds],
               "records": records, "accuracy": acc, "amp_reference": AMP_REFERENCE,
               "clusters": example_clusters(args)}
    summary["checks"] = checks(acc)
    write_summary(args.out, summary, markdown)
    draw_figures(args, draw)


if __name__ == "__main__":
    main()
