#include "model/gpt2.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "kit/errors.h"
#include "model/attention.h"

namespace kit {
namespace F = torch::nn::functional;

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPT2Config& cfg) : n_head_(cfg.n_head) {
  if (cfg.n_embd % cfg.n_head != 0)
    throw Error("n_embd (" + std::to_string(cfg.n_embd) + ") must be divisible by n_head (" +
                std::to_string(cfg.n_head) + ")");
  c_attn = register_module("c_attn", torch::nn::Linear(cfg.n_embd, 3 * cfg.n_embd));
  c_proj = register_module("c_proj", torch::nn::Linear(cfg.n_embd, cfg.n_embd));
  attn_dropout = register_module("attn_dropout", torch::nn::Dropout(cfg.dropout));
  resid_dropout = register_module("resid_dropout", torch::nn::Dropout(cfg.dropout));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_head_;
  auto qkv = c_attn(x).split(C, /*dim=*/2);
  // (B, T, C) -> (B, nh, T, hs)
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head_, hs}).transpose(1, 2); };
  auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  // model/attention.h: the formula's matmuls on the CPU, the fused kernel on a GPU.
  auto y = causal_attention(q, k, v, attn_dropout->options.p(), attn_dropout->is_training(),
                            default_attention_kernel(x.device()))
               .transpose(1, 2)
               .contiguous()
               .view({B, T, C});
  return resid_dropout(c_proj(y));
}

MLPImpl::MLPImpl(const GPT2Config& cfg) {
  c_fc = register_module("c_fc", torch::nn::Linear(cfg.n_embd, 4 * cfg.n_embd));
  c_proj = register_module("c_proj", torch::nn::Linear(4 * cfg.n_embd, cfg.n_embd));
  dropout = register_module("dropout", torch::nn::Dropout(cfg.dropout));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  return dropout(c_proj(torch::gelu(c_fc(x), "tanh")));  // GPT-2 uses the tanh GELU
}

BlockImpl::BlockImpl(const GPT2Config& cfg) {
  auto ln = torch::nn::LayerNormOptions({cfg.n_embd}).eps(cfg.layer_norm_eps);
  ln_1 = register_module("ln_1", torch::nn::LayerNorm(ln));
  attn = register_module("attn", CausalSelfAttention(cfg));
  ln_2 = register_module("ln_2", torch::nn::LayerNorm(ln));
  mlp = register_module("mlp", MLP(cfg));
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  x = x + attn(ln_1(x));
  return x + mlp(ln_2(x));
}

GPT2Impl::GPT2Impl(const GPT2Config& cfg) : cfg_(cfg) {
  if (cfg.vocab_size <= 0)
    throw Error("GPT2Config.vocab_size is not set: take it from the tokenizer before building the model");
  if (cfg.n_layer <= 0 || cfg.n_embd <= 0 || cfg.n_head <= 0 || cfg.n_positions <= 0)
    throw Error("GPT2Config '" + cfg.name + "': n_layer, n_embd, n_head and n_positions must be positive");
  wte = register_module("wte", torch::nn::Embedding(cfg.vocab_size, cfg.n_embd));
  wpe = register_module("wpe", torch::nn::Embedding(cfg.n_positions, cfg.n_embd));
  drop = register_module("drop", torch::nn::Dropout(cfg.dropout));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.n_layer; ++i) h->push_back(Block(cfg));
  ln_f = register_module("ln_f", torch::nn::LayerNorm(
                                     torch::nn::LayerNormOptions({cfg.n_embd}).eps(cfg.layer_norm_eps)));
  init_weights();
}

// GPT-2's initialisation: N(0, 0.02) weights, zero biases, and the residual
// projections scaled by 1/sqrt(2 * n_layer) so the residual stream does not grow with depth.
void GPT2Impl::init_weights() {
  torch::NoGradGuard no_grad;
  const double resid_std = cfg_.init_std / std::sqrt(2.0 * static_cast<double>(cfg_.n_layer));
  for (auto& p : named_parameters()) {
    const std::string& name = p.key();
    auto& t = p.value();
    if (name.find("ln_") != std::string::npos) {
      (name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0) ? t.fill_(1.0) : t.zero_();
    } else if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      t.zero_();
    } else if (name.find("c_proj.weight") != std::string::npos) {
      t.normal_(0.0, resid_std);
    } else {
      t.normal_(0.0, cfg_.init_std);
    }
  }
}

torch::Tensor GPT2Impl::embed(const torch::Tensor& idx) {
  if (idx.dim() != 2 || idx.scalar_type() != torch::kLong)
    throw Error("GPT2 expects token ids as a (batch, time) int64 tensor, got " + std::to_string(idx.dim()) +
                "-d " + std::string(c10::toString(idx.scalar_type())) + ": add a batch dimension with unsqueeze(0) "
                "and convert with .to(torch::kLong)");
  const int64_t T = idx.size(1);
  if (T > cfg_.n_positions)
    throw Error("sequence of " + std::to_string(T) + " tokens is longer than the model's context (n_positions = " +
                std::to_string(cfg_.n_positions) + "): use a shorter --seq-len or a preset with more positions");
  // An out-of-range id would otherwise fail deep inside the embedding lookup.
  if (idx.numel() > 0) {
    const int64_t lo = idx.min().item<int64_t>(), hi = idx.max().item<int64_t>();
    if (lo < 0 || hi >= cfg_.vocab_size)
      throw Error("token id " + std::to_string(lo < 0 ? lo : hi) + " is outside the vocabulary [0, " +
                  std::to_string(cfg_.vocab_size) + "): set GPT2Config.vocab_size to the tokenizer's size");
  }
  auto pos = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  return drop(wte(idx) + wpe(pos));
}

torch::Tensor GPT2Impl::head(const torch::Tensor& hidden) {
  auto x = ln_f(hidden.to(ln_f->weight.device()));
  return F::linear(x.to(wte->weight.device()), wte->weight);  // lm_head tied to wte
}

torch::Tensor GPT2Impl::forward(const torch::Tensor& idx) {
  auto x = embed(idx);
  for (const auto& block : *h) x = block->as<Block>()->forward(x.to(block->parameters()[0].device()));
  return head(x);
}

int64_t count_parameters(const torch::nn::Module& model) {
  int64_t n = 0;
  std::vector<const void*> seen;
  for (const auto& p : model.parameters()) {
    const void* ptr = p.unsafeGetTensorImpl();
    if (std::find(seen.begin(), seen.end(), ptr) != seen.end()) continue;
    seen.push_back(ptr);
    n += p.numel();
  }
  return n;
}

GPT2 build_model(GPT2Config cfg, int64_t vocab_size, int64_t seq_len, uint64_t seed) {
  if (cfg.vocab_size <= 0) cfg.vocab_size = vocab_size;
  if (vocab_size > cfg.vocab_size)
    throw Error("the tokenizer has " + std::to_string(vocab_size) + " tokens but preset '" + cfg.name +
                "' only " + std::to_string(cfg.vocab_size) + ": use a smaller --vocab-size");
  if (seq_len > cfg.n_positions)
    throw Error("sequence length " + std::to_string(seq_len) + " is longer than preset '" + cfg.name +
                "' allows (n_positions = " + std::to_string(cfg.n_positions) +
                "): use --seq-len " + std::to_string(cfg.n_positions) + " or less");
  torch::manual_seed(seed);
  return GPT2(cfg);
}

}  // namespace kit
