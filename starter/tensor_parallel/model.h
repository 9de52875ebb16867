// GPT-2 built from Problem 4's parallel layers for a tensor-parallel group of t ranks:
// the same modules and parameter names as model/gpt2.h, each rank holding its share
// (tensor_parallel/sharding.h). Every rank runs the whole batch; a block communicates
// twice forward and twice backward, the embedding once forward, the loss three times.
//
//   kit::tp::TensorParallelGPT2 model(cfg, group);
//   model->load_full(*full);                          // this rank's shard of a full model
//   auto loss = model->loss(idx, labels, mask);       // == masked_cross_entropy(full(idx), ...)
//   auto dict = model->full_state_dict();             // collective: the whole model, Kit layout
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>

#include "dist/dist.h"
#include "kit/config.h"
#include "model/checkpoint_layout.h"
#include "model/gpt2.h"
#include "tensor_parallel/vocab.h"

namespace kit::tp {

class TensorParallelGPT2Impl : public torch::nn::Module {
 public:
  // kit::Error when t = group.size() does not divide n_head, n_embd or vocab_size.
  TensorParallelGPT2Impl(const GPT2Config& cfg, dist::Group group);

  // idx (B, T) -> this rank's logits slice (B, T, V/t), for tokens [wte->vocab_start, wte->vocab_end).
  torch::Tensor forward(const torch::Tensor& idx);
  // The training loss (kit::masked_cross_entropy's), from the slices: no rank holds (B, T, V).
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& labels, const torch::Tensor& mask);

  void load_full(const GPT2Impl& full);         // this rank's shard of a whole model
  void load_shard(const TensorDict& shard);     // a shard_state_dict (every name, exact shapes)
  TensorDict shard_state_dict() const;          // this rank's parameters under the full names
  // Collective over the group: every rank's shard gathered into the whole model's dict
  // (Kit layout, lm_head.weight included), on every rank. load_state_dict / export_checkpoint
  // (model/checkpoint.h) take it as they take the first assignment's model.
  TensorDict full_state_dict() const;

  const GPT2Config& config() const { return cfg_; }
  const dist::Group& group() const { return group_; }

  VocabParallelEmbedding wte{nullptr};  // also the lm_head (tied): this rank's vocabulary rows
  torch::nn::Embedding wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::ModuleList h{nullptr};  // ParallelBlock
  torch::nn::LayerNorm ln_f{nullptr};

 private:
  GPT2Config cfg_;
  dist::Group group_;
};
TORCH_MODULE(TensorParallelGPT2);

// Bytes of parameters this rank holds, split by kind: for the memory goal (the blocks'
// parameters per rank within 1 % of 1/t of the full model's).
struct ParameterBytes {
  int64_t blocks = 0, embeddings = 0, other = 0;
  int64_t total() const { return blocks + embeddings + other; }
};
ParameterBytes parameter_bytes(const torch::nn::Module& model);

}  // namespace kit::tp
