// Problem 4.3: the parallel attention and MLP (see blocks.h). Constructors and load_full
// are given; shard_qkv and the two forwards are yours.
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "kit/errors.h"
#include "tensor_parallel/blocks.h"

namespace kit::tp {

torch::Tensor shard_qkv(const torch::Tensor& full, int64_t rank, int64_t t) {
  // TODO(Problem 4.3 shard_qkv): your code here.
  throw kit::NotImplemented("Problem 4.3 shard_qkv");
}

ParallelAttentionImpl::ParallelAttentionImpl(const GPT2Config& cfg, dist::Group g) : group(std::move(g)) {
  const int64_t t = group.size();
  if (cfg.n_embd % cfg.n_head != 0)
    throw Error("n_embd (" + std::to_string(cfg.n_embd) + ") must be divisible by n_head (" +
                std::to_string(cfg.n_head) + ")");
  n_head_local = shard_size(cfg.n_head, t, "the number of attention heads n_head");
  head_size = cfg.n_embd / cfg.n_head;
  c_attn = register_module("c_attn", ColumnParallelLinear(cfg.n_embd, 3 * cfg.n_embd, group));
  c_proj = register_module("c_proj", RowParallelLinear(cfg.n_embd, cfg.n_embd, group));
  attn_dropout = register_module("attn_dropout", RegionDropout(cfg.dropout, group));
  resid_dropout = register_module("resid_dropout", torch::nn::Dropout(cfg.dropout));
}

void ParallelAttentionImpl::load_full(const CausalSelfAttentionImpl& full) {
  torch::NoGradGuard no_grad;
  const int64_t r = group.rank(), t = group.size();
  c_attn->weight.copy_(shard_qkv(full.c_attn->weight, r, t));
  c_attn->bias.copy_(shard_qkv(full.c_attn->bias, r, t));
  c_proj->load_full(full.c_proj->weight, full.c_proj->bias);
}

torch::Tensor ParallelAttentionImpl::forward(const torch::Tensor& x) {
  // TODO(Problem 4.3 ParallelAttention::forward): your code here.
  throw kit::NotImplemented("Problem 4.3 ParallelAttention::forward");
}

ParallelMLPImpl::ParallelMLPImpl(const GPT2Config& cfg, dist::Group group) {
  c_fc = register_module("c_fc", ColumnParallelLinear(cfg.n_embd, 4 * cfg.n_embd, group));
  c_proj = register_module("c_proj", RowParallelLinear(4 * cfg.n_embd, cfg.n_embd, group));
  dropout = register_module("dropout", torch::nn::Dropout(cfg.dropout));
}

void ParallelMLPImpl::load_full(const MLPImpl& full) {
  c_fc->load_full(full.c_fc->weight, full.c_fc->bias);
  c_proj->load_full(full.c_proj->weight, full.c_proj->bias);
}

torch::Tensor ParallelMLPImpl::forward(const torch::Tensor& x) {
  // TODO(Problem 4.3 ParallelMLP::forward): your code here.
  throw kit::NotImplemented("Problem 4.3 ParallelMLP::forward");
}

}  // namespace kit::tp
