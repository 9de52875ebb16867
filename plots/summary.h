// The numbers behind the figures, as a table on stdout and as submit_figures/summary.json.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "run_metrics.h"
#include "schedule_grid.h"
#include "statistics.h"

namespace kit::plots {

struct RunResult {
  std::string key;  // "dp_single", "dp_multi", "model_parallel", "pipeline", "single"
  Run run;
  RunStats stats;
};

// Higher is better for all four.
struct Speedups {
  std::optional<double> dp_tokens_per_sec_ratio;   // tokens/s of the multi-device run / single-device run
  std::optional<double> dp_training_time_speedup;  // training time single / multi
  std::optional<double> pp_tokens_per_sec_ratio;   // tokens/s pipeline parallel / model parallel
  std::optional<double> pp_training_time_speedup;  // training time model parallel / pipeline parallel
  // Forward only (run_pipeline's validation, the part the pipe overlaps): tokens/s pipeline /
  // model parallel, and the ideal m·p / (m + p - 1) of the pipeline run's m micro-batches on p
  // stages (each stage's work split evenly, no communication cost).
  std::optional<double> pp_forward_tokens_per_sec_ratio;
  std::optional<double> pp_forward_ideal_speedup;
};

struct Summary {
  std::vector<RunResult> runs;  // the runs found, in flag order
  Speedups speedups;
  ScheduleSize schedule;
  std::vector<std::string> figures;   // the PNG files written
  std::vector<std::string> warnings;  // e.g. a run with one epoch only
  std::vector<std::string> notes;     // e.g. a figure skipped for want of a run
  const RunResult* find(const std::string& key) const;
};

// Fills summary.speedups from the runs present.
void compute_speedups(Summary& summary);

// "2-4", "2,4,5" or "1": the epochs that were averaged.
std::string format_epochs(const std::vector<int64_t>& epochs);

void print_table(std::ostream& out, const Summary& summary);
nlohmann::json to_json(const Summary& summary);

}  // namespace kit::plots
