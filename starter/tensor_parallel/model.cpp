// Given code for Problem 4: GPT-2 from the parallel layers (see model.h).
#include "tensor_parallel/model.h"

#include <torch/torch.h>

#include "kit/errors.h"
#include "kit/precision.h"
#include "model/checkpoint.h"
#include "tensor_parallel/blocks.h"
#include "tensor_parallel/mappings.h"
#include "tensor_parallel/sharding.h"

namespace kit::tp {
namespace F = torch::nn::functional;

TensorParallelGPT2Impl::TensorParallelGPT2Impl(const GPT2Config& cfg, dist::Group group)
    : cfg_(cfg), group_(std::move(group)) {
  if (cfg.vocab_size <= 0)
    throw Error("GPT2Config.vocab_size is not set: take it from the tokenizer before building the model");
  check_divisible(cfg, group_.size());
  wte = register_module("wte", VocabParallelEmbedding(cfg.vocab_size, cfg.n_embd, group_));
  wpe = register_module("wpe", torch::nn::Embedding(cfg.n_positions, cfg.n_embd));
  drop = register_module("drop", torch::nn::Dropout(cfg.dropout));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.n_layer; ++i) h->push_back(ParallelBlock(cfg, group_));
  ln_f = register_module("ln_f", torch::nn::LayerNorm(
                                     torch::nn::LayerNormOptions({cfg.n_embd}).eps(cfg.layer_norm_eps)));
}

torch::Tensor TensorParallelGPT2Impl::forward(const torch::Tensor& idx) {
  if (idx.dim() != 2 || idx.scalar_type() != torch::kLong)
    throw Error("TensorParallelGPT2 expects token ids as a (batch, time) int64 tensor");
  const int64_t T = idx.size(1);
  if (T > cfg_.n_positions)
    throw Error("sequence of " + std::to_string(T) + " tokens is longer than the model's context (n_positions = " +
                std::to_string(cfg_.n_positions) + ")");
  if (idx.numel() > 0 && (idx.min().item<int64_t>() < 0 || idx.max().item<int64_t>() >= cfg_.vocab_size))
    throw Error("a token id is outside the vocabulary [0, " + std::to_string(cfg_.vocab_size) + ")");
  auto pos = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  auto x = drop(wte(idx) + wpe(pos));
  for (const auto& block : *h) x = block->as<ParallelBlockImpl>()->forward(x);
  x = ln_f(x);
  // The lm_head: a column-parallel layer whose weight is this rank's wte rows (tied).
  return F::linear(copy_to_tensor_parallel(x, group_), wte->weight);
}

torch::Tensor TensorParallelGPT2Impl::loss(const torch::Tensor& idx, const torch::Tensor& labels,
                                           const torch::Tensor& mask) {
  return vocab_parallel_cross_entropy(full_precision(forward(idx)), labels, mask, wte->vocab_start, group_);
}

TensorDict TensorParallelGPT2Impl::shard_state_dict() const {
  TensorDict out;
  for (const auto& p : named_parameters()) out.insert(p.key(), p.value().detach().cpu());
  return out;
}

void TensorParallelGPT2Impl::load_shard(const TensorDict& shard) {
  torch::NoGradGuard no_grad;
  auto params = named_parameters();
  for (const auto& kv : shard)
    if (!params.contains(kv.key()))
      throw Error("load_shard: " + kv.key() + " is not a parameter of the tensor-parallel model");
  for (auto& p : params) {
    if (!shard.contains(p.key())) throw Error("load_shard: the shard has no " + p.key());
    const torch::Tensor& w = shard.at(p.key());
    if (w.sizes() != p.value().sizes())
      throw Error("load_shard: " + p.key() + " has shape " + c10::str(w.sizes()) + " in the shard but " +
                  c10::str(p.value().sizes()) + " on this rank (t = " + std::to_string(group_.size()) +
                  "): was the shard made for another tensor-parallel size?");
    p.value().copy_(w);
  }
}

void TensorParallelGPT2Impl::load_full(const GPT2Impl& full) {
  load_shard(tp::shard_state_dict(kit::state_dict(full), group_.rank(), group_.size()));
}

TensorDict TensorParallelGPT2Impl::full_state_dict() const {
  const int64_t t = group_.size();
  std::vector<TensorDict> shards(static_cast<size_t>(t));
  for (const auto& p : named_parameters()) {
    const auto parts = dist::all_gather(p.value().detach().contiguous(), group_);
    for (int64_t r = 0; r < t; ++r) shards[static_cast<size_t>(r)].insert(p.key(), parts[static_cast<size_t>(r)].cpu());
  }
  TensorDict full = merge_state_dicts(shards);
  full.insert("lm_head.weight", full.at("wte.weight"));  // tied, as kit::state_dict writes it
  return full;
}

ParameterBytes parameter_bytes(const torch::nn::Module& model) {
  ParameterBytes b;
  for (const auto& p : model.named_parameters()) {
    const int64_t n = p.value().numel() * static_cast<int64_t>(p.value().element_size());
    if (p.key().rfind("h.", 0) == 0)
      b.blocks += n;
    else if (p.key().rfind("wte.", 0) == 0 || p.key().rfind("wpe.", 0) == 0)
      b.embeddings += n;
    else
      b.other += n;
  }
  return b;
}

}  // namespace kit::tp
