// The benchmark numbers of Problems 1.3 and 2.3, defined once:
//   1. per epoch, training time is the MEAN over ranks (the ranks run side by side, so
//      the epoch takes as long as a typical rank) and tokens/s is the SUM over ranks
//      (each rank processes its own share of the tokens);
//   2. the first epoch is dropped as warm-up (allocator, caches, thread pools), unless
//      it is the only one;
//   3. the remaining epochs give a mean and a sample standard deviation.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "run_metrics.h"

namespace kit::plots {

struct EpochTotals {
  int64_t epoch = 0;
  double training_time = 0;   // mean over ranks, seconds
  double tokens_per_sec = 0;  // sum over ranks
};

// Step 1, for every epoch of the run (ascending).
std::vector<EpochTotals> totals_per_epoch(const Run& run);

struct MeanStd {
  double mean = 0;
  double std = 0;  // sample standard deviation (n - 1); 0 for a single value, which has none (no error bar)
  size_t n = 0;
};
// Throws kit::Error on an empty list.
MeanStd mean_std(const std::vector<double>& values);

struct RunStats {
  std::vector<int64_t> epochs_used;  // the epochs averaged
  bool first_epoch_dropped = false;
  std::string warning;  // non-empty when fewer than 2 epochs are measured (no spread; warm-up kept if only one)
  MeanStd training_time, tokens_per_sec;
};

// Steps 1 to 3.
RunStats run_stats(const Run& run);

// run_pipeline's forward-only tokens/s over its epochs, the first dropped as warm-up when
// there are more (as run_stats does); nothing when the run has none.
std::optional<MeanStd> forward_only_stats(const Run& run);

// The training loss as a curve over (fractional) epochs: point k of epoch e is at
// e - 1 + (k + 1) / batches. With several ranks, the loss of a step is the mean over
// ranks of their batch losses: the kit's loss is a mean over examples, so on equal
// shards this is the loss of the whole global batch. Falls back to one point per epoch
// (train_loss at x = e) when the file has no batch losses. NaN losses are left out.
// Throws kit::Error when ranks disagree on the number of batches in an epoch.
std::vector<std::pair<double, double>> loss_curve(const Run& run);

}  // namespace kit::plots
