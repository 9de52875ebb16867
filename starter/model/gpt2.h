// GPT-2 (Radford et al. 2019) with Hugging Face's module and parameter names:
//   wte, wpe, h.N.ln_1, h.N.attn.c_attn, h.N.attn.c_proj, h.N.ln_2,
//   h.N.mlp.c_fc, h.N.mlp.c_proj, ln_f, and lm_head tied to wte.
// Linear weights are stored as torch::nn::Linear stores them: (out, in).
// Hugging Face's Conv1D stores (in, out); model/checkpoint_layout.h transposes between them.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "kit/config.h"

namespace kit {

// Causal self-attention: position t attends to positions <= t only.
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GPT2Config& cfg);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};
  torch::nn::Dropout attn_dropout{nullptr}, resid_dropout{nullptr};
  int64_t n_head() const { return n_head_; }

 private:
  int64_t n_head_;
};
TORCH_MODULE(CausalSelfAttention);

// The feed-forward part: Linear(C, 4C), tanh-GELU, Linear(4C, C), dropout.
class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const GPT2Config& cfg);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(MLP);

// One transformer block, pre-norm: x + attn(ln_1(x)), then x + mlp(ln_2(x)).
// Tensor in, tensor out, so a torch::nn::Sequential can hold it (Problem 2).
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GPT2Config& cfg);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  MLP mlp{nullptr};
};
TORCH_MODULE(Block);

// The language model. forward(idx) = head(blocks(embed(idx))); the three parts are
// public so that model parallelism can place and pipeline the blocks.
class GPT2Impl : public torch::nn::Module {
 public:
  // cfg.vocab_size must be set (> 0) by now.
  explicit GPT2Impl(const GPT2Config& cfg);

  torch::Tensor forward(const torch::Tensor& idx);  // (B, T) int64 -> logits (B, T, V)
  torch::Tensor embed(const torch::Tensor& idx);    // wte(idx) + wpe(pos), dropout
  torch::Tensor head(const torch::Tensor& hidden);  // ln_f, then lm_head (= wte^T)

  const GPT2Config& config() const { return cfg_; }

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  // lm_head has no parameter of its own: it is wte's weight, so parameters()
  // lists the tied weight once and data parallelism reduces it once.

 private:
  void init_weights();
  GPT2Config cfg_;
};
TORCH_MODULE(GPT2);

// Number of distinct parameter elements (the tied weight counted once).
int64_t count_parameters(const torch::nn::Module& model);

// A GPT-2 of the given preset whose vocabulary is vocab_size where the preset leaves it open
// (the gpt2 preset keeps its 50257), built right after torch::manual_seed(seed) so every
// process gets the same weights. kit::Error when vocab_size or seq_len exceed the preset's.
GPT2 build_model(GPT2Config cfg, int64_t vocab_size, int64_t seq_len, uint64_t seed);

}  // namespace kit
