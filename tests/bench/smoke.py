#!/usr/bin/env python3
"""The benchmarks' smoke runs (ctest's bench.<name>_smoke): each script of bench/ end to end on
the tiny preset, with one step where it can, then what its outputs must hold: every run it
should have made, every check it makes PASS, its figures real PNGs. Timings are measurements,
never conditions here.

    python3 tests/bench/smoke.py <name> --build BUILD     # from the kit's top folder

Each writes to BUILD/test_runs/<name>/ (emptied first). planner reads grid's output, which
ctest makes first (the grid_sweep fixture).
"""
import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

PNG = b"\x89PNG\r\n\x1a\n"


def run(*argv):
    """Runs a command from the kit's top folder; its failure fails the smoke with its exit code."""
    argv = [str(a) for a in argv]
    print("$ " + " ".join(argv), flush=True)
    r = subprocess.run(argv)
    if r.returncode != 0:
        sys.exit(f"exit code {r.returncode}: {' '.join(argv)}")


def check(condition, what):
    if not condition:
        sys.exit(f"SMOKE FAILED: {what}")


def nonempty(path: Path):
    check(path.is_file() and path.stat().st_size > 0, f"{path} is missing or empty")


def png(path: Path):
    check(path.is_file() and path.read_bytes()[:8] == PNG, f"{path} is not a PNG")


def redrawn(script: str, out: Path, figure: str):
    """--redraw draws `figure` again from out/summary.json alone (the figure removed first)."""
    (out / "figures" / figure).unlink()
    run(sys.executable, script, "--redraw", "--out", out)
    png(out / "figures" / figure)


def all_pass(checks, count=None):
    if count is not None:
        check(len(checks) == count, f"{len(checks)} checks, not {count}: {checks}")
    bad = [c for c in checks if c["status"] != "PASS"]
    check(not bad, f"checks that did not pass: {bad}")


def pipeline_schedules(build: Path, out: Path):
    """All six runs, the simulator, summary.json and both figures (scripts/pipeline_job.sh)."""
    run(sys.executable, "bench/pipeline_schedules.py", "--build", build, "--batch-size", 4, "--seq-len", 16,
        "--chunks", 2, "--steps", 1, "--warmup", 1, "--out", out)
    run(build / "plot_figures", "--pipeline-runs", out, "--out", out / "figures")
    png(out / "figures/pp_schedule_timelines.png")
    png(out / "figures/pp_schedule_throughput.png")


def tensor_parallel(build: Path, out: Path):
    """One process, t = 2 and data parallel 2 ranks; summary.json and the figure."""
    run(sys.executable, "bench/tensor_parallel.py", "--build", build, "--presets", "tiny", "--batch-size", 4,
        "--seq-len", 16, "--vocab-size", 64, "--steps", 1, "--warmup", 1, "--out", out)
    png(out / "figures/tp_throughput_communication.png")
    redrawn("bench/tensor_parallel.py", out, "tp_throughput_communication.png")


def zero(build: Path, out: Path):
    """adamw, zero1 and zero2 on 2 ranks, the ring against the built-in all-reduce up to 64 KiB."""
    run(sys.executable, "bench/zero.py", "--build", build, "--presets", "tiny", "--batch-size", 2, "--seq-len", 16,
        "--vocab-size", 64, "--steps", 1, "--warmup", 1, "--coll-max-bytes", "64K", "--coll-warmup", 1,
        "--coll-iters", 1, "--out", out)
    nonempty(out / "summary.json")
    png(out / "figures/zero_memory.png")
    png(out / "figures/ring_bandwidth.png")


def zero_stages(build: Path, out: Path):
    """adamw and ZeRO-1/2/3 on 1 and 2 ranks, every check PASS (memory = the formulas, ZeRO-3's
    communication 1.5x ZeRO-1's, its losses data parallelism's); then in bf16 on 2 ranks (the
    mixed-precision formulas, ZeRO-3's losses ZeRO-1's)."""
    run(sys.executable, "bench/zero_stages.py", "--build", build, "--presets", "tiny", "--world-sizes", 1, 2,
        "--batch-size", 2, "--seq-len", 16, "--vocab-size", 64, "--steps", 1, "--warmup", 1, "--out", out)
    s = json.loads((out / "summary.json").read_text())
    got = sorted((r["world_size"], r["name"]) for p in s["presets"] for r in p["runs"])
    want = sorted((n, o) for n in (1, 2) for o in ("adamw", "zero1", "zero2", "zero3"))
    check(got == want, f"runs {got}, not {want}")
    all_pass(s["checks"], 6)
    png(out / "figures/zero_stages.png")
    nonempty(out / "summary.md")
    redrawn("bench/zero_stages.py", out, "zero_stages.png")
    # bf16: the ZeRO stages in mixed precision, counted against 2 + 2 + 12 bytes per parameter
    bf16 = out / "bf16"
    run(sys.executable, "bench/zero_stages.py", "--build", build, "--presets", "tiny", "--world-sizes", 2,
        "--batch-size", 2, "--seq-len", 16, "--vocab-size", 64, "--steps", 1, "--warmup", 1, "--precision", "bf16",
        "--no-figures", "--out", bf16)
    s = json.loads((bf16 / "summary.json").read_text())
    runs = [r for p in s["presets"] for r in p["runs"]]
    check(all(r["master_weights"] == (r["name"] != "adamw") for r in runs), "bf16: master weights for the ZeRO stages only")
    all_pass(s["checks"], 6)


def recompute(build: Path, out: Path):
    """gpipe, 1f1b and interleaved (v = 2, so 4 blocks) on 2 ranks without and with --recompute:
    the losses unchanged, kept bytes <= 1/3 on every rank (the step time is only reported)."""
    run(sys.executable, "bench/recompute.py", "--build", build, "--preset", "tiny", "--n-layer", 4, "--batch-size", 4,
        "--seq-len", 16, "--vocab-size", 64, "--chunks", 2, "--steps", 1, "--warmup", 1, "--out", out)
    s = json.loads((out / "summary.json").read_text())
    got = [(x["kind"], x["plain"]["recompute"], x["recompute"]["recompute"]) for x in s["schedules"]]
    want = [(k, False, True) for k in ("gpipe", "1f1b", "interleaved")]
    check(got == want, f"runs {got}, not {want}")
    all_pass(s["checks"], 6)
    check(all(x["step_ratio"] > 0 for x in s["schedules"]), "a step-time ratio is not positive")
    png(out / "figures/recompute.png")
    nonempty(out / "summary.md")
    redrawn("bench/recompute.py", out, "recompute.png")


def grid(build: Path, out: Path):
    """The one-process reference and three grids of 2 ranks, each with its record (a positive
    tokens/s, the reference's loss), the layers profiled after the round (t = 1 and 2, the
    micro-batch sizes run) and the figure."""
    run(sys.executable, "bench/grid.py", "--build", build, "--preset", "tiny", "--world-size", 2,
        "--grids", "2,1,1 1,2,1 1,1,2", "--batch-size", 4, "--chunks", 2, "--seq-len", 16, "--vocab-size", 64,
        "--steps", 1, "--warmup", 1, "--profile-repeats", 1, "--out", out)
    s = json.loads((out / "summary.json").read_text())
    got = sorted((r["dp"], r["pp"], r["tp"]) for r in s["records"])
    want = [(1, 1, 1), (1, 1, 2), (1, 2, 1), (2, 1, 1)]
    check(got == want, f"records for {got}, not {want}")
    check(all(r["tokens_per_s"] > 0 for r in s["records"]), "a tokens_per_s is not positive")
    check(s["checks"][0]["status"] == "PASS", s["checks"])
    p = json.loads(Path(s["settings"]["profiles"]["tiny"]).read_text())
    got = sorted({(e["tp"], e["micro_batch"]) for e in p["times"]})
    check(got == [(1, 1), (1, 2), (2, 1), (2, 2)], f"profiled (t, micro-batch) {got}")
    nonempty(out / "summary.md")
    png(out / "figures/grid_sweep.png")


def terapipe(build: Path, out: Path):
    """One stage profiled and fitted, then 2 processes with no slicing, two uniform slicings and
    the DP's: every slicing's losses the unsliced run's (slicing reorders the work, it does not
    change the model), and both figures."""
    run(sys.executable, "bench/terapipe.py", "--build", build, "--preset", "tiny", "--seq-lens", 16, "--uniform", 2, 4,
        "--batch-size", 2, "--vocab-size", 64, "--steps", 2, "--warmup", 0, "--profile-repeats", 1, "--out", out)
    s = json.loads((out / "summary.json").read_text())
    got = [r["slicing"] for r in s["records"]]
    check(got == ["none", "uniform:2", "uniform:4", "dp"], f"slicings {got}")
    check(all(sum(r["lengths"]) == 16 and r["measured_s"] > 0 for r in s["records"]), s["records"])
    check(s["checks"][0]["name"] == "loss_matches_unsliced", s["checks"][0])
    all_pass(s["checks"][:1])
    png(out / "figures/terapipe_slicing.png")
    png(out / "figures/terapipe_timeline.png")


def planner(build: Path, out: Path):
    """grid's 2-rank sweep (run first) predicted: this machine measured (GEMM rate, small
    all-reduces, the layers at t = 1 and 2, two processes at once), every record predicted with
    the profile and by counting FLOPs, the rank correlations, the example clusters planned and
    the three figures."""
    grid_out = out.parent / "grid"
    run(sys.executable, "bench/planner.py", "--build", build, "--grid", grid_out, "--max-bytes", "64K", "--iters", 2,
        "--warmup", 1, "--profile-repeats", 2, "--out", out)
    s = json.loads((out / "summary.json").read_text())
    g = json.loads((grid_out / "summary.json").read_text())
    grids = lambda rs: [(r["dp"], r["pp"], r["tp"]) for r in rs]  # noqa: E731
    check(grids(s["records"]) == grids(g["records"]), (grids(s["records"]), grids(g["records"])))
    check(len(s["records"]) == 4, s["records"])
    check(all(r["predicted_s"] > 0 and r["predicted_flops_s"] > 0 for r in s["records"]), s["records"])
    check(isinstance(s["accuracy"]["spearman"], float), s["accuracy"])
    check(isinstance(s["accuracy_flops"]["kendall"], float), s["accuracy_flops"])
    p = json.loads(Path(s["profiled_descriptions"][0]["profile"]).read_text())
    check(p["tensor_parallel_included"] and {e["tp"] for e in p["times"]} == {1, 2}, p)
    names = [c["name"] for c in s["checks"]]
    check(names == ["mean_relative_error", "spearman", "measured_best", "micro_batch_choice"], names)
    check(s["clusters"] and all(c["strategies"] for c in s["clusters"]), s["clusters"])
    for f in ("planner_accuracy", "planner_micro_batch", "planner_clusters"):
        png(out / f"figures/{f}.png")


SMOKES = {f.__name__: f for f in (pipeline_schedules, tensor_parallel, zero, zero_stages, recompute, grid, terapipe,
                                  planner)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", choices=sorted(SMOKES))
    ap.add_argument("--build", type=Path, required=True, help="the kit's build directory")
    args = ap.parse_args(argv)
    build = args.build.resolve()
    out = build / "test_runs" / args.name
    shutil.rmtree(out, ignore_errors=True)
    SMOKES[args.name](build, out)
    print("SMOKE_OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
