// Problem 7.1: GPT-2 fed slice by slice, with each block's keys and values cached, equals
// GPT-2 on the whole sequence: the logits and the gradient of every parameter, for one slice,
// even slices, uneven slices and one-token slices. float64, so that the comparison is tight.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "float64_model.h"
#include "kit/errors.h"
#include "model/gpt2.h"
#include "terapipe/sliced_attention.h"
#include "terapipe/slicing.h"
#include "train/loss.h"

namespace {

constexpr int64_t kSeqLen = 16;

kit::GPT2 tiny_float64_model() {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.vocab_size = 64;
  cfg.dropout = 0;
  return kit_test::float64_model(cfg, 3);
}

struct Result {
  torch::Tensor logits;
  std::vector<torch::Tensor> grads;
};

// Logits and every parameter's gradient of the masked cross-entropy, whole or sliced.
Result run(kit::GPT2& model, const std::vector<int64_t>& lengths) {
  torch::manual_seed(5);
  const auto idx = torch::randint(64, {2, kSeqLen}, torch::kLong);
  const auto labels = torch::randint(64, {2, kSeqLen}, torch::kLong);
  model->zero_grad();
  Result r;
  r.logits = lengths.empty() ? model->forward(idx) : kit::terapipe::sliced_forward(*model, idx, lengths);
  kit::masked_cross_entropy(r.logits, labels, torch::ones({2, kSeqLen})).backward();
  for (const auto& p : model->parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

void expect_sliced_equal_to_whole(const std::vector<int64_t>& lengths) {
  kit::GPT2 model = tiny_float64_model();
  const Result whole = run(model, {}), sliced = run(model, lengths);
  const std::string what = "slices " + kit::terapipe::to_string(lengths);
  ASSERT_EQ(sliced.logits.sizes(), whole.logits.sizes()) << what;
  EXPECT_LT((sliced.logits - whole.logits).abs().max().item<double>(), 1e-10) << what << ": logits";
  const auto names = model->named_parameters();
  for (size_t i = 0; i < whole.grads.size(); ++i)
    EXPECT_LT((sliced.grads[i] - whole.grads[i]).abs().max().item<double>(), 1e-10)
        << what << ": the gradient of " << names[i].key();
}

}  // namespace

TEST(SlicedAttention, OneSliceEqualsTheWholeSequence) { expect_sliced_equal_to_whole({kSeqLen}); }
TEST(SlicedAttention, EvenSlicesEqualTheWholeSequence) { expect_sliced_equal_to_whole({4, 4, 4, 4}); }
TEST(SlicedAttention, UnevenSlicesEqualTheWholeSequence) { expect_sliced_equal_to_whole({1, 5, 2, 8}); }
TEST(SlicedAttention, OneTokenSlicesEqualTheWholeSequence) {
  expect_sliced_equal_to_whole(std::vector<int64_t>(kSeqLen, 1));
}

// The cache holds every token's keys and values so far: after slices of 3 and 5 tokens, 8.
TEST(SlicedAttention, TheCacheGrowsByEachSlice) {
  kit::GPT2 model = tiny_float64_model();
  auto& attn = *model->h[0]->as<kit::BlockImpl>()->attn;
  kit::terapipe::KVCache cache;
  const auto x = torch::randn({2, 8, model->config().n_embd}, torch::kFloat64);
  kit::terapipe::sliced_attention(attn, x.narrow(1, 0, 3), cache);
  EXPECT_EQ(cache.length(), 3);
  const auto y = kit::terapipe::sliced_attention(attn, x.narrow(1, 3, 5), cache);
  EXPECT_EQ(cache.length(), 8);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 5, model->config().n_embd}));
  EXPECT_LT((y - attn.forward(x).narrow(1, 3, 5)).abs().max().item<double>(), 1e-10)
      << "the second slice's output is the whole sequence's at its positions";
}

TEST(SlicedAttention, SlicesThatDoNotAddUpAreAClearError) {
  kit::GPT2 model = tiny_float64_model();
  const auto idx = torch::zeros({1, 8}, torch::kLong);
  EXPECT_THROW(kit::terapipe::sliced_forward(*model, idx, {3, 4}), kit::Error);
  EXPECT_THROW(kit::terapipe::sliced_forward(*model, idx, {8, 0}), kit::Error);
}
