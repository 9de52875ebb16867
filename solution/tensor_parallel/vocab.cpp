// Problem 4.4: the vocab-parallel embedding and cross-entropy (see vocab.h). The
// constructor and load_full are given; the forward and the loss are yours.
#include <torch/torch.h>

#include "kit/errors.h"
#include "tensor_parallel/layers.h"
#include "tensor_parallel/mappings.h"
#include "tensor_parallel/vocab.h"

namespace kit::tp {
namespace F = torch::nn::functional;

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t V, int64_t C, dist::Group g)
    : vocab_size(V), group(std::move(g)) {
  const int64_t part = shard_size(V, group.size(), "the vocabulary size vocab_size");
  vocab_start = group.rank() * part;
  vocab_end = vocab_start + part;
  weight = register_parameter("weight", torch::zeros({part, C}));
}

void VocabParallelEmbeddingImpl::load_full(const torch::Tensor& full_weight) {
  torch::NoGradGuard no_grad;
  weight.copy_(full_weight.narrow(0, vocab_start, vocab_end - vocab_start));
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& ids) {
  // BEGIN SOLUTION 4.4 VocabParallelEmbedding::forward
  const torch::Tensor outside = (ids < vocab_start) | (ids >= vocab_end);
  // Other ranks' tokens look up row 0 here, then count as zeros: their owner supplies them.
  const torch::Tensor local = (ids - vocab_start).masked_fill(outside, 0);
  torch::Tensor e = F::embedding(local, weight).masked_fill(outside.unsqueeze(-1), 0.0);
  return reduce_from_tensor_parallel(e, group);
  // END SOLUTION
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                           const torch::Tensor& mask, int64_t vocab_start, const dist::Group& group) {
  // BEGIN SOLUTION 4.4 vocab_parallel_cross_entropy
  const int64_t part = logits.size(-1);
  // At least float32 (half logits would lose the small differences the loss is made of).
  const torch::Tensor z = logits.to(torch::promote_types(logits.scalar_type(), torch::kFloat32));
  // The global max over the whole vocabulary. Subtracting any constant leaves the loss as
  // it is, so no gradient flows through it (detach): it only keeps exp from overflowing.
  torch::Tensor max = std::get<0>(z.detach().max(-1)).contiguous();
  dist::all_reduce(max, dist::ReduceOp::MAX, group);
  const torch::Tensor shifted = z - max.unsqueeze(-1);
  // Σ exp over every rank's slice; g's identity backward gives each slice its share.
  const torch::Tensor sum_exp = reduce_from_tensor_parallel(shifted.exp().sum(-1), group);
  // The target's logit lives on exactly one rank; the others contribute 0.
  const torch::Tensor y = labels.to(logits.device());
  const torch::Tensor outside = (y < vocab_start) | (y >= vocab_start + part);
  const torch::Tensor local = (y - vocab_start).masked_fill(outside, 0);
  torch::Tensor target = shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0);
  target = reduce_from_tensor_parallel(target, group);
  const torch::Tensor token_loss = sum_exp.log() - target;  // (B, T)
  // Reduced over tokens exactly as kit::masked_cross_entropy does.
  const torch::Tensor m = mask.to(logits.device(), z.scalar_type());
  const torch::Tensor per_example = (token_loss * m).sum(1) / m.sum(1).clamp_min(1.0);
  return per_example.mean();
  // END SOLUTION
}

}  // namespace kit::tp
