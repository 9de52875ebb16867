#!/usr/bin/env python3
"""Run the C++ bench and the Python baseline over presets and configurations, one run at a
time, and tabulate throughput, the C++/Python ratio, MFU, and data parallelism against
two independent processes.

    python3 bench/run_bench.py --presets tiny cpu-small --steps 20

For each preset: `<build>/bench --gemm --threads 1 --preset P` measures this machine's GEMM
rate for one thread (the MFU denominator, measured in the same sitting), then every
configuration runs as `<build>/bench --config C --preset P ...` and
`/usr/bin/python3 bench/baseline.py --config C --preset P ...` with the same flags.
Both print one JSON line. A failed run is recorded with its stderr's last lines and the
suite goes on. Needs no torch: any python3 will do.

Writes --out (JSON: every command, raw row and derived value) and the same name with .md.
"""
import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = ["single", "indep", "dp", "dp_bucketed", "mp", "pp"]
PRESETS = ["tiny", "cpu-small", "cpu-base"]
HERE = Path(__file__).resolve().parent
DP_GOAL = 0.9  # data parallel should reach 0.9 x two independent processes


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="directory holding the C++ `bench`")
    ap.add_argument("--presets", nargs="+", default=PRESETS, choices=PRESETS)
    ap.add_argument("--configs", nargs="+", default=CONFIGS, choices=CONFIGS)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--bucket-mb", type=float, default=1.0)
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter with torch for baseline.py")
    ap.add_argument("--no-python", action="store_true", help="run the C++ bench only")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs per configuration and language, C++ and Python alternating; the median counts")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds allowed per run")
    ap.add_argument("--out", default="runs/bench/bench.json")
    ap.add_argument("--no-overhead-probe", action="store_true",
                    help="skip the run where framework overhead dominates (tiny, batch 1, 32 tokens)")
    return ap.parse_args(argv)


def run_json(cmd, timeout):
    """Run cmd; return (the JSON object of its last JSON stdout line, None) or (None, error)."""
    print("$ " + shlex.join(cmd), flush=True)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except FileNotFoundError as e:
        return None, f"cannot run {cmd[0]}: {e}"
    except subprocess.TimeoutExpired as e:
        tail = (e.stderr or b"")
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return None, f"timed out after {timeout:.0f} s\n" + "\n".join(tail.strip().splitlines()[-10:])
    wall = time.monotonic() - t0
    stderr_tail = "\n".join(p.stderr.strip().splitlines()[-15:])
    if p.returncode != 0:
        return None, f"exit code {p.returncode}\n{stderr_tail}"
    for line in reversed(p.stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
                obj["_wall_s"] = round(wall, 2)
                return obj, None
            except json.JSONDecodeError:
                pass
    return None, f"no JSON line on stdout\nstdout: {p.stdout.strip()[-500:]}\nstderr: {stderr_tail}"


def median_run(runs):
    """The run with the median tokens/s (the lower middle one for an even count), or the first error."""
    ok = sorted((r for r, _ in runs if r), key=lambda r: r["tokens_per_s"])
    if ok:
        return ok[(len(ok) - 1) // 2], None
    return None, (runs[0][1] if runs else None)


def cores_used(row):
    """Cores a configuration keeps busy: processes x threads, or stages x threads."""
    n = row.get("stages", 1) if row.get("config") in ("mp", "pp") else row.get("ranks", 1)
    return min(n * row.get("threads", 1), os.cpu_count() or 1)


def mfu(row, gemm_gflops):
    if not row or not gemm_gflops or not row.get("tokens_per_s") or not row.get("flops_per_token"):
        return None
    return row["tokens_per_s"] * row["flops_per_token"] / (gemm_gflops * 1e9 * cores_used(row))


def ratio(a, b):
    return a / b if a is not None and b else None


def tps(row):
    return row.get("tokens_per_s") if row else None


def fmt(x, spec="{:.0f}", none="-"):
    return none if x is None else spec.format(x)


def table(preset, res):
    """The preset's results as Markdown (also readable as plain text)."""
    g = res["gemm"]
    lines = [f"### preset {preset}", "",
             f"GEMM rate, 1 thread: {fmt(g.get('gemm_gflops'), '{:.2f}')} GFLOP/s"
             + ("" if g.get("gemm_gflops") else f" (failed: {g.get('error', '').splitlines()[0]})"), "",
             "| config | C++ tok/s | Python tok/s | C++/Py | step ms (C++) | comm ms (C++) "
             "| peak RSS MB per rank (C++) | MFU C++ | MFU Py |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in res["rows"]:
        c, p, d = r.get("cpp"), r.get("python"), r["derived"]
        comm = c.get("comm_time_s") if c else None
        lines.append("| " + " | ".join([
            r["config"],
            fmt(tps(c), none="FAILED" if r.get("cpp_error") else "-"),
            fmt(tps(p), none="FAILED" if r.get("python_error") else "-"),
            fmt(d["cpp_over_python"], "{:.2f}"),
            fmt(c.get("step_time_s") * 1e3 if c and c.get("step_time_s") is not None else None, "{:.1f}"),
            fmt(comm * 1e3 if comm is not None else None, "{:.1f}"),
            " / ".join(f"{m:.0f}" for m in c.get("peak_rss_mb", [])) if c else "-",
            fmt(d["mfu_cpp"], "{:.1%}"),
            fmt(d["mfu_python"], "{:.1%}"),
        ]) + " |")
    dv = res["dp_vs_indep"]
    parts = []
    for impl in ("cpp", "python"):
        for cfg in ("dp", "dp_bucketed"):
            v = dv.get(impl, {}).get(cfg)
            if v is not None:
                parts.append(f"{impl} {cfg}/indep = {v:.2f}{' (goal met)' if v >= DP_GOAL else ''}")
    lines += ["", f"DP / indep (goal >= {DP_GOAL}): " + ("; ".join(parts) if parts else "n/a"), ""]
    errors = [(r["config"], impl, r[f"{impl}_error"]) for r in res["rows"] for impl in ("cpp", "python")
              if r.get(f"{impl}_error")]
    if errors:
        lines += ["Failed runs:", ""]
        for cfg, impl, err in errors:
            lines += [f"- {cfg} ({impl}):", "", "```", err, "```"]
        lines.append("")
    return "\n".join(lines)


# Where framework overhead dominates: the smallest preset, one row of 32 tokens, so each
# op's tensors are tiny and the time per op is mostly dispatch (Python adds its own).
OVERHEAD_FLAGS = ["--config", "single", "--preset", "tiny", "--batch-size", "1", "--seq-len", "32",
                  "--steps", "300", "--warmup", "30"]
OVERHEAD_GOAL = 1.2


def overhead_probe(args, bench, run):
    flags = OVERHEAD_FLAGS + ["--threads", str(args.threads)]
    cpp, cpp_err = run([bench] + flags)
    py, py_err = run([args.python, os.path.relpath(HERE / "baseline.py")] + flags)
    return {"flags": flags, "cpp": cpp, "cpp_error": cpp_err, "python": py, "python_error": py_err,
            "cpp_over_python": ratio(tps(cpp), tps(py))}


def overhead_line(o):
    r = o["cpp_over_python"]
    step = lambda row: fmt(row.get("step_time_s") * 1e3 if row else None, "{:.2f}")
    return (f"framework overhead (tiny, single, batch 1 x 32 tokens): C++ {fmt(tps(o['cpp']))} tok/s "
            f"({step(o['cpp'])} ms/step), Python {fmt(tps(o['python']))} tok/s ({step(o['python'])} ms/step), "
            f"C++/Py = {fmt(r, '{:.2f}')} (goal >= {OVERHEAD_GOAL}{', met' if r and r >= OVERHEAD_GOAL else ''})")


def main(argv=None):
    args = parse_args(argv)
    bench = str(Path(args.build) / "bench")
    shared = ["--steps", str(args.steps), "--warmup", str(args.warmup), "--batch-size", str(args.batch_size),
              "--threads", str(args.threads), "--chunks", str(args.chunks), "--bucket-mb", f"{args.bucket_mb:g}"]
    report = {"args": vars(args), "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                                              "processor": platform.processor()},
              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "commands": [], "presets": {}}

    def run(cmd):
        report["commands"].append(shlex.join(cmd))
        return run_json(cmd, args.timeout)

    for preset in args.presets:
        # The GEMM rate of one thread, measured now, at this preset's shapes if bench uses them.
        gemm, err = run([bench, "--gemm", "--threads", "1", "--preset", preset])
        if gemm is None:
            gemm, err2 = run([bench, "--gemm", "--threads", "1"])
            err = None if gemm else f"{err}\n(without --preset) {err2}"
        res = {"gemm": gemm if gemm else {"error": err}, "rows": []}
        gflops = gemm.get("gemm_gflops") if gemm else None
        for config in args.configs:
            flags = ["--config", config, "--preset", preset] + shared
            row = {"config": config}
            runs = {"cpp": [], "python": []}
            for _ in range(max(1, args.repeats)):  # alternate, so a slow spell hits both languages
                runs["cpp"].append(run([bench] + flags))
                if not args.no_python:
                    runs["python"].append(run([args.python, os.path.relpath(HERE / "baseline.py")] + flags))
            for impl in ("cpp", "python"):
                row[impl], row[f"{impl}_error"] = median_run(runs[impl])
                row[f"{impl}_all_tokens_per_s"] = [tps(r) for r, _ in runs[impl] if r]
            row["derived"] = {
                "cores_used_cpp": cores_used(row["cpp"]) if row["cpp"] else None,
                "mfu_cpp": mfu(row["cpp"], gflops),
                "mfu_python": mfu(row["python"], gflops),
                "cpp_over_python": ratio(tps(row["cpp"]), tps(row["python"])),
            }
            for impl in ("cpp", "python"):
                if row[f"{impl}_error"]:
                    print(f"  {impl} {config} failed: {row[f'{impl}_error'].splitlines()[0]}", flush=True)
            res["rows"].append(row)
        by = {r["config"]: r for r in res["rows"]}
        indep = by.get("indep", {})
        res["dp_vs_indep"] = {impl: {cfg: ratio(tps(by.get(cfg, {}).get(impl)), tps(indep.get(impl)))
                                     for cfg in ("dp", "dp_bucketed") if cfg in by}
                              for impl in ("cpp", "python")}
        report["presets"][preset] = res
        print("\n" + table(preset, res), flush=True)

    if not args.no_python and not args.no_overhead_probe:
        report["overhead"] = overhead_probe(args, bench, run)
        print("\n" + overhead_line(report["overhead"]), flush=True)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    md = ["# C++ vs Python benchmark", "",
          f"{report['started']}, {os.cpu_count()} cores, {report['machine']['platform']}. "
          f"{args.steps} timed steps after {args.warmup} warm-up, batch {args.batch_size} per rank, "
          f"{args.threads} thread(s), {args.chunks} chunks (pp), bucket {args.bucket_mb:g} MB (dp_bucketed); "
          f"median of {args.repeats} run(s) per cell, C++ and Python alternating.", "",
          "MFU = tokens/s x FLOPs/token / (1-thread GEMM GFLOP/s x cores used); cores used = ranks x threads "
          "(single, indep, dp, dp_bucketed) or stages x threads (mp, pp), at most the machine's cores.", ""]
    md += [table(p, r) for p, r in report["presets"].items()]
    if "overhead" in report:
        md += ["### framework overhead", "", overhead_line(report["overhead"]), ""]
    md += ["## Commands", "", "```"] + report["commands"] + ["```", ""]
    out.with_suffix(".md").write_text("\n".join(md))
    print(f"wrote {out} and {out.with_suffix('.md')}")
    failed = sum(1 for r in report["presets"].values() for row in r["rows"]
                 for impl in ("cpp", "python") if row.get(f"{impl}_error"))
    return 1 if failed and failed == sum(len(r["rows"]) * (1 if args.no_python else 2)
                                         for r in report["presets"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
