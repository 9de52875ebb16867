// Problem 4.3: the parallel attention and MLP (see blocks.h). Constructors and load_full
// are given; shard_qkv and the two forwards are yours.
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "kit/errors.h"
#include "tensor_parallel/blocks.h"

namespace kit::tp {

torch::Tensor shard_qkv(const torch::Tensor& full, int64_t rank, int64_t t) {
  // BEGIN SOLUTION 4.3 shard_qkv
  const int64_t C = full.size(0) / 3, part = C / t;
  std::vector<torch::Tensor> rows;
  for (int64_t which = 0; which < 3; ++which)  // q, k, v
    rows.push_back(full.narrow(0, which * C + rank * part, part));
  return torch::cat(rows, 0);
  // END SOLUTION
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
  // BEGIN SOLUTION 4.3 ParallelAttention::forward
  const int64_t B = x.size(0), T = x.size(1), local = n_head_local * head_size;
  // This rank's q, k and v for its own heads, each (B, T, local).
  auto qkv = c_attn(x).split(local, /*dim=*/2);
  auto heads = [&](const torch::Tensor& u) { return u.view({B, T, n_head_local, head_size}).transpose(1, 2); };
  auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_size)));
  auto future = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
  att = att.masked_fill(future, -std::numeric_limits<float>::infinity());
  att = attn_dropout(torch::softmax(att, -1));
  auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, T, local});
  return resid_dropout(c_proj(y));  // row-parallel: the all-reduce, then the bias once
  // END SOLUTION
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
  // BEGIN SOLUTION 4.3 ParallelMLP::forward
  // GELU acts elementwise, so it applies to c_fc's slice without any communication.
  return dropout(c_proj(torch::gelu(c_fc(x), "tanh")));
  // END SOLUTION
}

}  // namespace kit::tp
