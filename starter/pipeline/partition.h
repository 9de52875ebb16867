// Problem 2.1: cutting a sequential model into pipeline partitions.
#pragma once
#include <torch/nn/modules/container/sequential.h>

#include <vector>

#include "pipeline/stage.h"

namespace kit {

// partitions[j] runs on stages[j]. Both vectors have the same length.
struct Partitions {
  std::vector<torch::nn::Sequential> partitions;
  std::vector<StageDevice> stages;
  size_t size() const { return partitions.size(); }
};

// Splits `modules` into partitions of CONSECUTIVE layers that belong to the same stage.
// A layer's stage is the one it is pinned to with WithDevice; a layer that is not pinned
// gets the stage of its parameters (stage_of_parameters, which throws when that is unknown).
// Layers keep their order and their names; a pinned layer may be stored unwrapped.
// A new partition starts whenever the stage changes, so the layout A, B, A gives three
// partitions (the first and the last run on the same stage), not two.
// Throws kit::Error for an empty Sequential.
Partitions split_module(const torch::nn::Sequential& modules);

}  // namespace kit
