// Problem 4.4: the vocabulary split across a tensor-parallel group of t ranks.
//
// Rank r owns the contiguous token range [r*V/t, (r+1)*V/t): its rows of wte, which is
// both the embedding table and (tied, as in the full model) the lm_head's weight.
//
//   VocabParallelEmbedding: each rank looks up the tokens it owns, writes zeros for the
//     others (masking them: their ids are not rows of its table), and g sums the ranks'
//     results, so every rank ends with every token's embedding.
//   vocab_parallel_cross_entropy: the loss from each rank's logits slice (B, T, V/t),
//     never gathering the whole (B, T, V) (at GPT-2's vocabulary that is the largest
//     tensor of the model). loss = log Σ_v exp(z_v - M) - (z_target - M), with three
//     all-reduces over the group: the global max M (MAX; without it exp overflows for
//     large logits), the sum of exponentials (SUM) and the target logit, which one rank
//     owns and the others count as 0 (SUM).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "dist/dist.h"

namespace kit::tp {

class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  VocabParallelEmbeddingImpl(int64_t vocab_size, int64_t embedding_dim, dist::Group group);
  // ids (B, T) int64 in [0, vocab_size) -> (B, T, embedding_dim), whole on every rank.
  torch::Tensor forward(const torch::Tensor& ids);
  void load_full(const torch::Tensor& full_weight);  // this rank's rows of a (V, C) table

  torch::Tensor weight;  // (V/t, C): rows vocab_start .. vocab_end - 1
  int64_t vocab_size, vocab_start, vocab_end;
  dist::Group group;
};
TORCH_MODULE(VocabParallelEmbedding);

// logits: this rank's slice (B, T, V/t) of the vocabulary, for tokens [vocab_start,
// vocab_start + V/t); labels (B, T) int64 in [0, V); mask (B, T), 1 where a label counts.
// Returns the same scalar as kit::masked_cross_entropy on the whole logits (each example's
// mean over its counted tokens, then the mean over examples), on every rank, and its
// gradient reaches each rank's logits slice.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                           const torch::Tensor& mask, int64_t vocab_start, const dist::Group& group);

}  // namespace kit::tp
