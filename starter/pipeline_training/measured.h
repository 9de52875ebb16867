// What a pipeline rank measured in its batches, as the files the programs write: the
// --timeline JSON (simulate.h's timeline format with this rank's row, plus every timed
// batch's actions), the --save dict's timeline tensor and the memory record. Used by
// train_parallel.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipeline_training/executor.h"

namespace kit::pp {

// One action as a row [op (0 = F, 1 = B), micro-batch, chunk, stage, start, end, recv].
nlohmann::json action_row(const ActionTime& a);

// One timed batch: {"step", "clock_origin", "actions": action_row per action}.
nlohmann::json step_json(const BatchResult& r, int64_t step);

// The (actions, 6) float64 rows op, micro-batch, chunk, stage, start, end (seconds).
torch::Tensor timeline_tensor(const std::vector<ActionTime>& t);

// This rank's timeline of one batch in timeline_to_json's format, only row `rank` filled,
// with "rank", "measured": true and the rank's idle share as its bubble_fraction.
nlohmann::json rank_timeline_json(const std::vector<ActionTime>& t, const PipelineShape& shape, int rank,
                                  int64_t peak_kept);

// What one batch kept alive on a rank, in bytes beyond what was held when it started: the
// peak during the batch (transients included) and the most held between two actions.
struct BatchMemory {
  int64_t peak = 0, kept = 0;
};

// {"measured": true, "peak_bytes", "kept_bytes"}, or {"measured": false, "why"} when the run
// did not count (`counted` false) or computes on a device kit::memory cannot count.
nlohmann::json memory_json(bool counted, const torch::Device& device, const BatchMemory& m);

}  // namespace kit::pp
