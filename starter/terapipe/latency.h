// Problem 7 (given): the latency t(l, c) of one pipeline stage on a slice of l tokens after c
// tokens of context, measured and modelled, for TeraPipe's slicing dynamic program.
//
// The dynamic program asks for t at every (l, c) with l + c <= L: far more points than one
// wants to time. So we time a grid (profile_latency) and fit a model with one term per cost:
//
//   t(l, c) = a + b * l + d * l * (c + l)
//
//   a              fixed cost of a slice, whatever its size: kernel launches, the messages
//                  between stages;
//   b * l          the work per token: the q/k/v and output projections, the MLP, layer norms;
//   d * l * (c+l)  attention: sliced_attention builds an l x (c + l) score matrix (and the
//                  same again to weight the values), so later slices, with more context,
//                  cost more at the same length. This is why the best slicing is not uniform.
//
//   auto samples = profile_latency(*model, 0, 2, 1, latency_grid(128), contexts, 5);
//   LatencyModel m = fit_latency(samples);                  // fit_error(m, samples) says how well
//   Slicing s = optimal_slicing(128, 4, m.latency());
//
// A least-squares fit on noisy timings may give a negative coefficient; check fit_error and
// profile a wider grid (or more repeats) when it is large.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "terapipe/slicing.h"

namespace kit {
class GPT2Impl;
}

namespace kit::terapipe {

// One timing: a stage's forward and backward on l tokens after c tokens of context.
struct LatencySample {
  int64_t l = 0, c = 0;
  double seconds = 0;
};

// t(l, c) = a + b * l + d * l * (c + l), in seconds.
struct LatencyModel {
  double a = 0, b = 0, d = 0;
  double operator()(int64_t l, int64_t c) const;
  Latency latency() const;  // a copy of this model, for optimal_slicing and evaluate
  std::string to_string() const;
};

// Ordinary least squares on the features 1, l and l * (c + l). kit::Error when there are
// fewer than 3 samples, a sample has l < 1, c < 0 or seconds not finite and positive, or the
// samples cannot tell the three terms apart (one slice length only, one (l, c) only, ...).
LatencyModel fit_latency(const std::vector<LatencySample>& samples);

// How far the model is from the measurements, relative to the measured seconds.
struct FitError {
  double rms_relative = 0, max_relative = 0;
};
FitError fit_error(const LatencyModel& model, const std::vector<LatencySample>& samples);

// Times forward + backward of blocks [first_block, first_block + num_blocks) of `model` (one
// pipeline stage) with sliced_block on a random (batch, l, n_embd) slice, each block's cache
// holding c tokens of random keys and values, for every l in `lengths` (outer loop) and c in
// `contexts` (inner loop) with l + c <= n_positions; other pairs are skipped. The median of
// `repeats` timings after one warm-up, on the model's device and dtype. The model's gradients
// are zeroed afterwards. kit::Error for a block range outside the model, batch or repeats
// below 1, l < 1, c < 0, or no pair left.
std::vector<LatencySample> profile_latency(GPT2Impl& model, int64_t first_block, int64_t num_blocks, int64_t batch,
                                           const std::vector<int64_t>& lengths, const std::vector<int64_t>& contexts,
                                           int repeats);

// 1, 2, 3, 4, 6, 8, 12, 16, ... up to L, and L itself: powers of two and the points halfway
// between them, dense where the fixed cost dominates and sparse where the terms grow smoothly.
// Lengths: latency_grid(L); contexts: 0 and then latency_grid(L - 1). kit::Error when L < 1.
std::vector<int64_t> latency_grid(int64_t L);

// {"a": .., "b": .., "d": ..}; reading names a missing or non-numeric key.
nlohmann::json to_json(const LatencyModel& model);
LatencyModel latency_model_from_json(const nlohmann::json& j);
// The "model" of a file train_parallel --profile wrote. kit::Error naming `flag` and the fix
// when it cannot be read or is not such a file.
LatencyModel read_latency_model(const std::string& path, const std::string& flag = "--latency");
// [{"l": .., "c": .., "seconds": ..}, ...]
nlohmann::json to_json(const std::vector<LatencySample>& samples);

// What train_parallel --profile measures and writes: profile_latency of blocks [0, num_blocks)
// with `rows` rows on lengths latency_grid(L) and contexts 0, latency_grid(L - 1), fitted.
// The file read_latency_model reads: {"model", "fit_error": {rms_relative, max_relative},
// "samples"} added to `about` (what was profiled, for the reader).
struct StageProfile {
  std::vector<LatencySample> samples;
  LatencyModel fit;
  FitError error;
};
StageProfile profile_stage(GPT2Impl& model, int64_t num_blocks, int64_t rows, int64_t L, int repeats);
nlohmann::json latency_file_json(const StageProfile& profile, nlohmann::json about);

}  // namespace kit::terapipe
