// The judge's reference for the TeraPipe tests (tests/judge/judge.h): a slice's attention with
// the earlier slices' keys and values cached, written with the model's given modules only, never
// with the student's sliced_attention (the judge links the starter's stub of it). With dropout on
// it draws what the kit's sliced attention draws, in the same order, from the default generator:
// per slice, attn_dropout over the slice's rows of scores (B, n_head, l, c + l) after the causal
// mask and the softmax, then resid_dropout over c_proj's output (B, l, C).
#pragma once
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

#include "model/gpt2.h"
#include "terapipe/sliced_attention.h"

namespace terapipe_test {

inline torch::Tensor reference_sliced_attention(kit::CausalSelfAttentionImpl& attn, const torch::Tensor& x,
                                                kit::terapipe::KVCache& cache) {
  const int64_t B = x.size(0), l = x.size(1), C = x.size(2), H = attn.n_head(), hs = C / H;
  auto qkv = attn.c_attn(x).split(C, 2);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, l, H, hs}).transpose(1, 2); };
  torch::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  const int64_t c = cache.length();
  if (c > 0) {
    k = torch::cat({cache.k, k}, 2);
    v = torch::cat({cache.v, v}, 2);
  }
  cache.k = k;
  cache.v = v;
  auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hs)));
  auto future = torch::ones({l, c + l}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(c + 1);
  att = att.masked_fill(future, -std::numeric_limits<float>::infinity());
  att = attn.attn_dropout(torch::softmax(att, -1));
  auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, l, C});
  return attn.resid_dropout(attn.c_proj(y));
}

// One block on a slice, as the given sliced_block: x + attention(ln_1(x)), then the MLP.
inline torch::Tensor reference_sliced_block(kit::BlockImpl& block, const torch::Tensor& x,
                                            kit::terapipe::KVCache& cache) {
  torch::Tensor y = x + reference_sliced_attention(*block.attn, block.ln_1(x), cache);
  return y + block.mlp(block.ln_2(y));
}

// sliced_forward's steps around the reference: the whole sequence embedded at once, then slice
// by slice through every block, the head on all the slices' outputs.
inline torch::Tensor reference_sliced_forward(kit::GPT2Impl& model, const torch::Tensor& idx,
                                              const std::vector<int64_t>& lengths) {
  const torch::Tensor x = model.embed(idx);
  std::vector<kit::terapipe::KVCache> caches(model.h->size());
  std::vector<torch::Tensor> outputs;
  int64_t c = 0;
  for (const int64_t l : lengths) {
    torch::Tensor s = x.narrow(1, c, l);
    for (size_t b = 0; b < model.h->size(); ++b) s = reference_sliced_block(*model.h[b]->as<kit::BlockImpl>(), s, caches[b]);
    outputs.push_back(s);
    c += l;
  }
  return model.head(torch::cat(outputs, 1));
}

// What the token-slice pipeline computes on one rank holding every stage in order: each slice
// embedded at its own positions (its own embedding dropout), through every block, the head;
// the slices' logits side by side (B, L, V).
inline torch::Tensor reference_pipeline_logits(kit::GPT2Impl& model, const torch::Tensor& idx,
                                               const std::vector<int64_t>& lengths) {
  std::vector<kit::terapipe::KVCache> caches(model.h->size());
  std::vector<torch::Tensor> outputs;
  int64_t c = 0;
  for (const int64_t l : lengths) {
    const auto pos = torch::arange(c, c + l, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
    torch::Tensor s = model.drop(model.wte(idx.narrow(1, c, l)) + model.wpe(pos));
    for (size_t b = 0; b < model.h->size(); ++b) s = reference_sliced_block(*model.h[b]->as<kit::BlockImpl>(), s, caches[b]);
    outputs.push_back(model.head(s));
    c += l;
  }
  return torch::cat(outputs, 1);
}

}  // namespace terapipe_test
