#!/usr/bin/env python3
"""The figures the benchmark scripts draw themselves (bench/gnuplot_png.py): each script's
draw() on a small fixed summary.json writes real PNG files, and a summary that is missing, not
JSON, another benchmark's or wrong in one field stops it with one line naming the file, the
place, the field and the command that writes it again, before anything is drawn.

    python3 tests/plots/test_bench_figures.py        # ctest: plots.bench_figures
"""
import copy
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))

import gnuplot_png  # noqa: E402
import grid  # noqa: E402
import planner  # noqa: E402
import tensor_parallel  # noqa: E402
import zero  # noqa: E402

TP = {"settings": {"batch_size": 4, "seq_len": 16, "threads": 1, "cores": 2},
      "presets": [{"preset": "tiny", "runs": [
          {"label": "one process", "tokens_per_s": 14000.0, "comm_s_per_step": 0.0},
          {"label": "tensor parallel t = 2", "tokens_per_s": 1800.0, "comm_s_per_step": 0.021},
          {"label": "data parallel, 2 ranks", "tokens_per_s": 3100, "comm_s_per_step": 0.013}]}]}


def zero_run(label, optimizer_state):
    rank = {"parameters": 126464, "gradients": 126464, "optimizer_state": optimizer_state, "activations": 194448,
            "peak_rss": 178262016}
    return {"label": label, "formula_bytes": {"total": 252928 + optimizer_state}, "memory_per_rank": [rank, dict(rank)]}


ZERO = {"settings": {"world_size": 2},
        "presets": [{"preset": "tiny", "parameter_count": 31616,
                     "runs": [zero_run("DP", 252928), zero_run("ZeRO-1", 126464), zero_run("ZeRO-2", 126464)]}],
        "collectives": {"world_size": 2, "backend": "gloo", "sizes": [
            {"bytes": 1024, "ring_busbw_GBps": 0.00013, "builtin_busbw_GBps": 0.0002, "ratio_ring_to_builtin": 1.5},
            {"bytes": 67108864, "ring_busbw_GBps": 0.9, "builtin_busbw_GBps": 1.1, "ratio_ring_to_builtin": 1.2}]}}


def grid_record(label, d, p, t, tokens, data, tensor, pipeline):
    return {"preset": "tiny", "label": label, "dp": d, "pp": p, "tp": t, "reference": d * p * t == 1,
            "tokens_per_s": tokens, "step_time_s": 0.5,
            "comm_s_per_step": {"data": data, "tensor": tensor, "pipeline": pipeline, "embedding": 0.01}}


GRID = {"settings": {"world_size": 2, "schedule": "1f1b", "chunks": 2, "batch_size": 4, "seq_len": 16, "threads": 1},
        "machine": {"cores": 2, "oversubscribed": False},
        "records": [grid_record("d=1 p=1 t=1", 1, 1, 1, 1000, 0, 0.001, 0),
                    grid_record("d=2 p=1 t=1", 2, 1, 1, 1500, 0.05, 0.001, 0),
                    grid_record("d=1 p=2 t=1", 1, 2, 1, 1200, 0, 0.001, 0.1)]}


def strategy(label, pipeline, data):
    return {"label": label, "pipeline_s": pipeline, "data_s": data, "total_s": pipeline + data}


def run(label, d, p, t, m, mb, measured, predicted, flops):
    return {"label": label, "preset": "cpu-small", "dp": d, "pp": p, "tp": t, "chunks": m, "micro_batch": mb,
            "reference": d * p * t == 1, "measured_s": measured, "measured_repeats_s": [measured, 1.02 * measured],
            "predicted_s": predicted, "predicted_flops_s": flops}


def accuracy(rho, rank, error):
    return {"spearman": rho, "kendall": rho - 0.1, "measured_best": "d=2 p=1 t=1 m=1",
            "measured_best_predicted_rank": rank, "mean_abs_relative_error": error}


PLANNER = {"machine": {"cores": 2, "gemm_gflops": 100.0},
           "records": [run("d=1 p=1 t=1 m=1", 1, 1, 1, 1, 4, 0.02, 0.018, 0.01),
                       run("d=2 p=1 t=1 m=1", 2, 1, 1, 1, 2, 0.015, 0.012, 0.006),
                       run("d=2 p=1 t=1 m=2", 2, 1, 1, 2, 1, 0.016, 0.013, 0.006),
                       run("d=1 p=2 t=1 m=1", 1, 2, 1, 1, 4, 0.017, 0.016, 0.008)],
           "accuracy": accuracy(0.8, 1, 0.15), "accuracy_flops": accuracy(0.7, 2, 0.5),
           "noise": {"spearman_between_repeats": 0.95},
           "clusters": [{"name": "v100_node", "cluster": "one node of 8 V100", "model": "GPT-2 124M", "batch": 512,
                         "seq_len": 1024, "strategies": [strategy("d=8 p=1 t=1 mb=2 1f1b", 1.2, 0.1),
                                                         strategy("d=4 p=2 t=1 mb=2 1f1b", 1.3, 0.05)]},
                        {"name": "mixed", "cluster": "mixed generations", "model": "GPT-2 124M", "batch": 512,
                         "seq_len": 1024, "strategies": [strategy("d=4 p=4 t=1 mb=1 1f1b", 0.4, 0.002)]}]}

# script module, its summary, the figures it draws
BENCHMARKS = {"tensor_parallel": (tensor_parallel, TP, ["tp_throughput_communication.png"]),
              "zero": (zero, ZERO, ["zero_memory.png", "ring_bandwidth.png"]),
              "grid": (grid, GRID, ["grid_sweep.png"]),
              "planner": (planner, PLANNER, ["planner_accuracy.png", "planner_micro_batch.png", "planner_clusters.png"])}


class BenchFigures(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kit_bench_figures_")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def write(self, summary):
        with open(os.path.join(self.dir, "summary.json"), "w") as f:
            f.write(summary if isinstance(summary, str) else json.dumps(summary))

    def draw(self, name):
        return BENCHMARKS[name][0].draw(self.dir, os.path.join(self.dir, "figures"))

    def error(self, name, summary=None):
        """The message draw() stops with; no figure may be left behind."""
        if summary is not None:
            self.write(summary)
        with self.assertRaises(SystemExit) as stop:
            self.draw(name)
        for png in BENCHMARKS[name][2]:
            self.assertFalse(os.path.exists(os.path.join(self.dir, "figures", png)), png)
        return str(stop.exception.code)

    def assertMentions(self, text, *parts):
        for part in parts:
            self.assertIn(part, text)

    def test_each_benchmark_draws_its_pngs(self):
        for name, (_, summary, pngs) in BENCHMARKS.items():
            with self.subTest(name):
                self.write(summary)
                files = self.draw(name)
                self.assertEqual(files, [os.path.join(self.dir, "figures", p) for p in pngs])
                for f in files:
                    with open(f, "rb") as png:
                        self.assertEqual(png.read(8), gnuplot_png.PNG_SIGNATURE, f)
                    self.assertGreater(os.path.getsize(f), 1000, f)

    def test_a_missing_summary_names_the_file_and_the_command(self):
        for name in BENCHMARKS:
            with self.subTest(name):
                self.assertMentions(self.error(name), os.path.join(self.dir, "summary.json"),
                                    f"python3 bench/{name}.py --out {self.dir}")

    def test_a_truncated_summary_is_not_json(self):
        for name, (_, summary, _) in BENCHMARKS.items():
            with self.subTest(name):
                self.assertMentions(self.error(name, json.dumps(summary)[:50]), "summary.json is not JSON")

    # Another benchmark's summary.json is refused, not drawn as nothing.
    def test_another_benchmarks_summary_is_refused(self):
        for name, other in [("grid", ZERO), ("planner", GRID), ("zero", GRID), ("tensor_parallel", PLANNER)]:
            with self.subTest(name):
                self.assertMentions(self.error(name, other), f"is it bench/{name}.py's summary.json?")

    def test_a_missing_field_names_the_place_and_the_field(self):
        def without(summary, path, key):
            s = copy.deepcopy(summary)
            at = s
            for p in path:
                at = at[p]
            del at[key]
            return s
        cases = [("grid", ["records", 2, "comm_s_per_step"], "pipeline", "records[2].comm_s_per_step"),
                 ("planner", ["records", 2], "predicted_s", "records[2]"),
                 ("zero", ["presets", 0, "runs", 1, "memory_per_rank", 1], "optimizer_state",
                  "presets[0].runs[1].memory_per_rank[1]"),
                 ("zero", ["collectives", "sizes", 1], "ring_busbw_GBps", "collectives.sizes[1]"),
                 ("tensor_parallel", ["presets", 0, "runs", 2], "comm_s_per_step", "presets[0].runs[2]")]
        for name, path, key, place in cases:
            with self.subTest(f"{name} {place}"):
                self.assertMentions(self.error(name, without(BENCHMARKS[name][1], path, key)),
                                    f"{place} has no \"{key}\"", f"bench/{name}.py")

    def test_a_wrong_type_says_what_was_expected(self):
        grid_summary, planner_summary = copy.deepcopy(GRID), copy.deepcopy(PLANNER)
        grid_summary["records"][1]["tokens_per_s"] = "fast"
        planner_summary["accuracy"]["spearman"] = "high"
        planner_empty = copy.deepcopy(PLANNER)
        planner_empty["clusters"][1]["strategies"] = []
        self.assertMentions(self.error("grid", grid_summary), '"tokens_per_s" is not a number')
        self.assertMentions(self.error("planner", planner_summary), '"spearman" is not a number (nor null)')
        self.assertMentions(self.error("planner", planner_empty), "clusters[1]",
                            '"strategies" is not a non-empty list')

    # Fewer than two distinct records give no Spearman: null, drawn as n/a.
    def test_no_spearman_is_drawn_as_not_available(self):
        s = copy.deepcopy(PLANNER)
        s["accuracy"]["spearman"] = None
        s["accuracy"]["kendall"] = None
        s["noise"]["spearman_between_repeats"] = None
        self.write(s)
        self.assertEqual(len(self.draw("planner")), 3)

    def test_gnuplot_errors_come_back_and_leave_no_file(self):
        png = os.path.join(self.dir, "bad.png")
        with self.assertRaises(SystemExit) as stop:
            gnuplot_png.render_png(png, 400, 300, "plot '-' using 1:2 with nonsense\n")
        self.assertMentions(str(stop.exception.code), "gnuplot failed to draw " + png)
        self.assertFalse(os.path.exists(png))

    def test_missing_gnuplot_says_how_to_install_it(self):
        saved = gnuplot_png.GNUPLOT
        gnuplot_png.GNUPLOT = os.path.join(self.dir, "no-such-gnuplot")
        try:
            with self.assertRaises(SystemExit) as stop:
                gnuplot_png.render_png(os.path.join(self.dir, "x.png"), 400, 300, "plot x\n")
        finally:
            gnuplot_png.GNUPLOT = saved
        self.assertMentions(str(stop.exception.code), "apt-get install gnuplot-nox")


if __name__ == "__main__":
    unittest.main()
