// Problem 2.1: split_module (the original's _split_module in pipeline/partition.py).
#include "pipeline/partition.h"

#include <torch/torch.h>

#include "kit/errors.h"

namespace kit {

// Walk the layers in order and keep a "current" partition:
//   1. Find the layer's stage. If the layer is a WithDevice (for an AnyModule `any`,
//      any.ptr()->as<WithDeviceImpl>() is not null), its stage() is the answer and its
//      module() the layer to keep. Otherwise ask stage_of_parameters(name, *any.ptr()).
//   2. When the stage differs from the current partition's stage, close the current
//      partition (push it and its stage to the result) and open a new one. Compare with
//      the PREVIOUS layer only: grouping layers by stage in a map would merge A, B, A
//      into two partitions and run the last layer before the middle one.
//   3. Append the layer to the current partition under its own name:
//      partition->push_back(name, any_module).
// Do not forget the partition still open after the last layer.
// Useful: modules->named_children() gives (name, shared_ptr<Module>) in order, and
// modules->begin()/end() the same layers as torch::nn::AnyModule (what push_back takes).
Partitions split_module(const torch::nn::Sequential& modules) {
  if (!modules || modules->is_empty())
    throw Error("split_module got an empty Sequential: a pipeline needs at least one layer");
  Partitions result;
  // BEGIN SOLUTION 2.1 split_module
  const auto names = modules->named_children().keys();
  torch::nn::Sequential current{nullptr};
  StageDevice current_stage;
  for (size_t k = 0; k < modules->size(); ++k) {
    torch::nn::AnyModule layer = modules->begin()[static_cast<std::ptrdiff_t>(k)];
    StageDevice stage;
    if (const auto* pinned = layer.ptr()->as<WithDeviceImpl>()) {
      stage = pinned->stage();
      layer = pinned->module();
    } else {
      stage = stage_of_parameters(names[k], *layer.ptr());
    }
    // wrong: one partition per device, so A,B,A gives two partitions and reorders layers
    bool found = false;
    for (size_t j = 0; j < result.stages.size(); ++j)
      if (result.stages[j] == stage) {
        result.partitions[j]->push_back(names[k], layer);
        found = true;
      }
    if (!found) {
      result.partitions.push_back(torch::nn::Sequential());
      result.stages.push_back(stage);
      result.partitions.back()->push_back(names[k], layer);
    }
  }
  // END SOLUTION
  return result;
}

}  // namespace kit
