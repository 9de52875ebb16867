// Problem 4.3: GPT-2's attention and MLP split across a tensor-parallel group of t ranks.
//
//   ParallelAttention: the n_head heads are split, n_head/t per rank. Hugging Face's fused
//     c_attn (3C, C) holds q, k and v one after the other (rows [0, C), [C, 2C), [2C, 3C)),
//     and head h is rows [h*hs, (h+1)*hs) of each, so rank r's c_attn shard is its heads'
//     rows of q, then of k, then of v (shard_qkv), a column-parallel layer of 3C/t outputs.
//     Attention runs on the rank's heads alone; c_proj is row-parallel: its input slice is
//     exactly the rank's heads' outputs.
//   ParallelMLP: c_fc column-parallel (C -> 4C/t), GELU on the slice, c_proj row-parallel.
//
// One all-reduce each in forward (c_proj's g) and in backward (c_attn's or c_fc's f).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "dist/dist.h"
#include "kit/config.h"
#include "model/gpt2.h"
#include "tensor_parallel/layers.h"

namespace kit::tp {

// Rank r's share of a fused q|k|v tensor of 3C rows (c_attn's weight (3C, C) or bias (3C)):
// rows r*C/t .. (r+1)*C/t of q, then the same rows of k, then of v: (3C/t, ...).
torch::Tensor shard_qkv(const torch::Tensor& full, int64_t rank, int64_t t);

class ParallelAttentionImpl : public torch::nn::Module {
 public:
  ParallelAttentionImpl(const GPT2Config& cfg, dist::Group group);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) whole -> (B, T, C) whole
  void load_full(const CausalSelfAttentionImpl& full);

  ColumnParallelLinear c_attn{nullptr};  // C -> 3C/t (this rank's q, k, v)
  RowParallelLinear c_proj{nullptr};     // C/t -> C
  torch::nn::Dropout attn_dropout{nullptr}, resid_dropout{nullptr};
  int64_t n_head_local, head_size;
  dist::Group group;
};
TORCH_MODULE(ParallelAttention);

class ParallelMLPImpl : public torch::nn::Module {
 public:
  ParallelMLPImpl(const GPT2Config& cfg, dist::Group group);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) whole -> (B, T, C) whole
  void load_full(const MLPImpl& full);

  ColumnParallelLinear c_fc{nullptr};  // C -> 4C/t
  RowParallelLinear c_proj{nullptr};   // 4C/t -> C
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(ParallelMLP);

// Given: a pre-norm block of the two (layer norms replicated on every rank).
class ParallelBlockImpl : public torch::nn::Module {
 public:
  ParallelBlockImpl(const GPT2Config& cfg, dist::Group group);
  torch::Tensor forward(torch::Tensor x);
  void load_full(const BlockImpl& full);

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  ParallelAttention attn{nullptr};
  ParallelMLP mlp{nullptr};
};
TORCH_MODULE(ParallelBlock);

}  // namespace kit::tp
