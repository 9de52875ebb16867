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
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "dist/dist.h"
#include "kit/config.h"
#include "model/gpt2.h"
#include "tensor_parallel/layers.h"

namespace kit::tp {

// Dropout inside the tensor-parallel region, on activations the ranks split (attention's
// probabilities: each rank holds its own heads'): each rank draws its own mask, as Megatron-LM's
// model-parallel generator does, where torch::nn::Dropout would draw the same mask on every
// rank (they share the seed, so head h on rank 0 and head h + n_head/t on rank 1 would drop
// alike). The mask comes from a seed drawn once from the CPU generator every rank shares, plus
// the rank: the shared generator advances the same on every rank (the dropouts outside the
// region, on activations every rank holds whole, still agree), the same seed comes back when
// recomputation puts the generators back (pipeline_training/recompute.h), and torch::manual_seed
// starts it all again. x's device's generator draws the mask and is put back afterwards. Not for
// threads that draw from the same generator at once (the kit runs one rank per process).
torch::Tensor dropout_per_rank(const torch::Tensor& x, double p, bool training, int64_t rank);

// torch::nn::Dropout (its options, train and eval) drawing through dropout_per_rank with the
// group's rank.
class RegionDropoutImpl : public torch::nn::Cloneable<RegionDropoutImpl> {
 public:
  RegionDropoutImpl(double p, dist::Group group);
  void reset() override {}
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::DropoutOptions options;
  dist::Group group;
};
TORCH_MODULE(RegionDropout);

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
  RegionDropout attn_dropout{nullptr};   // on this rank's heads: its own masks
  torch::nn::Dropout resid_dropout{nullptr};  // after the all-reduce: the same on every rank
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
