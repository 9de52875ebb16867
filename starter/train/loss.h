// The training loss: cross-entropy on target tokens only.
#pragma once
#include <torch/types.h>

namespace kit {

// logits (B, T, V), labels (B, T) int64, mask (B, T) float with 1 where the label counts.
// Each example's loss is the mean over its own counted tokens; the batch loss is the mean
// over examples. So every example weighs the same, and the mean over W equal shards of a
// batch equals the loss of the whole batch: the property data parallelism relies on.
torch::Tensor masked_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                   const torch::Tensor& mask);

}  // namespace kit
