"""The benchmarks' figures: reading a summary.json back for a figure, and drawing one PNG with
gnuplot (gnuplot-nox; the pngcairo terminal, else png), as plots/gnuplot_png.cpp does for
plot_figures. Python 3 standard library only.

A summary that is missing, not JSON, another benchmark's, or lacks a field stops the script
with one line naming the file, the place ("records[3].comm_s_per_step"), the field and the
command that writes the file again. gnuplot's exit status and the PNG's signature decide
whether a figure was drawn: a failed one leaves no file, and a stale file is removed first so
it can never pass for a new one.
"""
import json
import os
import subprocess
import sys

GNUPLOT = "gnuplot"  # the program to run
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The bar charts' look, shared by every multi-panel figure.
BAR_STYLE = ('set border 3\nset grid ytics lc rgb "#DDDDDD"\nset ytics nomirror\n'
             'set style fill solid 0.85 border rgb "#333333"\n')


def fail(message):
    sys.exit("error: " + message)


class Summary:
    """OUT/summary.json of one benchmark, read back for its figures; every accessor checks the
    field's presence and type. script: the benchmark, e.g. "bench/grid.py"."""

    def __init__(self, script, runs_dir):
        self.script, self.runs_dir = script, runs_dir
        self.path = os.path.join(runs_dir, "summary.json")
        self.make_it = f"python3 {script} --out {runs_dir}"
        try:
            with open(self.path) as f:
                text = f.read()
        except OSError as e:
            fail(f"cannot read {self.path} ({e.strerror}): run {self.make_it} first")
        try:
            self.data = json.loads(text)
        except ValueError as e:
            fail(f"{self.path} is not JSON ({e}): run {self.make_it} again")

    def field(self, obj, key, where, kind=None):
        """obj[key], checked: kind "number", "integer", "text", "boolean", "list" (non-empty),
        "number or null", or None (anything)."""
        if not isinstance(obj, dict) or key not in obj:
            fail(f'{where} has no "{key}": is it {self.script}\'s summary.json? Run {self.make_it} again')
        v = obj[key]
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        ok, expected = {
            None: (True, ""),
            "number": (number, "a number"),
            "number or null": (number or v is None, "a number (nor null)"),
            "integer": (isinstance(v, int) and not isinstance(v, bool), "a whole number"),
            "text": (isinstance(v, str), "a string"),
            "boolean": (isinstance(v, bool), "true or false"),
            "list": (isinstance(v, list) and len(v) > 0, "a non-empty list"),
        }[kind]
        if not ok:
            fail(f'{where}: "{key}" is not {expected}: run {self.make_it} again')
        return v

    def records(self, key):
        """(where, record) for every entry of the top-level list `key` (non-empty)."""
        return [(f"{self.path}: {key}[{i}]", r) for i, r in enumerate(self.field(self.data, key, self.path, "list"))]


def quote(s):
    """s as a gnuplot double-quoted string (backslashes and quotes escaped, newlines as \\n)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def rgb(colour):
    """"#4C72B0" as the number gnuplot's `lc rgb variable` reads."""
    return int(colour[1:], 16)


def inline(rows):
    """Rows of numbers as gnuplot's inline data for one '-' of a plot command."""
    return "".join(" ".join(repr(float(v)) for v in row) + "\n" for row in rows) + "e\n"


def tics(axis, places, options="nomirror scale 0"):
    """set xtics ... ("label" x, ...): places = [(x, label)]."""
    return f"set {axis}tics {options} (" + ", ".join(f"{quote(label)} {x!r}" for x, label in places) + ")\n"


def legend(style, entries):
    """One invisible plot per (colour, title), so the key shows colours the data set by number."""
    return "".join(f", NaN with {style} lc rgb {quote(c)} title {quote(t)}" for c, t in entries)


def stacked(parts, marker):
    """A plot command of stacked bars: parts = [(column, colour, title)] bottom to top, each
    column the cumulative top, drawn tallest first so each later box covers the one before;
    marker: the last plot (a column of points). Each '-' needs the rows once more."""
    return ("plot " + "".join(f"'-' using 1:{col} with boxes lc rgb {quote(c)} title {quote(t)}, "
                              for col, c, t in reversed(parts)) + marker + "\n")


_terminals = {}


def how_to_install():
    return (f"install gnuplot (Debian/Ubuntu: apt-get install gnuplot-nox, or scripts/install_deps.sh) "
            f"(tried '{GNUPLOT}')")


def png_terminal():
    """The best PNG terminal this gnuplot has: pngcairo (antialiased), else png (libgd)."""
    if GNUPLOT not in _terminals:
        try:
            p = subprocess.run([GNUPLOT, "-e", "set terminal"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=60)
        except OSError as e:
            fail(f"cannot run gnuplot ({e.strerror}): {how_to_install()}")
        if p.returncode != 0:
            fail(f"cannot run gnuplot: {how_to_install()}\n{p.stdout.strip()}")
        names = {line.split()[0] for line in p.stdout.splitlines() if line.split()}
        if "pngcairo" in names:
            _terminals[GNUPLOT] = "pngcairo"
        elif "png" in names:
            _terminals[GNUPLOT] = "png"
        else:
            fail(f"this gnuplot ({GNUPLOT}) has no PNG terminal (neither pngcairo nor png): install a full "
                 "gnuplot build (Debian/Ubuntu: apt-get install gnuplot-nox)")
    return _terminals[GNUPLOT]


def render_png(path, width, height, commands):
    """Draws `commands` (a gnuplot script, inline data included) into the PNG `path` (its
    directory made), width x height pixels; stops with gnuplot's messages when it failed."""
    terminal = png_terminal()
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.remove(path)
    script = (f'set terminal {terminal} size {width},{height} noenhanced font "sans,11"\n'
              f"set encoding utf8\nset output {quote(path)}\n{commands}unset output\nexit\n")
    p = subprocess.run([GNUPLOT], input=script, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=300)
    messages = p.stdout.strip()
    if p.returncode != 0:
        if os.path.exists(path):
            os.remove(path)  # a half-drawn figure is worse than none
        fail(f"gnuplot failed to draw {path} (exit status {p.returncode})" + (":\n" + messages if messages else ""))
    with open(path, "rb") as f:
        if f.read(8) != PNG_SIGNATURE:
            fail(f"gnuplot finished but {path} is not a PNG file" + (":\n" + messages if messages else ""))
    if messages:
        print(f"gnuplot ({path}): {messages}", file=sys.stderr)
    return path


def summary_figures(script, figures):
    """A draw(runs_dir, figures_dir) for draw_figures: script's runs_dir/summary.json read once,
    then render_png for each (file name, figure) of figures into figures_dir, figure(summary)
    giving (width, height, commands). Every script is made before any is drawn, so a bad
    summary leaves no half of the figures."""
    def draw(runs_dir, figures_dir):
        s = Summary(script, runs_dir)
        made = [(name, figure(s)) for name, figure in figures]
        return [render_png(os.path.join(figures_dir, name), *figure) for name, figure in made]
    return draw


def figure_options(ap):
    """The figure options of a benchmark's command line (see draw_figures)."""
    ap.add_argument("--no-figures", action="store_true", help="do not draw the figures")
    ap.add_argument("--redraw", action="store_true",
                    help="run nothing: draw the figures again from OUT/summary.json (with --figures: into that "
                         "directory, e.g. submit_figures)")
    ap.add_argument("--figures", help="directory for the figures (default: OUT/figures)")


def draw_figures(args, draw):
    """draw(OUT, figures directory) unless --no-figures, and says what it wrote."""
    if args.no_figures:
        return
    for f in draw(args.out, args.figures or os.path.join(args.out, "figures")):
        print(f"wrote {f}")



def bar_panel(title, ylabel, bars, xrange, places, value_format, keys):
    """One panel of labelled bars: bars = [(x, value, colour)], each with its value printed
    above it (value_format % value); places: the x tics; keys: [(colour, title)] for the key."""
    top = max((v for _, v, _ in bars), default=0)
    return (f"set title {quote(title)}\nset ylabel {quote(ylabel)}\n"
            f"set yrange [0:{1.2 * top if top > 0 else 1.0!r}]\nset xrange [{xrange[0]!r}:{xrange[1]!r}]\n"
            "unset label\n" + tics("x", places) +
            "".join(f"set label {n} {quote(value_format % v)} at {x!r},{v!r} center offset 0,0.8 front\n"
                    for n, (x, v, _) in enumerate(bars, 1)) +
            "plot '-' using 1:2:3 with boxes lc rgb variable notitle" + legend("boxes", keys) + "\n" +
            inline((x, v, rgb(c)) for x, v, c in bars))
