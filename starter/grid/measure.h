// What a training run measures around the trainer's step (grid/trainer.h), kept out of the
// step as llm.c keeps its diagnostics apart: a probe that fills the step's hooks, a record of
// the finished steps' pipelines, and the metrics fields they give (bin/README.md, train_parallel).
//
//   MemoryProbe probe{device, counted};
//   PipelineTimes times(trainer.pipeline_shape().microbatches);
//   for each step k: StepHooks h; probe.hook(h, trainer.optimizer(), memory && timed);
//                    r = trainer.step(..., h); times.add(r.batch, timed);
//   metrics: zero_metrics(...), times.json(r.batch, warmup), probe.most (--memory)
#pragma once
#include <torch/types.h>

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dist/dist.h"
#include "grid/trainer.h"
#include "kit/precision.h"
#include "pipeline_training/measured.h"

namespace kit::zero {
class DataParallelOptimizer;
}

namespace kit::grid {

// What the trainer's hooks count, every step: the bytes a batch's schedule keeps (sampled
// before each action, so what the schedule holds, not the transients inside one forward or
// backward) above what the rank held when it started (at m = 1, before the backward: what the
// forward saved for it, activation_bytes), the process's resident memory likewise, and the
// gradients held before the optimizer step. With timed_memory (--memory, a timed batch) also
// the kept bytes and the peak into `most`; the caller zeroes the gradients in place then
// (StepHooks::zero_in_place), as re-allocated ones would count as memory a batch keeps.
struct MemoryProbe {
  torch::Device device;
  bool counts_tensors = true;  // kit::memory counts this device's tensors
  pp::BatchMemory most;        // --memory, the timed batches
  int64_t activation = 0, rss_rise = 0, gradient_peak = 0;  // every batch
  int64_t base = 0, rss0 = 0;

  // Sets h's before_schedule, before_action, after_schedule and after_backward.
  void hook(StepHooks& h, const zero::DataParallelOptimizer& optimizer, bool timed_memory);
};

// Problem 7's measures, of any pipeline: each step's span on this rank (its last action's
// end) and each unit's compute forward and backward over the timed steps, the span of its
// action less the receives it waited in (a unit: a micro-batch, or TeraPipe's (micro-batch,
// slice); the latency model's t(l, c)).
struct PipelineTimes {
  std::vector<double> spans;
  std::vector<std::array<std::vector<double>, 2>> unit_compute;

  explicit PipelineTimes(int64_t units) : unit_compute(static_cast<size_t>(units)) {}
  void add(const pp::BatchResult& batch, bool timed);
  // pipeline_seconds (after the warm-up), unit_compute_seconds (medians) and the last batch's
  // timeline, rows [op (0 = F), unit, stage, start, end, recv].
  nlohmann::json json(const pp::BatchResult& last, int64_t warmup) const;
};

// Problem 5's fields: this rank's bytes as the ZeRO paper counts them (P parameters, d ranks
// in the data group) beside those measured from its tensors, and the data group's traffic per
// step (`data`: its counters summed over `steps` steps) beside all-reduce's.
struct ZeroAccounting {
  std::string optimizer;  // adamw, zero1, zero2, zero3
  Precision precision = Precision::FP32;
  int64_t d = 1;
  double weight_decay = 0;
  int64_t P = 0;
};
nlohmann::json zero_metrics(const ZeroAccounting& a, const zero::DataParallelOptimizer& optimizer,
                            const MemoryProbe& probe, const dist::Counters& data, double steps);

}  // namespace kit::grid
