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
  // TODO(Problem 7.1 sliced_attention): your code here.
  throw kit::NotImplemented("Problem 7.1 sliced_attention");
}

}  // namespace kit::terapipe
