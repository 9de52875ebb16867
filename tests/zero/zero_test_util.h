// What the ZeRO suites (test_ring.cpp, test_zero.cpp: stages 1 and 2; test_fsdp.cpp: stage 3)
// share: the tiny GPT-2 in float64, the batches each rank takes its share of, torch's AdamW on
// the whole batch in one process, which every stage must reproduce (the judge's reference), and
// the loop that runs a role on several world sizes as subject parts and judges each.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "judge/judge.h"
#include "judge/tensor.h"
#include "model/gpt2.h"
#include "rank_roles.h"
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
    EXPECT_TRUE(kit_test::close(got[i], want[i], 1e-9, 1e-9)) << names[i] << " " << what;
}
inline void expect_parameters_close(kit::GPT2& model, const std::vector<torch::Tensor>& want, const std::string& what) {
  expect_parameters_close(model->parameters(), want, model->named_parameters().keys(), what);
}

// The parameters as the rank holds them (clones), recorded under `name`.
inline void put_parameters(kit::judge::Record& out, const std::string& name, const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.detach().clone());
  out.put(name, copies);
}

// The role on n = each of `sizes` processes in turn, each size a subject part (the ranks run in
// the subject; their records come to the judge as data), each judged by check(run, n) once every
// rank ran its role to the end. The judge stops at the first size that fails: its message is the
// one to read (an unimplemented function fails every size alike). The subject stops at the first
// size where a rank did not exit cleanly (the judge stops there too), not to pay for the others.
inline void judge_ranks_for(const std::vector<int>& sizes, const std::string& role, const std::string& what,
                            double timeout_s, const std::function<void(const kit_test::RankRun&, int)>& check,
                            const std::vector<std::pair<std::string, std::string>>& env = {}) {
  for (const int n : sizes) {
    const kit_test::RankRun run = kit_test::subject_ranks(n, role, timeout_s, env);
    if (!kit::judge::judging()) {
      bool clean = run.exitcodes.size() == static_cast<size_t>(n);
      for (const int code : run.exitcodes) clean = clean && code == 0;
      if (!clean) return;
      continue;
    }
    if (!kit_test::expect_ranks_ok(run, n, what)) return;
    check(run, n);
    if (::testing::Test::HasFailure()) return;
  }
}

// The sizes (elements) of the units kit::zero::Fsdp cuts `model` into: "outer" (wte, wpe, ln_f)
// first, then one per block, from the model's own parameters (given code; the judge's).
inline std::vector<int64_t> unit_numels(kit::GPT2& model) {
  std::vector<int64_t> numels(1 + model->h->size(), 0);
  for (const auto& p : model->named_parameters()) {
    const std::string& name = p.key();
    size_t unit = 0;
    if (name.rfind("h.", 0) == 0) unit = 1 + std::stoul(name.substr(2, name.find('.', 2) - 2));
    numels.at(unit) += p.value().numel();
  }
  return numels;
}

// Problem 5.5 (test_fsdp.cpp's role fsdp_adamw, also run by the hidden variants): FSDP on n
// ranks for 5 steps on a model of n_layer blocks equals torch's AdamW on the whole batch, and one
// float32 step sends three passes of the shards. Defined in test_fsdp.cpp.
void expect_fsdp_matches_adamw_for(const std::vector<int>& sizes, int64_t n_layer, const std::string& what,
                                   double timeout_s);

}  // namespace zero_test
