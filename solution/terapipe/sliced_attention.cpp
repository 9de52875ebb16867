// Problem 7.1: attention for one slice with the earlier slices' keys and values cached
// (see terapipe/sliced_attention.h).
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "kit/errors.h"
#include "terapipe/sliced_attention.h"

namespace kit::terapipe {

// 1. q, k, v of the slice from attn.c_attn (as CausalSelfAttentionImpl::forward splits
//    them), each as heads (B, n_head, l, hs).
// 2. The keys and values this slice attends to: the cache's, then its own (torch::cat along
//    the token dimension); store them back into the cache for the next slice.
// 3. Scores q kᵀ / sqrt(hs) of shape (B, n_head, l, c + l); query i (position c + i) must not
//    see key j > c + i: mask those with -inf before the softmax.
// 4. softmax, attn.attn_dropout, times v, heads back to (B, l, C), then attn.c_proj and
//    attn.resid_dropout.
torch::Tensor sliced_attention(CausalSelfAttentionImpl& attn, const torch::Tensor& x, KVCache& cache) {
  // BEGIN SOLUTION 7.1 sliced_attention
  const int64_t B = x.size(0), l = x.size(1), C = x.size(2), H = attn.n_head(), hs = C / H;
  auto qkv = attn.c_attn(x).split(C, /*dim=*/2);
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
  // Query i is position c + i: keys c + i + 1 .. c + l - 1 are its future.
  auto future = torch::ones({l, c + l}, torch::TensorOptions().dtype(torch::kBool).device(x.device()))
                    .triu(/*diagonal=*/c + 1);
  att = att.masked_fill(future, -std::numeric_limits<float>::infinity());
  att = attn.attn_dropout(torch::softmax(att, -1));
  auto y = torch::matmul(att, v).transpose(1, 2).contiguous().view({B, l, C});
  return attn.resid_dropout(attn.c_proj(y));
  // END SOLUTION
}

}  // namespace kit::terapipe
