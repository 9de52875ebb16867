// What the ZeRO suites (test_zero.cpp: stages 1 and 2; test_fsdp.cpp: stage 3) share: the
// tiny GPT-2 in float64, the batches each rank takes its share of, and torch's AdamW on the
// whole batch in one process, which every stage must reproduce.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "model/gpt2.h"
#include "rank_roles.h"
#include "train/loop.h"
#include "train/loss.h"
#include "zero/zero.h"

namespace zero_test {
namespace zero = kit::zero;

constexpr int64_t kRowsPerRank = 2, kSeqLen = 8, kVocab = 64, kSteps = 5;

inline zero::ZeroOptions options(int stage) {
  zero::ZeroOptions o;
  o.stage = stage;
  o.lr = 1e-2;  // large enough that a wrong bias correction or decay shows in 5 steps
  o.weight_decay = 0.1;
  return o;
}

inline torch::optim::AdamW reference_optimizer(kit::GPT2& model, const zero::ZeroOptions& o) {
  return torch::optim::AdamW(model->parameters(), torch::optim::AdamWOptions(o.lr)
                                                      .betas({o.beta1, o.beta2})
                                                      .eps(o.eps)
                                                      .weight_decay(o.weight_decay));
}

inline kit::GPT2 tiny_model(torch::ScalarType type = torch::kFloat64, int64_t n_layer = 2, double dropout = 0) {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.dropout = dropout;
  cfg.n_layer = n_layer;
  kit::GPT2 model = kit::build_model(cfg, kVocab, kSeqLen, 11);
  model->to(type);
  return model;
}

inline int64_t parameter_count(kit::GPT2& model) {
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  return n;
}

// Step k's whole batch: n * kRowsPerRank rows, every token counted.
struct Batch {
  torch::Tensor idx, labels;
};
inline Batch batch(int64_t k, int64_t n) {
  torch::manual_seed(7 + static_cast<uint64_t>(k));
  auto t = torch::randint(kVocab, {n * kRowsPerRank, kSeqLen + 1}, torch::kInt64);
  return {t.narrow(1, 0, kSeqLen).contiguous(), t.narrow(1, 1, kSeqLen).contiguous()};
}
inline Batch share(const Batch& b, int64_t r) {
  return {b.idx.narrow(0, r * kRowsPerRank, kRowsPerRank), b.labels.narrow(0, r * kRowsPerRank, kRowsPerRank)};
}
inline torch::Tensor loss_of(const torch::Tensor& logits, const Batch& b) {
  return kit::masked_cross_entropy(logits, b.labels, torch::ones(b.labels.sizes()));
}
inline torch::Tensor loss_of(kit::GPT2& model, const Batch& b) { return loss_of(model->forward(b.idx), b); }

// The parameters after `steps` steps of torch's AdamW on the whole batch, in one process.
inline std::vector<torch::Tensor> reference_parameters(const zero::ZeroOptions& o, int64_t n, int64_t steps,
                                                       int64_t n_layer = 2) {
  kit::GPT2 model = tiny_model(torch::kFloat64, n_layer);
  auto opt = reference_optimizer(model, o);
  for (int64_t k = 0; k < steps; ++k) {
    opt.zero_grad();
    loss_of(model, batch(k, n)).backward();
    opt.step();
  }
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters()) out.push_back(p.detach().clone());
  return out;
}

// got[i] against want[i] within 1e-9 + 1e-9 |want| (float64), each named as `model` names it.
inline void expect_parameters_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                                    const std::vector<std::string>& names, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(rank_test::close(got[i], want[i], 1e-9, 1e-9)) << names[i] << " " << what;
}
inline void expect_parameters_close(kit::GPT2& model, const std::vector<torch::Tensor>& want, const std::string& what) {
  expect_parameters_close(model->parameters(), want, model->named_parameters().keys(), what);
}

}  // namespace zero_test
