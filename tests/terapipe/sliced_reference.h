// The judge's reference for the TeraPipe tests (tests/judge/judge.h): a slice's attention as the
// whole model's causal attention over every token so far, this slice's rows kept, written with the
// model's given modules only, never with the student's sliced_attention (the judge links the
// starter's stub of it). With dropout on
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

// What a slice's attention means, written as the whole model's causal attention: the block's
// input for every token so far (`prefix`: the earlier slices' rows, then this slice's), the
// attention of all of them computed at once with the model's layers and the causal mask, and
// only this slice's rows (the last l) kept. Dropout draws as sliced attention's does: the
// probabilities of this slice's l query rows (B, n_head, l, c + l), then c_proj's output (B, l, C).
// `prefix` grows by this slice's rows.
inline torch::Tensor reference_sliced_attention(kit::CausalSelfAttentionImpl& attn, const torch::Tensor& x,
                                                torch::Tensor& prefix) {
  prefix = prefix.defined() ? torch::cat({prefix, x}, 1) : x;
  const int64_t B = x.size(0), l = x.size(1), T = prefix.size(1), C = x.size(2), H = attn.n_head(), hs = C / H;
  const auto qkv = attn.c_attn(prefix).split(C, 2);
  const auto heads = [&](const torch::Tensor& t) { return t.view({B, T, H, hs}).transpose(1, 2); };
  const torch::Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hs));  // (B, H, T, T)
  const auto causal = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
  scores = scores.masked_fill(causal, -std::numeric_limits<double>::infinity());
  const auto probs = attn.attn_dropout(torch::softmax(scores, -1).narrow(2, T - l, l).contiguous());  // this slice's queries
  const auto y = torch::matmul(probs, v).transpose(1, 2).reshape({B, l, C});
  return attn.resid_dropout(attn.c_proj(y));
}

// One block on a slice, as the given sliced_block: x + attention(ln_1(x)), then the MLP.
inline torch::Tensor reference_sliced_block(kit::BlockImpl& block, const torch::Tensor& x, torch::Tensor& prefix) {
  torch::Tensor y = x + reference_sliced_attention(*block.attn, block.ln_1(x), prefix);
  return y + block.mlp(block.ln_2(y));
}

// sliced_forward's steps around the reference: the whole sequence embedded at once, then slice
// by slice through every block, the head on all the slices' outputs.
inline torch::Tensor reference_sliced_forward(kit::GPT2Impl& model, const torch::Tensor& idx,
                                              const std::vector<int64_t>& lengths) {
  const torch::Tensor x = model.embed(idx);
  std::vector<torch::Tensor> prefixes(model.h->size());  // each block's input so far
  std::vector<torch::Tensor> outputs;
  int64_t c = 0;
  for (const int64_t l : lengths) {
    torch::Tensor s = x.narrow(1, c, l);
    for (size_t b = 0; b < model.h->size(); ++b) s = reference_sliced_block(*model.h[b]->as<kit::BlockImpl>(), s, prefixes[b]);
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
  std::vector<torch::Tensor> prefixes(model.h->size());  // each block's input so far
  std::vector<torch::Tensor> outputs;
  int64_t c = 0;
  for (const int64_t l : lengths) {
    const auto pos = torch::arange(c, c + l, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
    torch::Tensor s = model.drop(model.wte(idx.narrow(1, c, l)) + model.wpe(pos));
    for (size_t b = 0; b < model.h->size(); ++b) s = reference_sliced_block(*model.h[b]->as<kit::BlockImpl>(), s, prefixes[b]);
    outputs.push_back(model.head(s));
    c += l;
  }
  return torch::cat(outputs, 1);
}

}  // namespace terapipe_test
