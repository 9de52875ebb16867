// masked_cross_entropy: per-example mean over counted tokens, then mean over examples.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "train/loss.h"

namespace {
using torch::indexing::Slice;

// Example b counts its first 1 + b % T tokens. The counts differ between examples and
// between shards, so a mean over all tokens of the batch (or of a shard) and a mean of
// per-example means give different answers.
torch::Tensor uneven_mask(int64_t B, int64_t T) {
  auto mask = torch::zeros({B, T});
  for (int64_t b = 0; b < B; ++b) mask.index_put_({b, Slice(0, 1 + b % T)}, 1.0);
  return mask;
}
}  // namespace

TEST(MaskedCrossEntropy, MatchesAHandComputation) {
  // Two examples, three positions, four classes.
  const std::vector<std::vector<std::vector<double>>> logits = {
      {{1.0, 2.0, 0.5, -1.0}, {0.0, 0.0, 3.0, 1.0}, {2.0, -2.0, 0.0, 0.0}},
      {{-1.0, 0.5, 0.5, 2.0}, {1.5, 1.0, -0.5, 0.0}, {0.0, 1.0, 2.0, 3.0}}};
  const std::vector<std::vector<int64_t>> labels = {{1, 2, 0}, {3, 0, 2}};
  const std::vector<std::vector<double>> mask = {{1, 1, 0}, {0, 1, 0}};

  double expected = 0;
  for (size_t b = 0; b < 2; ++b) {
    double sum = 0, count = 0;
    for (size_t t = 0; t < 3; ++t) {
      if (mask[b][t] == 0) continue;
      double z = 0;
      for (double l : logits[b][t]) z += std::exp(l);
      sum += std::log(z) - logits[b][t][labels[b][t]];
      count += 1;
    }
    expected += sum / count / 2.0;
  }

  auto L = torch::empty({2, 3, 4});
  auto Y = torch::empty({2, 3}, torch::kLong);
  auto M = torch::empty({2, 3});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 3; ++t) {
      Y[b][t] = labels[b][t];
      M[b][t] = mask[b][t];
      for (int64_t v = 0; v < 4; ++v) L[b][t][v] = logits[b][t][v];
    }
  EXPECT_NEAR(kit::masked_cross_entropy(L, Y, M).item<double>(), expected, 1e-5)
      << "want: per example, the mean of -log softmax over its counted tokens; then the mean over examples";
}

TEST(MaskedCrossEntropy, MeanOverEqualShardsEqualsWholeBatch) {
  torch::manual_seed(0);
  const int64_t B = 8, T = 6, V = 7;
  auto logits = torch::randn({B, T, V}, torch::requires_grad());
  auto labels = torch::randint(V, {B, T}, torch::kLong);
  auto mask = uneven_mask(B, T);
  auto whole = kit::masked_cross_entropy(logits, labels, mask);
  whole.backward();
  auto whole_grad = logits.grad().clone();

  for (int64_t W : {2, 4}) {
    logits.mutable_grad().zero_();
    double mean = 0;
    for (int64_t r = 0; r < W; ++r) {
      auto rows = Slice(r * B / W, (r + 1) * B / W);
      auto shard = kit::masked_cross_entropy(logits.index({rows}), labels.index({rows}), mask.index({rows})) / W;
      shard.backward();  // gradients accumulate as an all-reduce SUM / W would combine them
      mean += shard.item<double>();
    }
    EXPECT_NEAR(mean, whole.item<double>(), 1e-6) << "the mean of " << W << " shard losses differs from the "
                                                  << "whole batch's loss: data parallelism would train differently";
    EXPECT_LT((logits.grad() - whole_grad).abs().max().item<double>(), 1e-7)
        << "the averaged gradients of " << W << " shards differ from the whole batch's gradients";
  }
}

TEST(MaskedCrossEntropy, MaskedPositionsDoNotInfluenceLossOrGradients) {
  torch::manual_seed(0);
  const int64_t B = 3, T = 5, V = 6;
  auto mask = uneven_mask(B, T);
  auto logits = torch::randn({B, T, V});
  auto labels = torch::randint(V, {B, T}, torch::kLong);
  // Same counted positions, anything else at the masked ones.
  auto masked = (mask == 0);
  auto other_logits = torch::where(masked.unsqueeze(-1), 10 * torch::randn({B, T, V}), logits);
  auto other_labels = torch::where(masked, (labels + 1) % V, labels);

  auto a = logits.clone().requires_grad_(true), b = other_logits.clone().requires_grad_(true);
  auto la = kit::masked_cross_entropy(a, labels, mask), lb = kit::masked_cross_entropy(b, other_labels, mask);
  la.backward();
  lb.backward();
  EXPECT_NEAR(la.item<double>(), lb.item<double>(), 1e-6) << "values at masked positions changed the loss";
  auto grad_at_masked = a.grad().index({masked}).abs().max().item<double>();
  EXPECT_EQ(grad_at_masked, 0.0) << "masked positions receive gradient";
  EXPECT_GT(a.grad().index({~masked}).abs().max().item<double>(), 0.0) << "counted positions receive no gradient";
}

TEST(MaskedCrossEntropy, ExampleWithNoCountedTokenContributesZeroNotNaN) {
  auto logits = torch::randn({2, 3, 4});
  auto labels = torch::zeros({2, 3}, torch::kLong);
  auto mask = torch::tensor({{1.f, 1.f, 1.f}, {0.f, 0.f, 0.f}});
  auto both = kit::masked_cross_entropy(logits, labels, mask).item<double>();
  auto first = kit::masked_cross_entropy(logits.index({Slice(0, 1)}), labels.index({Slice(0, 1)}),
                                         mask.index({Slice(0, 1)}))
                   .item<double>();
  ASSERT_TRUE(std::isfinite(both)) << "an example with an empty mask made the loss " << both;
  EXPECT_NEAR(both, first / 2, 1e-6) << "an empty example should count as a zero loss in the mean";
}
