// Problem 1.2: average_gradients on ranks that did not all produce every gradient. A layer
// unused in one rank's forward leaves its parameters without a gradient there; every rank
// must still make the same all-reduce calls (the hint: give such a parameter a zero
// gradient), or the ranks' collectives stop lining up and the run hangs or mixes tensors.
// The ranks (student code) record their gradients after average_gradients; the judge computes
// each rank's gradient from the same seeds with the given model code, averages them (a
// missing one counting as zero) and compares (tests/judge/judge.h, tests/rank_roles.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "judge/judge.h"
#include "judge/tensor.h"
#include "project/run_data_parallel.h"
#include "rank_roles.h"

// The one case a rank process runs (tests/rank_roles.h).
RANK_ROLE_MAIN

namespace {

namespace judge = kit::judge;
using Grads = std::vector<std::pair<std::string, torch::Tensor>>;

constexpr int kRanksWithUnusedLayer = 3;

// Three layers; rank 0's forward uses all of them, the other ranks' only `a`. One unused
// layer comes before `a` and one after, so an average_gradients that reduces the gradients
// it has first and the missing ones afterwards (a second pass) mixes up tensors across
// ranks instead of lining up by luck.
struct ThreeLayers : torch::nn::Module {
  ThreeLayers() {
    first = register_module("first", torch::nn::Linear(4, 3));
    a = register_module("a", torch::nn::Linear(4, 3));
    b = register_module("b", torch::nn::Linear(4, 3));
    to(torch::kFloat64);
  }
  torch::nn::Linear first{nullptr}, a{nullptr}, b{nullptr};
};

// The same weights on every rank and in the judge: built from one seed.
std::shared_ptr<ThreeLayers> three_layers() {
  torch::manual_seed(11);
  return std::make_shared<ThreeLayers>();
}

// Rank r's forward and backward (given code only): first and b take part on rank 0 alone.
void backward_of_rank(ThreeLayers& m, int r) {
  torch::manual_seed(100 + r);
  const torch::Tensor x = torch::randn({5, 4}, torch::kFloat64);
  torch::Tensor y = m.a(x);
  if (r == 0) y = y + m.b(x) * m.first(x);
  y.pow(2).sum().backward();
}

RANK_SUBJECT(average_with_an_unused_layer) {
  const int r = kit::dist::get_rank();
  auto m = three_layers();
  backward_of_rank(*m, r);
  kit::average_gradients(*m);  // student code
  Grads grads;
  for (const auto& p : m->named_parameters()) grads.emplace_back(p.key(), p.value().grad());
  out.put("rank", r);
  out.put("grads", grads);
}

TEST(DataParallelRun, AParameterWithoutAGradientOnSomeRanksIsAveragedAsZero) {
  const int n = kRanksWithUnusedLayer;
  const auto run = kit_test::subject_ranks(n, "average_with_an_unused_layer", 60);
  if (!judge::judging()) return;
  if (!kit_test::expect_ranks_ok(run, n,
                                  "average_gradients with layers first and b unused on ranks 1 and 2 (every rank must make the "
                                  "same all-reduce calls: give a parameter without a gradient a zero one)"))
    return;
  // The expected average: every rank's gradient, a missing one counting as zero, over n.
  auto m = three_layers();
  std::vector<std::pair<std::string, torch::Tensor>> want;
  for (const auto& p : m->named_parameters()) want.emplace_back(p.key(), torch::zeros_like(p.value()));
  for (int r = 0; r < n; ++r) {
    m->zero_grad();
    for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
    backward_of_rank(*m, r);
    size_t k = 0;
    for (const auto& p : m->named_parameters()) {
      if (p.value().grad().defined()) want[k].second += p.value().grad();
      ++k;
    }
  }
  for (auto& w : want) w.second /= n;
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(n) + " (layers first and b used on rank 0 only)");
    const judge::Record& got = run.records[static_cast<size_t>(r)];
    EXPECT_EQ(got.get<int>("rank"), r);
    const Grads grads = got.get<Grads>("grads");
    ASSERT_EQ(grads.size(), want.size()) << "the model's parameters";
    for (size_t k = 0; k < want.size(); ++k) {
      ASSERT_EQ(grads[k].first, want[k].first);
      EXPECT_TRUE(kit_test::close(grads[k].second, want[k].second, 1e-12, 1e-9))
          << "the gradient of " << want[k].first << " after average_gradients "
          << (want[k].first.rfind("a.", 0) != 0
                  ? "(no gradient on ranks 1 and 2: their zero counts in the average, which is rank 0's / 3)"
                  : "(the average of the 3 ranks' gradients)");
    }
  }
}

}  // namespace
