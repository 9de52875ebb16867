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
  // TODO(Problem 4.4 VocabParallelEmbedding::forward): your code here.
  throw kit::NotImplemented("Problem 4.4 VocabParallelEmbedding::forward");
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels,
                                           const torch::Tensor& mask, int64_t vocab_start, const dist::Group& group) {
  // TODO(Problem 4.4 vocab_parallel_cross_entropy): your code here.
  throw kit::NotImplemented("Problem 4.4 vocab_parallel_cross_entropy");
}

}  // namespace kit::tp
