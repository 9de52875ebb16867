// Problem 4.1: f (copy_to_tensor_parallel) and g (reduce_from_tensor_parallel) on t = 1, 2, 4
// ranks. Every rank gives backward a different upstream gradient, so an all-reduce that is
// missing, or in the wrong direction, changes the result; the group's counters say which
// direction communicated. Each rank records what f and g gave it and what the counters said;
// the judge computes the sums over the ranks and decides.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tensor_parallel/mappings.h"
#include "tp_test_util.h"

namespace {
namespace tp = kit::tp;
namespace judge = kit::judge;
using tp_test::close;

// The same tensor on every rank that asks for k's.
torch::Tensor per_rank(int64_t k, int64_t seed) {
  torch::manual_seed(static_cast<uint64_t>(seed + 100 * k));
  return torch::randn({3, 5});
}

// Subject: f on this rank, recorded under "f." (pre: a prefix for groups of several calls).
void f_mapping(const kit::dist::Group& group, judge::Record& out, const std::string& pre = "") {
  const int r = group.rank();
  const torch::Tensor x0 = per_rank(0, 1);  // f's input is whole and the same on every rank
  auto x = x0.clone().requires_grad_(true);
  group.reset_counters();
  auto y = tp::copy_to_tensor_parallel(x, group);
  out.put(pre + "f.forward_all_reduce_calls", group.counters().all_reduce_calls);
  out.put(pre + "f.y", y);
  const torch::Tensor upstream = per_rank(r, 2);
  y.backward(upstream);  // autograd hands f's backward this tensor itself: it is the caller's
  out.put(pre + "f.all_reduce_calls", group.counters().all_reduce_calls);
  out.put(pre + "f.x_grad", x.grad());
  out.put(pre + "f.x", x);
  out.put(pre + "f.upstream", upstream);
  // A loss straight after f: the gradient reaching f's backward is ones expanded (stride 0).
  auto x2 = x0.clone().requires_grad_(true);
  tp::copy_to_tensor_parallel(x2, group).sum().backward();
  out.put(pre + "f.sum_x_grad", x2.grad());
}

// Judge: rank r of t's record of f_mapping.
void check_f(const judge::Record& got, int r, int t, const std::string& pre = "") {
  const torch::Tensor x0 = per_rank(0, 1);
  EXPECT_EQ(got.get<int64_t>(pre + "f.forward_all_reduce_calls"), 0) << "f's forward is the identity: no all-reduce";
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "f.y"), x0, 0, 0)) << "f's forward must return its input unchanged";
  EXPECT_EQ(got.get<int64_t>(pre + "f.all_reduce_calls"), 1) << "f's backward all-reduces the gradient once";
  torch::Tensor want = torch::zeros({3, 5});
  for (int k = 0; k < t; ++k) want += per_rank(k, 2);
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "f.x_grad"), want))
      << "f's input gradient must be the sum over the " << t << " ranks' upstream gradients (rank " << r << ")";
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "f.x"), x0, 0, 0)) << "f changed its input";
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "f.upstream"), per_rank(r, 2), 0, 0))
      << "f's backward changed the upstream gradient it was handed (it belongs to the caller, and to any other "
         "branch it feeds): all-reduce a copy";
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "f.sum_x_grad"), torch::full({3, 5}, static_cast<double>(t))))
      << "f(x).sum().backward(): x's gradient must be " << t << " (the ranks' ones summed), rank " << r;
}

void g_mapping(const kit::dist::Group& group, judge::Record& out, const std::string& pre = "") {
  const int r = group.rank();
  const torch::Tensor mine = per_rank(r, 3);  // g's input: this rank's partial sum
  auto x = mine.clone().requires_grad_(true);
  group.reset_counters();
  auto y = tp::reduce_from_tensor_parallel(x, group);
  out.put(pre + "g.forward_all_reduce_calls", group.counters().all_reduce_calls);
  out.put(pre + "g.y", y);
  out.put(pre + "g.x", x);
  y.backward(per_rank(r, 4));
  out.put(pre + "g.all_reduce_calls", group.counters().all_reduce_calls);
  out.put(pre + "g.x_grad", x.grad());
}

void check_g(const judge::Record& got, int r, int t, const std::string& pre = "") {
  EXPECT_EQ(got.get<int64_t>(pre + "g.forward_all_reduce_calls"), 1) << "g's forward all-reduces once";
  torch::Tensor want = torch::zeros({3, 5});
  for (int k = 0; k < t; ++k) want += per_rank(k, 3);
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "g.y"), want))
      << "g's forward must be the sum over the " << t << " ranks' inputs (rank " << r << ")";
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "g.x"), per_rank(r, 3), 0, 0)) << "g reduced its input in place";
  EXPECT_EQ(got.get<int64_t>(pre + "g.all_reduce_calls"), 1) << "g's backward is the identity: no all-reduce";
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "g.x_grad"), per_rank(r, 4), 0, 0))
      << "g's input gradient must be this rank's upstream gradient, unchanged";
}

TP_SUBJECT(f_mapping) { f_mapping(group, out); }
TP_SUBJECT(g_mapping) { g_mapping(group, out); }

// f and g on tensor groups smaller than the world: world 4, groups {0, 2} and {1, 3}.
TP_SUBJECT(mappings_subgroups) {
  const kit::dist::Group mine = tp_test::strided_pair_group();
  tp_test::record_group(mine, out);
  f_mapping(mine, out);
  g_mapping(mine, out);
}

TEST(TPMappings, CopyIsIdentityForwardAndSumsGradientsOverRanksBackward) {
  tp_test::for_ranks({1, 2, 4}, "f_mapping", "f", [](const judge::Record& got, int r, int n) { check_f(got, r, n); });
}

TEST(TPMappings, ReduceSumsOverRanksForwardAndIsIdentityBackward) {
  tp_test::for_ranks({1, 2, 4}, "g_mapping", "g", [](const judge::Record& got, int r, int n) { check_g(got, r, n); });
}

TEST(TPMappings, BothOnTensorGroupsSmallerThanTheWorld) {
  tp_test::for_ranks({4}, "mappings_subgroups", "f and g on groups {0, 2} and {1, 3}",
                     [](const judge::Record& got, int w, int) {
                       if (!tp_test::expect_strided_pair_group(got, w)) return;
                       check_f(got, w / 2, 2);
                       check_g(got, w / 2, 2);
                     });
}

}  // namespace
