// Problem 6 (given code): a pipeline stage with tensor-parallel blocks (see grid/stage.h).
#include "grid/stage.h"

#include <torch/torch.h>

#include "kit/precision.h"
#include "model/checkpoint.h"
#include "pipeline_training/recompute.h"
#include "tensor_parallel/blocks.h"
#include "tensor_parallel/mappings.h"
#include "tensor_parallel/sharding.h"

namespace kit::grid {
namespace F = torch::nn::functional;

TensorParallelStageImpl::TensorParallelStageImpl(const GPT2Config& cfg, int64_t stage, int64_t n_stages,
                                                 dist::Group tensor)
    : pp::StageModuleImpl(cfg, stage, n_stages), tensor_(std::move(tensor)) {
  tp::check_divisible(cfg, tensor_.size());
  if (is_first() || is_last())
    wte = register_module("wte", tp::VocabParallelEmbedding(cfg.vocab_size, cfg.n_embd, tensor_));
  if (is_first()) {
    wpe = register_module("wpe", torch::nn::Embedding(cfg.n_positions, cfg.n_embd));
    drop = register_module("drop", torch::nn::Dropout(cfg.dropout));
  }
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t b = 0; b < num_blocks(); ++b) h->push_back(tp::ParallelBlock(cfg, tensor_));
  if (is_last())
    ln_f = register_module("ln_f", torch::nn::LayerNorm(
                                       torch::nn::LayerNormOptions({cfg.n_embd}).eps(cfg.layer_norm_eps)));
}

void TensorParallelStageImpl::load_full(const GPT2Impl& full) {
  const TensorDict shard = tp::shard_state_dict(kit::state_dict(full), tensor_.rank(), tensor_.size());
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : named_model_parameters()) {
    if (!shard.contains(name)) throw Error("load_full: the model has no " + name);
    p.copy_(shard.at(name));
  }
}

torch::Tensor TensorParallelStageImpl::forward(const torch::Tensor& input) {
  check_input(input);
  torch::Tensor x = input;
  if (is_first()) {
    auto pos = torch::arange(x.size(1), torch::TensorOptions().dtype(torch::kLong).device(x.device()));
    x = drop(wte(x) + wpe(pos));
  }
  for (const auto& block : *h) {  // through recompute when set_recompute(true) (Problem 6.3)
    tp::ParallelBlockImpl* b = block->as<tp::ParallelBlockImpl>();
    x = pp::run_block([b](const torch::Tensor& in) { return b->forward(in); }, x, recompute_enabled());
  }
  if (!is_last()) return x;
  // The output projection: column-parallel over the vocabulary, its weight this rank's rows
  // of wte. f before it, because each rank's slice contributes to the gradient of x.
  return F::linear(tp::copy_to_tensor_parallel(ln_f(x), tensor_), wte->weight);
}

torch::Tensor TensorParallelStageImpl::loss(const torch::Tensor& logits, const pp::MicroBatch& mb) const {
  if (!is_last())
    throw Error("stage " + std::to_string(stage()) + " has no loss: only the last stage computes it");
  return tp::vocab_parallel_cross_entropy(full_precision(logits), mb.labels, mb.mask, wte->vocab_start, tensor_) *
         mb.weight;
}

TensorDict TensorParallelStageImpl::whole_state_dict() const {
  const int64_t t = tensor_.size();
  std::vector<TensorDict> shards(static_cast<size_t>(t));
  for (const auto& [name, p] : named_model_parameters()) {
    const auto parts = dist::all_gather(p.detach().contiguous(), tensor_);
    for (int64_t r = 0; r < t; ++r) shards[static_cast<size_t>(r)].insert(name, parts[static_cast<size_t>(r)].cpu());
  }
  return tp::merge_state_dicts(shards);
}

}  // namespace kit::grid
