"""Running the kit's programs from the benchmark scripts: one command at a time, echoed,
timed, and a clear exit when it fails; and what the scripts share around it: the options they
have in common, the summary files, the tables of summary.md."""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time


def argument_parser(doc, programs):
    """A benchmark script's command line: doc (its docstring) as the description, and --build,
    the directory holding programs (the kit's programs it runs)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help=f"directory holding {programs}")
    return ap


# The options several scripts take with one meaning: name: (flag, type, help).
OPTIONS = {
    "seq_len": ("--seq-len", int, None),
    "steps": ("--steps", int, "timed steps"),
    "warmup": ("--warmup", int, "steps before them, not timed"),
    "threads": ("--threads", int, "intra-op threads per process"),
    "timeout": ("--timeout", float, "seconds allowed per run"),
    "out": ("--out", None, None),
}


def common_options(ap, **defaults):
    """Adds the OPTIONS named, in the order given, each with its default: common_options(ap,
    steps=5, warmup=2) adds --steps (default 5), then --warmup (default 2)."""
    for name, default in defaults.items():
        flag, kind, text = OPTIONS[name]
        ap.add_argument(flag, type=kind, default=default, help=text)


def run(cmd, timeout, targets):
    """Runs cmd and returns its stdout; exits with its output's tail when it fails.
    targets: the build targets to name when the program does not exist yet."""
    print("$ " + shlex.join(cmd), flush=True)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except FileNotFoundError as e:
        sys.exit(f"error: cannot run {cmd[0]} ({e}): build it first (cmake --build build --target {targets})")
    except subprocess.TimeoutExpired:
        sys.exit(f"error: {cmd[0]} took more than {timeout:.0f} s (--timeout)")
    if p.returncode != 0:
        tail = "\n".join((p.stderr + p.stdout).strip().splitlines()[-15:])
        sys.exit(f"error: {shlex.join(cmd)} exited with {p.returncode}:\n{tail}")
    print(f"  ({time.monotonic() - t0:.1f} s)", flush=True)
    return p.stdout


def run_ranks(cmd, out, world, timeout, targets, extra=()):
    """Runs cmd, one of the kit's programs that write a metrics file per rank, with --no-progress
    --out OUT/rank{rank}.json and then extra appended (OUT made first); returns the files' paths
    and their contents, rank 0 first."""
    os.makedirs(out, exist_ok=True)
    run(cmd + ["--no-progress", "--out", os.path.join(out, "rank{rank}.json")] + list(extra), timeout, targets)
    paths = [os.path.join(out, f"rank{r}.json") for r in range(world)]
    return paths, [json.load(open(f)) for f in paths]


def profile_layers(build, preset, model_args, tps, sizes, threads, repeats, out, timeout, targets):
    """build/profile_layers for `preset` (model_args: its shape flags, e.g. --seq-len), every t
    of tps and micro-batch size of sizes, `threads` per process, `repeats` runs per measurement:
    the planner's profile (planner/profile.h) written to `out`, which is returned."""
    run([os.path.join(build, "profile_layers"), "--preset", preset, *model_args,
         "--tp", ",".join(str(t) for t in sorted(set(tps))),
         "--micro-batch-sizes", ",".join(str(b) for b in sorted(set(sizes))),
         "--threads", str(threads), "--repeats", str(repeats), "--out", out], timeout, targets)
    return out


def last_json_line(text, what):
    """The last line of a program's output that is a JSON object (bench prints one)."""
    for line in reversed(text.strip().splitlines()):
        if line.strip().startswith("{"):
            return json.loads(line)
    sys.exit(f"error: {what} printed no JSON line")


def write_summary(out, summary, markdown):
    """out/summary.json and out/summary.md (the table markdown() makes of it), printed too."""
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    md = markdown(summary)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(md)
    print("\n" + md)
    print(f"wrote {os.path.join(out, 'summary.json')} and summary.md")


def measure_or_redraw(args, measure, markdown, draw):
    """Every benchmark's main after its checks of the arguments: with --redraw only the figures,
    from OUT/summary.json (gnuplot_png.draw_figures); otherwise OUT is made, measure() gives the
    summary, write_summary writes it with its table, and the figures are drawn from it."""
    from gnuplot_png import draw_figures  # the figures' module, only where figures are drawn
    if args.redraw:
        return draw_figures(args, draw)
    os.makedirs(args.out, exist_ok=True)
    write_summary(args.out, measure(), markdown)
    draw_figures(args, draw)


def command_line(argv):
    """The command that ran the benchmark, for its summary's settings."""
    return shlex.join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:]))


def run_plot_figures(args, flag, targets):
    """build/plot_figures FLAG OUT --out OUT/figures, unless --no-figures (terapipe.py: its
    timeline is drawn by the kit's C++ timeline code)."""
    if not args.no_figures:
        out = run([os.path.join(args.build, "plot_figures"), flag, args.out, "--out", os.path.join(args.out, "figures")],
                  args.timeout, targets)
        print(out.strip())


def rel_diff(losses, ref):
    """The largest relative difference between two runs' losses, step by step."""
    return max(abs(a - b) / abs(b) if b else abs(a - b) for a, b in zip(losses, ref))


def table_head(header, align):
    """A summary.md table's first two lines: header ("| a | b |"), then the rule that aligns
    column i left (align[i] "l": ---) or right ("r": ---:)."""
    assert header.count("|") == len(align) + 1, (header, align)
    return [header, "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]


def checks_lines(checks):
    """The checks as summary.md ends them: one line each, then a blank line."""
    return [f"{c['name']}: {c['value']} (goal: {c['goal']}) **{c['status']}**" for c in checks] + [""]


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
    """Spearman's rank correlation: Pearson's correlation of the ranks (ties: average ranks);
    None with fewer than 2 values or either side all tied."""
    if len(xs) < 2:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else None


def kendall_tau(xs, ys):
    """Kendall's tau-b: (concordant - discordant pairs) / sqrt((n0 - ties in xs) (n0 - ties in
    ys)), n0 = n (n - 1) / 2 pairs (a pair tied on both sides counts in both ties); None with
    fewer than 2 values or either side all tied."""
    n = len(xs)
    if n < 2:
        return None
    concordant = discordant = tied_x = tied_y = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx = (xs[i] > xs[j]) - (xs[i] < xs[j])
            dy = (ys[i] > ys[j]) - (ys[i] < ys[j])
            tied_x += dx == 0
            tied_y += dy == 0
            if dx * dy > 0:
                concordant += 1
            elif dx * dy < 0:
                discordant += 1
    pairs = n * (n - 1) // 2
    denominator = ((pairs - tied_x) * (pairs - tied_y)) ** 0.5
    return (concordant - discordant) / denominator if denominator > 0 else None
