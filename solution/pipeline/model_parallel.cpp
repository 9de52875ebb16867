// Problem 2.3: prepare_pipeline_parallel (the original's _prepare_pipeline_parallel in
// pipeline/model_parallel.py).
#include "pipeline/model_parallel.h"

#include <torch/torch.h>

#include "kit/errors.h"

namespace kit {

// Put GPT-2's transformer blocks (model_->h) into a torch::nn::Sequential, in order, and
// wrap it in a Pipe: pipe_ = Pipe(sequential, split_size, threads_per_stage).
// The blocks are already placed (block_stages_[b] is block b's stage), but their
// parameters cannot say so on a CPU, where every stage is the same device: pin each block
// to its stage with WithDevice(block, block_stages_[b]).
// model_->h->ptr<BlockImpl>(b) is block b as a std::shared_ptr<BlockImpl>.
// forward() already sends the embeddings' output through pipe_ once it is set.
void GPT2ModelParallel::prepare_pipeline_parallel(int64_t split_size, int64_t threads_per_stage) {
  // BEGIN SOLUTION 2.3 prepare_pipeline_parallel
  torch::nn::Sequential blocks;
  for (size_t b = 0; b < model_->h->size(); ++b)
    blocks->push_back(WithDevice(model_->h->ptr<BlockImpl>(b), block_stages_[b]));
  pipe_ = Pipe(blocks, split_size, threads_per_stage);
  // END SOLUTION
}

}  // namespace kit
