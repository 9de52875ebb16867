#include "make_figures.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "figures.h"
#include "kit/errors.h"

namespace fs = std::filesystem;

namespace kit::plots {
namespace {

struct Input {
  const char* key;   // in summary.json
  const char* flag;  // on the command line
  const InputPath* path;
  const char* how_to_make;
  bool only_when_named = false;  // not read from its default path (something else writes there too)
};

std::optional<Run> load_input(const Input& in, Summary& s) {
  std::error_code ec;
  if (!in.path->given && in.only_when_named) {
    // `train` writes runs/train.json by default, the setup check included: drawn only when named.
    if (fs::exists(in.path->path, ec))
      s.notes.push_back(std::string("not drawn: ") + in.path->path + " (pass " + in.flag + " " + in.path->path +
                        " to draw it beside the others)");
    return std::nullopt;
  }
  if (!in.path->given && !fs::exists(in.path->path, ec)) {
    s.notes.push_back(std::string("no ") + in.flag + " run at " + in.path->path + " (the default path): " +
                      in.how_to_make + ", or pass " + in.flag + " PATH");
    return std::nullopt;
  }
  return load_run(in.path->path);
}

// A swapped pair of pipeline runs would draw a convincing but inverted figure.
void check_mode(const Run& run, const char* flag, const std::string& expected, Summary& s) {
  if (!run.mode.empty() && run.mode != expected)
    throw Error(run.source + " has run.mode \"" + run.mode + "\" but was given as " + flag + ", which expects \"" +
                expected + "\": did you swap --model-parallel and --pipeline?");
  if (run.program != "run_pipeline")
    s.warnings.push_back(std::string(flag) + " " + run.source + " was written by " + run.program +
                         ", not run_pipeline");
}

// A figure not drawn this time may still lie in out_dir from an earlier run: say so.
void note_skipped(const FigureOptions& o, const std::vector<const char*>& files, const std::string& why, Summary& s) {
  std::string names;
  for (const char* f : files) names += (names.empty() ? "" : " and ") + std::string(f);
  s.notes.push_back("skipped " + names + ": " + why);
  std::error_code ec;
  for (const char* f : files)
    if (fs::exists(fs::path(o.out_dir) / f, ec))
      s.notes.push_back((fs::path(o.out_dir) / f).string() + " is from an earlier run: it does not match summary.json");
}

std::string bar_label(const RunResult& r) {
  return r.run.describe_two_lines() + "\nepochs " + format_epochs(r.stats.epochs_used);
}

std::string drop_rule(const RunResult& a, const RunResult& b) {
  return a.stats.first_epoch_dropped && b.stats.first_epoch_dropped
             ? "mean ± std over epochs, first epoch dropped as warm-up"
             : "mean ± std over epochs (a run has one epoch only: warm-up included)";
}

void draw_pair(const RunResult& a, const RunResult& b, const std::string& what,
               const std::string& time_file, const std::string& tps_file, const std::optional<double>& tps_ratio,
               const std::string& ratio_words, const FigureOptions& o, std::vector<std::string>& written) {
  const auto draw = [&](const std::string& file, const BarChart& chart) {
    const std::string path = (fs::path(o.out_dir) / file).string();
    draw_bar_chart(path, chart, o.png);
    written.push_back(path);
  };
  draw(time_file, {what + ": training time per epoch\n" + drop_rule(a, b) + "; time averaged over ranks",
                   "training time per epoch (seconds)",
                   "s",
                   {{bar_label(a), a.stats.training_time}, {bar_label(b), b.stats.training_time}}});

  char ratio[64] = "n/a";
  if (tps_ratio) std::snprintf(ratio, sizeof ratio, "%.2fx", *tps_ratio);
  draw(tps_file, {what + ": throughput (" + ratio_words + " = " + ratio + ")\n" + drop_rule(a, b) +
                      "; tokens/s summed over ranks",
                  "throughput (tokens/s)",
                  "",
                  {{bar_label(a), a.stats.tokens_per_sec}, {bar_label(b), b.stats.tokens_per_sec}}});
}

// Forward only (run_pipeline's validation), the part the pipe overlaps, beside the ideal
// m·p/(m+p-1) times the model-parallel rate: how far the pipe is from its schedule's bound.
void draw_forward_only(const RunResult* mp, const RunResult* pp, Summary& s, const FigureOptions& o) {
  const auto mp_fwd = mp ? forward_only_stats(mp->run) : std::nullopt;
  const auto pp_fwd = pp ? forward_only_stats(pp->run) : std::nullopt;
  if (!mp_fwd || !pp_fwd) {
    note_skipped(o, {kPpForwardFigure},
                 "it needs --model-parallel and --pipeline runs with forward-only numbers (run_pipeline writes them)",
                 s);
    return;
  }
  BarChart chart{"Model vs pipeline parallel, forward only (validation): throughput\n"
                 "mean ± std over epochs, first dropped as warm-up; ideal = model parallel × m·p/(m+p-1)",
                 "forward-only throughput (tokens/s)",
                 "",
                 {{bar_label(*mp), *mp_fwd}, {bar_label(*pp), *pp_fwd}}};
  if (const auto& ideal = s.speedups.pp_forward_ideal_speedup) {
    char text[96];
    std::snprintf(text, sizeof text, "ideal: model parallel\n× m·p/(m+p-1) = %.2f", *ideal);
    chart.bars.push_back({text, MeanStd{mp_fwd->mean * *ideal, 0, 0}});
  }
  const std::string path = (fs::path(o.out_dir) / kPpForwardFigure).string();
  draw_bar_chart(path, chart, o.png);
  s.figures.push_back(path);
}

}  // namespace

Summary make_figures(const FigureOptions& o) {
  const Input inputs[] = {
      {"dp_single", "--dp-single", &o.dp_single, "run `run_data_parallel --world-size 1 --batch-size 64` to make it"},
      {"dp_multi", "--dp-multi", &o.dp_multi, "run `run_data_parallel --world-size 2 --batch-size 128` to make it"},
      {"model_parallel", "--model-parallel", &o.model_parallel, "run `run_pipeline --mode model_parallel` to make it"},
      {"pipeline", "--pipeline", &o.pipeline, "run `run_pipeline --mode pipeline_parallel` to make it"},
      {"single", "--single", &o.single, "run `train` to make it", true},
  };
  Summary s;
  s.schedule = o.schedule;

  // Load and check everything first: a bad file stops us before anything is drawn.
  for (const auto& in : inputs) {
    auto run = load_input(in, s);
    if (!run) continue;
    const std::string key = in.key;
    if (key == "model_parallel") check_mode(*run, in.flag, "model_parallel", s);
    if (key == "pipeline") check_mode(*run, in.flag, "pipeline_parallel", s);
    if (key == "dp_single" && run->world_size != 1)
      s.warnings.push_back("--dp-single " + run->source + " has world size " + std::to_string(run->world_size) +
                           "; the data-parallel figures use it as the single-device baseline");
    if (key == "dp_multi" && run->world_size < 2)
      s.warnings.push_back("--dp-multi " + run->source + " has world size 1; expected 2 or more");
    RunResult r{key, std::move(*run), {}};
    r.stats = run_stats(r.run);
    if (!r.stats.warning.empty()) s.warnings.push_back(r.stats.warning);
    s.runs.push_back(std::move(r));
  }
  compute_speedups(s);

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) throw Error("cannot create the output directory " + o.out_dir + ": " + ec.message());

  const RunResult *one = s.find("dp_single"), *many = s.find("dp_multi");
  if (one && many)
    draw_pair(*one, *many, "Data parallel", kDpTimeFigure, kDpThroughputFigure, s.speedups.dp_tokens_per_sec_ratio,
              "world " + std::to_string(many->run.world_size) + " / world " + std::to_string(one->run.world_size), o,
              s.figures);
  else
    note_skipped(o, {kDpTimeFigure, kDpThroughputFigure}, "they need both --dp-single and --dp-multi", s);

  const RunResult *mp = s.find("model_parallel"), *pp = s.find("pipeline");
  if (mp && pp)
    draw_pair(*mp, *pp, "Model vs pipeline parallel", kPpTimeFigure, kPpThroughputFigure,
              s.speedups.pp_tokens_per_sec_ratio, "pipeline / model parallel", o, s.figures);
  else
    note_skipped(o, {kPpTimeFigure, kPpThroughputFigure}, "they need both --model-parallel and --pipeline", s);
  draw_forward_only(mp, pp, s, o);

  // Loss curves: the reference run first, so the others are drawn on top of it.
  std::vector<LossSeries> series;
  for (const char* key : {"single", "dp_single", "dp_multi", "model_parallel", "pipeline"}) {
    const RunResult* r = s.find(key);
    if (!r) continue;
    LossSeries line{r->run.describe(), loss_curve(r->run)};
    if (line.points.empty())
      s.notes.push_back(r->run.source + " has no finite training losses: left out of " + kLossFigure);
    else
      series.push_back(std::move(line));
  }
  if (!series.empty()) {
    const std::string path = (fs::path(o.out_dir) / kLossFigure).string();
    PngOptions png = o.png;
    png.width = 1000;
    draw_loss_curves(path, series, png);
    s.figures.push_back(path);
  } else {
    note_skipped(o, {kLossFigure}, "no run found", s);
  }

  // The schedule picture shows the student's own pipeline when we know its shape.
  if (pp && !o.schedule_given && pp->run.microbatches > 0 && pp->run.stages > 0) {
    try {
      s.schedule = parse_schedule_size(std::to_string(pp->run.microbatches) + "x" + std::to_string(pp->run.stages));
      s.notes.push_back(std::string(kScheduleFigure) + " shows the --pipeline run's schedule (" +
                        std::to_string(s.schedule.micro_batches) + " micro-batches on " +
                        std::to_string(s.schedule.stages) + " stages); --schedule MxN draws another");
    } catch (const Error&) {
      // too large to draw: keep the default
    }
  }
  const std::string schedule_path = (fs::path(o.out_dir) / kScheduleFigure).string();
  draw_schedule(schedule_path, s.schedule.micro_batches, s.schedule.stages, o.png);
  s.figures.push_back(schedule_path);

  const std::string summary_path = (fs::path(o.out_dir) / kSummaryFile).string();
  std::ofstream out(summary_path);
  if (!out) throw Error("cannot write " + summary_path + ": check that " + o.out_dir + " is writable");
  out << to_json(s).dump(2) << "\n";
  return s;
}

}  // namespace kit::plots
