"""Running the kit's programs from the benchmark scripts: one command at a time, echoed,
timed, and a clear exit when it fails."""
import json
import os
import shlex
import subprocess
import sys
import time


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


def checks_lines(checks):
    """The checks as summary.md ends them: one line each, then a blank line."""
    return [f"{c['name']}: {c['value']} (goal: {c['goal']}) **{c['status']}**" for c in checks] + [""]
