// Problem 4.4: the vocab-parallel embedding and cross-entropy on t = 1, 2, 4 ranks against
// torch::nn::Embedding and kit::masked_cross_entropy on the whole vocabulary. The tokens and
// labels fall in every rank's range; the loss is also checked with logits around 1e4, where
// exp overflows float32 unless the global max is subtracted first.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "tensor_parallel/vocab.h"
#include "tp_test_util.h"
#include "train/loss.h"

namespace {
namespace tp = kit::tp;
using tp_test::close;

constexpr int64_t kFullVocab = 64, kDim = 16;  // the whole vocabulary, split among the ranks

// The embedding of a vocabulary of V tokens (V / t rows per rank) against the full one.
void embedding_equals_full(const kit::dist::Group& group, int64_t V) {
  const int64_t r = group.rank(), part = V / group.size(), rows = V % 4 == 0 ? 4 : 1;
  torch::manual_seed(4);
  torch::nn::Embedding full(V, kDim);
  // Every token once (so every rank's range), then some repeated ones.
  const auto ids = torch::cat({torch::randperm(V).view({rows, V / rows}), torch::randint(V, {rows, 8})}, 1);
  const auto G = torch::randn({rows, V / rows + 8, kDim});
  auto want = full(ids);
  (want * G).sum().backward();

  tp::VocabParallelEmbedding par(V, kDim, group);
  par->load_full(full->weight.detach());
  ASSERT_EQ(par->vocab_start, r * part);
  auto got = par(ids);
  EXPECT_TRUE(close(got, want)) << "embeddings of tokens from every rank's range, rank " << r << " of "
                                << group.size() << ", " << part << " rows per rank (tokens outside a rank's range "
                                << "must count as zeros there)";
  (got * G).sum().backward();
  EXPECT_TRUE(close(par->weight.grad(), full->weight.grad().narrow(0, r * part, part)))
      << "this rank's rows of the embedding gradient";
}

TP_ROLE(vocab_parallel_embedding) { embedding_equals_full(group, kFullVocab); }
// One row per rank (V = t): the smallest shard, where an index other than 0 is out of range.
TP_ROLE(vocab_parallel_embedding_one_row) { embedding_equals_full(group, group.size()); }

// Logits (B, T, V) = offset + scale * N(0, 1); labels in every rank's range; a mask with a
// row that counts nothing and a row that counts part of its tokens.
// With boundary_labels, the counted labels are the first and last ids of every rank's range
// for t = 2 and 4 (0, 15, 16, 31, 32, 47, 48, 63), where an off-by-one in the range test puts
// a label on two ranks or on none.
void expect_cross_entropy_equal(const kit::dist::Group& group, double offset, double scale,
                                bool boundary_labels = false) {
  const int64_t r = group.rank(), part = kFullVocab / group.size(), B = 3, T = 5;
  torch::manual_seed(6);
  const auto logits = offset + scale * torch::randn({B, T, kFullVocab});
  auto labels = torch::randint(kFullVocab, {B, T}, torch::kInt64);
  labels[0] = torch::tensor({0, 17, 34, 51, 63}, torch::kInt64);  // one in each quarter of the vocabulary
  if (boundary_labels) {
    labels[0] = torch::tensor({15, 16, 31, 32, 47}, torch::kInt64);
    labels[2] = torch::tensor({5, 9, 48, 63, 0}, torch::kInt64);  // its first two are masked out below
  }
  auto mask = torch::ones({B, T});
  mask[1].zero_();
  mask[2].narrow(0, 0, 2).zero_();

  auto full = logits.clone().requires_grad_(true);
  auto want = kit::masked_cross_entropy(full, labels, mask);
  want.backward();
  ASSERT_TRUE(std::isfinite(want.item<double>())) << "the reference loss itself is not finite";

  auto local = logits.narrow(-1, r * part, part).clone().requires_grad_(true);
  auto got = tp::vocab_parallel_cross_entropy(local, labels, mask, r * part, group);
  ASSERT_EQ(got.dim(), 0) << "the loss is a scalar";
  EXPECT_TRUE(close(got, want)) << "loss " << got.item<double>() << ", expected " << want.item<double>()
                                << " (logits around " << offset << "), rank " << r << " of " << group.size();
  got.backward();
  EXPECT_TRUE(close(local.grad(), full.grad().narrow(-1, r * part, part)))
      << "gradient of this rank's logits slice (logits around " << offset << ")";
}

TP_ROLE(vocab_parallel_cross_entropy) { expect_cross_entropy_equal(group, 0, 3); }
TP_ROLE(vocab_parallel_cross_entropy_large_logits) { expect_cross_entropy_equal(group, 1e4, 2); }
TP_ROLE(vocab_parallel_cross_entropy_boundaries) { expect_cross_entropy_equal(group, 0, 3, true); }

// Embedding and cross-entropy on tensor groups smaller than the world: world 4, groups {0, 2}
// and {1, 3} (a rank's vocabulary range comes from its rank in the group, not in the world).
TP_ROLE(vocab_subgroups) {
  const kit::dist::Group mine = tp_test::strided_pair_group();
  rank_role_vocab_parallel_embedding(mine);
  rank_role_vocab_parallel_cross_entropy(mine);
  rank_role_vocab_parallel_cross_entropy_boundaries(mine);
}

TEST(TPVocab, EmbeddingEqualsFullEmbeddingForTokensOfEveryRank) {
  tp_test::expect_ranks_pass_for({1, 2, 4}, "vocab_parallel_embedding", "embedding");
}

TEST(TPVocab, EmbeddingWithOneTokenPerRank) {
  tp_test::expect_ranks_pass_for({2, 4}, "vocab_parallel_embedding_one_row", "embedding of a vocabulary of t tokens");
}

TEST(TPVocab, CrossEntropyEqualsMaskedCrossEntropy) {
  tp_test::expect_ranks_pass_for({1, 2, 4}, "vocab_parallel_cross_entropy", "cross-entropy");
}

TEST(TPVocab, CrossEntropyOfLabelsOnTheShardBoundaries) {
  tp_test::expect_ranks_pass_for({2, 4}, "vocab_parallel_cross_entropy_boundaries",
                                 "cross-entropy, labels on the shard boundaries");
}

TEST(TPVocab, EmbeddingAndCrossEntropyOnTensorGroupsSmallerThanTheWorld) {
  tp_test::expect_all_ranks_pass(tp_test::run_ranks(4, "vocab_subgroups"), 4,
                                 "embedding and cross-entropy on groups {0, 2} and {1, 3}");
}

TEST(TPVocab, CrossEntropyOfLogitsAround1e4IsFiniteAndEqual) {
  tp_test::expect_ranks_pass_for({1, 2, 4}, "vocab_parallel_cross_entropy_large_logits",
                                 "cross-entropy, logits around 1e4");
}

}  // namespace
