// Problem 7.1: causal self-attention for one slice of a sequence, with the keys and values of
// the earlier slices of the same sequence cached (TeraPipe, Li et al., ICML 2021).
//
// In a causal Transformer token i attends to tokens <= i only. Feed a sequence as slices
// s_1, s_2, ... one after another: slice s, of l tokens after c tokens of context, needs the
// keys and values of those c tokens (cached when the earlier slices ran, on the same stage)
// and its own; its token i (position c + i) may see positions 0 .. c + i:
//
//              keys:  cached (c)        this slice (l)
//   query i:          all visible       j <= i visible, j > i masked
//
// The cache grows by each slice's keys and values (torch::cat, so gradients flow back from
// later slices into the earlier slices' keys and values: backward through the whole
// sequence equals plain GPT-2's).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "model/gpt2.h"

namespace kit::terapipe {

// The keys and values of the tokens before the next slice, per block: (B, n_head, c, hs).
struct KVCache {
  torch::Tensor k, v;  // undefined while c = 0
  int64_t length() const { return k.defined() ? k.size(2) : 0; }
};

// Problem 7.1 (solution in terapipe/sliced_attention.cpp). x: (B, l, C), the slice's input to
// attention (after ln_1). Returns attn's output for the slice (B, l, C), c_proj and dropout
// applied as CausalSelfAttentionImpl::forward does, and appends the slice's keys and values
// to `cache`.
torch::Tensor sliced_attention(CausalSelfAttentionImpl& attn, const torch::Tensor& x, KVCache& cache);

// Given: one block on a slice: x + attention(ln_1(x)) with the block's cache, then the MLP.
torch::Tensor sliced_block(BlockImpl& block, const torch::Tensor& x, KVCache& cache);

// Given: GPT-2's logits for idx (B, L), computed slice by slice (lengths summing to L),
// each block keeping its cache across the slices. Equals model->forward(idx).
torch::Tensor sliced_forward(GPT2Impl& model, const torch::Tensor& idx, const std::vector<int64_t>& lengths);

}  // namespace kit::terapipe
