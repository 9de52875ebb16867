#include "summary.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "figures.h"

namespace kit::plots {
namespace {

// Display width of UTF-8 text ("±" is one column, two bytes).
size_t columns(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string pad(const std::string& s, size_t width) {
  return s + std::string(width > columns(s) ? width - columns(s) : 0, ' ');
}

std::string ratio_text(const std::optional<double>& r) {
  if (!r) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", *r);
  return buf;
}

std::optional<double> ratio(double numerator, double denominator) {
  if (!(denominator > 0)) return std::nullopt;
  return numerator / denominator;
}

nlohmann::json optional_number(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

// One epoch has no spread: "std" is null then, not 0.
nlohmann::json to_json(const MeanStd& v) {
  return {{"mean", v.mean}, {"std", v.n < 2 ? nlohmann::json(nullptr) : nlohmann::json(v.std)}, {"epochs", v.n}};
}

}  // namespace

const RunResult* Summary::find(const std::string& key) const {
  for (const auto& r : runs)
    if (r.key == key) return &r;
  return nullptr;
}

void compute_speedups(Summary& s) {
  s.speedups = {};
  const RunResult *one = s.find("dp_single"), *many = s.find("dp_multi");
  if (one && many) {
    s.speedups.dp_tokens_per_sec_ratio = ratio(many->stats.tokens_per_sec.mean, one->stats.tokens_per_sec.mean);
    s.speedups.dp_training_time_speedup = ratio(one->stats.training_time.mean, many->stats.training_time.mean);
  }
  const RunResult *mp = s.find("model_parallel"), *pp = s.find("pipeline");
  if (mp && pp) {
    s.speedups.pp_tokens_per_sec_ratio = ratio(pp->stats.tokens_per_sec.mean, mp->stats.tokens_per_sec.mean);
    s.speedups.pp_training_time_speedup = ratio(mp->stats.training_time.mean, pp->stats.training_time.mean);
    const auto mp_fwd = forward_only_stats(mp->run), pp_fwd = forward_only_stats(pp->run);
    if (mp_fwd && pp_fwd) s.speedups.pp_forward_tokens_per_sec_ratio = ratio(pp_fwd->mean, mp_fwd->mean);
  }
  if (pp && pp->run.microbatches > 0 && pp->run.stages > 0) {
    const double m = static_cast<double>(pp->run.microbatches), p = static_cast<double>(pp->run.stages);
    s.speedups.pp_forward_ideal_speedup = m * p / (m + p - 1);
  }
}

std::string format_epochs(const std::vector<int64_t>& e) {
  if (e.empty()) return "-";
  bool contiguous = true;
  for (size_t i = 1; i < e.size(); ++i) contiguous = contiguous && e[i] == e[i - 1] + 1;
  if (e.size() == 1) return std::to_string(e[0]);
  if (contiguous) return std::to_string(e.front()) + "-" + std::to_string(e.back());
  std::string out;
  for (size_t i = 0; i < e.size(); ++i) out += (i ? "," : "") + std::to_string(e[i]);
  return out;
}

void print_table(std::ostream& out, const Summary& s) {
  out << "Benchmark summary: per epoch, training time is the mean over ranks and tokens/s the sum over ranks;\n"
         "the first epoch is dropped as warm-up (when there are more); mean ± standard deviation over epochs.\n\n";
  if (s.runs.empty()) {
    out << "(no runs found)\n";
  } else {
    std::vector<std::vector<std::string>> rows = {
        {"run", "configuration", "epochs used", "training time (s)", "tokens/s"}};
    for (const auto& r : s.runs) {
      std::string key = r.key;
      for (auto& c : key) c = c == '_' ? '-' : c;
      rows.push_back({"--" + key, r.run.describe(), format_epochs(r.stats.epochs_used),
                      format_mean_std(r.stats.training_time), format_mean_std(r.stats.tokens_per_sec)});
    }
    std::vector<size_t> width(rows[0].size(), 0);
    for (const auto& row : rows)
      for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], columns(row[c]));
    for (const auto& row : rows) {
      for (size_t c = 0; c < row.size(); ++c) out << (c ? "  " : "") << pad(row[c], c + 1 < row.size() ? width[c] : 0);
      out << "\n";
    }
  }
  out << "\nspeedups (higher is better):\n"
      << "  data parallel      tokens/s multi / single:               "
      << ratio_text(s.speedups.dp_tokens_per_sec_ratio)
      << "   training time single / multi:               " << ratio_text(s.speedups.dp_training_time_speedup)
      << "\n"
      << "  pipeline parallel  tokens/s pipeline / model parallel:    "
      << ratio_text(s.speedups.pp_tokens_per_sec_ratio)
      << "   training time model parallel / pipeline:    " << ratio_text(s.speedups.pp_training_time_speedup)
      << "\n"
      << "  pipeline, forward only: tokens/s pipeline / model parallel: "
      << ratio_text(s.speedups.pp_forward_tokens_per_sec_ratio)
      << "   ideal m·p/(m+p-1):                          " << ratio_text(s.speedups.pp_forward_ideal_speedup)
      << "\n";
}

nlohmann::json to_json(const Summary& s) {
  nlohmann::json runs = nlohmann::json::object();
  for (const auto& r : s.runs) {
    nlohmann::json per_epoch = nlohmann::json::array();
    for (const auto& t : totals_per_epoch(r.run))
      per_epoch.push_back({{"epoch", t.epoch}, {"training_time", t.training_time}, {"tokens_per_sec", t.tokens_per_sec}});
    runs[r.key] = {{"source", r.run.source},
                   {"files", r.run.files},
                   {"configuration", r.run.describe()},
                   {"program", r.run.program},
                   {"preset", r.run.preset},
                   {"mode", r.run.mode},
                   {"world_size", r.run.world_size},
                   {"batch_size", r.run.batch_size},
                   {"epochs_used", r.stats.epochs_used},
                   {"first_epoch_dropped", r.stats.first_epoch_dropped},
                   {"training_time", to_json(r.stats.training_time)},
                   {"tokens_per_sec", to_json(r.stats.tokens_per_sec)},
                   {"per_epoch", per_epoch}};
    if (const auto fwd = forward_only_stats(r.run)) runs[r.key]["forward_only_tokens_per_sec"] = to_json(*fwd);
  }
  const auto& sp = s.speedups;
  const int m = s.schedule.micro_batches, n = s.schedule.stages;
  return {
      {"definitions",
       {{"training_time", "seconds of training per epoch (validation excluded), mean over ranks"},
        {"tokens_per_sec", "tokens processed per second of training, summed over ranks"},
        {"epochs", "the first epoch is dropped as warm-up when there are more; then mean and sample "
                   "standard deviation over the remaining epochs"},
        {"dp_tokens_per_sec_ratio", "tokens/s of --dp-multi / tokens/s of --dp-single"},
        {"dp_training_time_speedup", "training time of --dp-single / training time of --dp-multi"},
        {"pp_tokens_per_sec_ratio", "tokens/s of --pipeline / tokens/s of --model-parallel"},
        {"pp_training_time_speedup", "training time of --model-parallel / training time of --pipeline"},
        {"pp_forward_tokens_per_sec_ratio",
         "forward-only tokens/s (run_pipeline's validation) of --pipeline / the same of --model-parallel"},
        {"pp_forward_ideal_speedup", "m·p / (m + p - 1) for the --pipeline run's m micro-batches and p stages"}}},
      {"runs", runs},
      {"speedups",
       {{"dp_tokens_per_sec_ratio", optional_number(sp.dp_tokens_per_sec_ratio)},
        {"dp_training_time_speedup", optional_number(sp.dp_training_time_speedup)},
        {"pp_tokens_per_sec_ratio", optional_number(sp.pp_tokens_per_sec_ratio)},
        {"pp_training_time_speedup", optional_number(sp.pp_training_time_speedup)},
        {"pp_forward_tokens_per_sec_ratio", optional_number(sp.pp_forward_tokens_per_sec_ratio)},
        {"pp_forward_ideal_speedup", optional_number(sp.pp_forward_ideal_speedup)}}},
      {"schedule",
       {{"micro_batches", m},
        {"stages", n},
        {"clocks", m + n - 1},
        {"bubble_fraction", static_cast<double>(n - 1) / (m + n - 1)}}},
      {"figures", s.figures},
      {"warnings", s.warnings},
      {"notes", s.notes}};
}

}  // namespace kit::plots
