// A GPT-2 in float64 with reproducible weights, for the tests that compare a parallel or
// sliced model with the plain one far below float32's rounding. Shared by suites.
#pragma once
#include <torch/torch.h>

#include <cstdint>

#include "kit/config.h"
#include "model/gpt2.h"

namespace kit_test {

// A GPT-2 of `cfg` with the weights that torch::manual_seed(seed) draws, in float64.
inline kit::GPT2 float64_model(const kit::GPT2Config& cfg, uint64_t seed) {
  torch::manual_seed(seed);
  kit::GPT2 model(cfg);
  model->to(torch::kFloat64);
  return model;
}

}  // namespace kit_test
