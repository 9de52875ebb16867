// One pipeline rank's forward and backward of a batch (see pipeline_training/forward_backward.h).
#include "pipeline_training/forward_backward.h"

#include <torch/torch.h>

namespace kit::pp {

BatchResult forward_backward(const PipelineRank& rank, const RunBatch& run, const torch::Tensor& idx,
                             const torch::Tensor& labels, const torch::Tensor& mask, int64_t microbatches,
                             bool zero_in_place) {
  for (const auto& chunk : rank.chunks)
    for (auto& p : chunk->parameters()) {
      if (!zero_in_place)
        p.mutable_grad() = torch::Tensor();
      else if (p.grad().defined())
        p.mutable_grad().zero_();
    }
  BatchResult result = run(split_batch(idx, labels, mask, microbatches));
  sum_tied_gradients(rank.chunks, rank.shape, rank.rank, rank.tied);
  return result;
}

}  // namespace kit::pp
