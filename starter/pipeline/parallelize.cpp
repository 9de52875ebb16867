// GPT-2's placement on stages and its forward pass (the model-parallel baseline).
// Problem 2.3, prepare_pipeline_parallel, is in pipeline/model_parallel.cpp.
#include <torch/torch.h>

#include "kit/errors.h"
#include "pipeline/model_parallel.h"

namespace kit {

std::vector<int64_t> blocks_per_stage(int64_t n_blocks, int64_t n_stages) {
  if (n_stages < 1) throw Error("the model needs at least 1 stage (got " + std::to_string(n_stages) + ")");
  if (n_stages > n_blocks)
    throw Error(std::to_string(n_stages) + " stages for a model with " + std::to_string(n_blocks) +
                " transformer blocks would leave a stage without work: use at most " + std::to_string(n_blocks) +
                " stages, or a preset with more layers");
  std::vector<int64_t> counts(static_cast<size_t>(n_stages), n_blocks / n_stages);
  for (int64_t j = 0; j < n_blocks % n_stages; ++j) ++counts[static_cast<size_t>(j)];
  return counts;
}

GPT2ModelParallel::GPT2ModelParallel(GPT2 model, std::vector<StageDevice> stages)
    : model_(std::move(model)), stages_(std::move(stages)) {
  const auto counts = blocks_per_stage(static_cast<int64_t>(model_->h->size()), static_cast<int64_t>(stages_.size()));
  for (size_t j = 0; j < counts.size(); ++j)
    for (int64_t c = 0; c < counts[j]; ++c) block_stages_.push_back(stages_[j]);
  // The original's parallelize(): embeddings first, blocks in runs, final norm last.
  model_->wte->to(stages_.front().device);
  model_->wpe->to(stages_.front().device);
  for (size_t b = 0; b < block_stages_.size(); ++b) model_->h[b]->to(block_stages_[b].device);
  model_->ln_f->to(stages_.back().device);
}

torch::Tensor GPT2ModelParallel::forward(const torch::Tensor& idx) {
  torch::Tensor x = model_->embed(idx.to(stages_.front().device));
  if (pipeline_parallel()) {
    x = pipe_->forward(x);
  } else {
    for (size_t b = 0; b < block_stages_.size(); ++b)
      x = model_->h[b]->as<BlockImpl>()->forward(x.to(block_stages_[b].device));
  }
  return model_->head(x);  // ln_f on the last stage, the tied projection where wte is
}

}  // namespace kit
