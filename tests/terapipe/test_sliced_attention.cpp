// Problem 7.1: GPT-2 fed slice by slice, with each block's keys and values cached, equals
// GPT-2 on the whole sequence: the logits and the gradient of every parameter, for one slice,
// even slices, uneven slices and one-token slices. float64, so that the comparison is tight.
//
// With dropout on (0.1) the masks are random, so "equal" means: from the same generator state,
// the same draws. One slice of the whole sequence draws exactly what the whole attention draws
// (attn_dropout on the masked softmax, then resid_dropout on c_proj's output), so it equals
// GPT-2's own forward; several slices draw slice after slice, each its rows of scores (B,
// n_head, l, c + l) after the mask and the softmax, which the judge's own slice-by-slice
// reference (sliced_reference.h) draws the same way; in eval mode no dropout at all.
//
// The subject parts run the student's sliced_attention (through the given sliced_forward) and
// record the logits and gradients; the whole model's, the reference's and every check are the
// judge's (tests/judge/judge.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "float64_model.h"
#include "judge/judge.h"
#include "judge/tensor.h"
#include "kit/errors.h"
#include "model/gpt2.h"
#include "terapipe/sliced_attention.h"
#include "terapipe/slicing.h"
#include "train/loss.h"
#include "sliced_reference.h"

namespace {
namespace judge = kit::judge;

constexpr int64_t kSeqLen = 16;
constexpr double kDropout = 0.1;

kit::GPT2 tiny_float64_model(double dropout = 0) {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.vocab_size = 64;
  cfg.dropout = dropout;
  return kit_test::float64_model(cfg, 3);
}

struct Result {
  torch::Tensor logits;
  std::vector<torch::Tensor> grads;
};

enum class How { Whole, Sliced, Reference };

// Logits and every parameter's gradient of the masked cross-entropy: the whole model, the
// student's sliced_forward, or the judge's reference, each from the generator seeded alike.
Result run(kit::GPT2& model, const std::vector<int64_t>& lengths, How how) {
  torch::manual_seed(5);
  const auto idx = torch::randint(64, {2, kSeqLen}, torch::kLong);
  const auto labels = torch::randint(64, {2, kSeqLen}, torch::kLong);
  model->zero_grad();
  Result r;
  r.logits = how == How::Whole    ? model->forward(idx)
             : how == How::Sliced ? kit::terapipe::sliced_forward(*model, idx, lengths)
                                  : terapipe_test::reference_sliced_forward(*model, idx, lengths);
  kit::masked_cross_entropy(r.logits, labels, torch::ones({2, kSeqLen})).backward();
  for (const auto& p : model->parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

// The subject part: the student's sliced forward and backward on `model`, recorded.
Result sliced_in_subject(kit::GPT2& model, const std::vector<int64_t>& lengths) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    const Result r = run(model, lengths, How::Sliced);
    out.put("logits", r.logits);
    out.put("grads", r.grads);
  });
  return {got.get<torch::Tensor>("logits"), got.get<std::vector<torch::Tensor>>("grads")};
}

void expect_same(const Result& want, const Result& sliced, kit::GPT2& model, const std::string& what) {
  ASSERT_TRUE(sliced.logits.defined()) << what << ": no logits";
  ASSERT_EQ(sliced.logits.sizes(), want.logits.sizes()) << what;
  EXPECT_LT((sliced.logits - want.logits).abs().max().item<double>(), 1e-10) << what << ": logits";
  const auto names = model->named_parameters();
  ASSERT_EQ(sliced.grads.size(), want.grads.size()) << what << ": one gradient per parameter";
  for (size_t i = 0; i < want.grads.size(); ++i) {
    ASSERT_TRUE(sliced.grads[i].defined() && sliced.grads[i].sizes() == want.grads[i].sizes())
        << what << ": the gradient of " << names[i].key();
    EXPECT_LT((sliced.grads[i] - want.grads[i]).abs().max().item<double>(), 1e-10)
        << what << ": the gradient of " << names[i].key();
  }
}

void expect_sliced_equal_to_whole(const std::vector<int64_t>& lengths) {
  kit::GPT2 model = tiny_float64_model();
  const Result sliced = sliced_in_subject(model, lengths);
  if (!judge::judging()) return;
  const Result whole = run(model, {}, How::Whole);
  expect_same(whole, sliced, model, "slices " + kit::terapipe::to_string(lengths));
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
  const auto x = torch::randn({2, 8, model->config().n_embd}, torch::kFloat64);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    kit::terapipe::KVCache cache;
    kit::terapipe::sliced_attention(attn, x.narrow(1, 0, 3), cache);
    out.put("length after 3", cache.length());
    const auto y = kit::terapipe::sliced_attention(attn, x.narrow(1, 3, 5), cache);
    out.put("length after 8", cache.length());
    out.put("y", y);
  });
  JUDGE {
    EXPECT_EQ(got.get<int64_t>("length after 3"), 3);
    EXPECT_EQ(got.get<int64_t>("length after 8"), 8);
    const auto y = got.get<torch::Tensor>("y");
    ASSERT_TRUE(y.defined());
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 5, model->config().n_embd}));
    if (y.sizes() != std::vector<int64_t>{2, 5, model->config().n_embd}) return;
    EXPECT_LT((y - attn.forward(x).narrow(1, 3, 5)).abs().max().item<double>(), 1e-10)
        << "the second slice's output is the whole sequence's at its positions";
  }
}

// ---- dropout on ----------------------------------------------------------------------------

// One slice (no context) draws the whole attention's masks: sliced_forward equals GPT-2's
// forward from the same generator state, logits and gradients.
TEST(SlicedAttention, WithDropoutOneSliceEqualsTheWholeSequence) {
  kit::GPT2 model = tiny_float64_model(kDropout);
  const Result sliced = sliced_in_subject(model, {kSeqLen});
  if (!judge::judging()) return;
  const Result whole = run(model, {}, How::Whole);
  expect_same(whole, sliced, model,
              "dropout 0.1, one slice, the same generator state as GPT-2's forward (are attn.attn_dropout and "
              "attn.resid_dropout applied where CausalSelfAttentionImpl::forward applies them: attention dropout "
              "on the softmax of the masked scores, residual dropout on c_proj's output?)");
}

// Several slices: each slice draws its own masks in turn, attention dropout over its rows of
// scores (B, n_head, l, c + l) after the mask and the softmax, then residual dropout; the
// judge's reference draws them the same way from the same generator state.
TEST(SlicedAttention, WithDropoutEachSliceDrawsItsMasksInTurn) {
  const std::vector<int64_t> lengths{1, 5, 2, 8};
  kit::GPT2 model = tiny_float64_model(kDropout);
  const Result sliced = sliced_in_subject(model, lengths);
  if (!judge::judging()) return;
  const Result want = run(model, lengths, How::Reference);
  expect_same(want, sliced, model,
              "dropout 0.1, slices " + kit::terapipe::to_string(lengths) +
                  ", against the reference slice by slice from the same generator state (each slice: "
                  "attn.attn_dropout on the softmax of its (B, n_head, l, c + l) masked scores, then "
                  "attn.resid_dropout on c_proj's output, with the default generator)");
}

// In eval mode the dropout modules do nothing: sliced equals whole although dropout is 0.1.
TEST(SlicedAttention, WithDropoutInEvalModeSlicesEqualTheWholeSequence) {
  const std::vector<int64_t> lengths{1, 5, 2, 8};
  kit::GPT2 model = tiny_float64_model(kDropout);
  model->eval();
  const Result sliced = sliced_in_subject(model, lengths);
  if (!judge::judging()) return;
  const Result whole = run(model, {}, How::Whole);
  expect_same(whole, sliced, model,
              "dropout 0.1 in eval mode, slices " + kit::terapipe::to_string(lengths) +
                  " (dropout through the attention's own modules, which are off in eval mode?)");
}

TEST(SlicedAttention, SlicesThatDoNotAddUpAreAClearError) {
  kit::GPT2 model = tiny_float64_model();
  const auto idx = torch::zeros({1, 8}, torch::kLong);
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.outcome("3+4 of 8", [&] { kit::terapipe::sliced_forward(*model, idx, {3, 4}); });
    out.outcome("8+0 of 8", [&] { kit::terapipe::sliced_forward(*model, idx, {8, 0}); });
  });
  JUDGE {
    EXPECT_EQ(got.get<judge::Outcome>("3+4 of 8").kind, "kit::Error") << got.get<judge::Outcome>("3+4 of 8").describe();
    EXPECT_EQ(got.get<judge::Outcome>("8+0 of 8").kind, "kit::Error") << got.get<judge::Outcome>("8+0 of 8").describe();
  }
}
