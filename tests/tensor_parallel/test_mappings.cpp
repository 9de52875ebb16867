// Problem 4.1: f (copy_to_tensor_parallel) and g (reduce_from_tensor_parallel) on t = 1, 2, 4
// ranks. Every rank gives backward a different upstream gradient, so an all-reduce that is
// missing, or in the wrong direction, changes the result; the group's counters say which
// direction communicated.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tensor_parallel/mappings.h"
#include "tp_test_util.h"

namespace {
namespace tp = kit::tp;
using tp_test::close;

// The same tensor on every rank that asks for k's.
torch::Tensor per_rank(int64_t k, int64_t seed) {
  torch::manual_seed(static_cast<uint64_t>(seed + 100 * k));
  return torch::randn({3, 5});
}

TP_ROLE(f_mapping) {
  const int r = group.rank(), t = group.size();
  const torch::Tensor x0 = per_rank(0, 1);  // f's input is whole and the same on every rank
  auto x = x0.clone().requires_grad_(true);
  group.reset_counters();
  auto y = tp::copy_to_tensor_parallel(x, group);
  EXPECT_EQ(group.counters().all_reduce_calls, 0) << "f's forward is the identity: no all-reduce";
  EXPECT_TRUE(close(y, x0, 0, 0)) << "f's forward must return its input unchanged";
  y.backward(per_rank(r, 2));
  EXPECT_EQ(group.counters().all_reduce_calls, 1) << "f's backward all-reduces the gradient once";
  torch::Tensor want = torch::zeros({3, 5});
  for (int k = 0; k < t; ++k) want += per_rank(k, 2);
  EXPECT_TRUE(close(x.grad(), want)) << "f's input gradient must be the sum over the " << t
                                     << " ranks' upstream gradients (rank " << r << ")";
  EXPECT_TRUE(close(x, x0, 0, 0)) << "f changed its input";
}

TP_ROLE(g_mapping) {
  const int r = group.rank(), t = group.size();
  const torch::Tensor mine = per_rank(r, 3);  // g's input: this rank's partial sum
  auto x = mine.clone().requires_grad_(true);
  group.reset_counters();
  auto y = tp::reduce_from_tensor_parallel(x, group);
  EXPECT_EQ(group.counters().all_reduce_calls, 1) << "g's forward all-reduces once";
  torch::Tensor want = torch::zeros({3, 5});
  for (int k = 0; k < t; ++k) want += per_rank(k, 3);
  EXPECT_TRUE(close(y, want)) << "g's forward must be the sum over the " << t << " ranks' inputs (rank " << r << ")";
  EXPECT_TRUE(close(x, mine, 0, 0)) << "g reduced its input in place";
  const torch::Tensor up = per_rank(r, 4);
  y.backward(up);
  EXPECT_EQ(group.counters().all_reduce_calls, 1) << "g's backward is the identity: no all-reduce";
  EXPECT_TRUE(close(x.grad(), up, 0, 0)) << "g's input gradient must be this rank's upstream gradient, unchanged";
}

// f and g on tensor groups smaller than the world: world 4, groups {0, 2} and {1, 3}.
TP_ROLE(mappings_subgroups) {
  const kit::dist::Group mine = tp_test::strided_pair_group();
  rank_role_f_mapping(mine);
  rank_role_g_mapping(mine);
}

TEST(TPMappings, CopyIsIdentityForwardAndSumsGradientsOverRanksBackward) {
  tp_test::expect_ranks_pass_for({1, 2, 4}, "f_mapping", "f");
}

TEST(TPMappings, ReduceSumsOverRanksForwardAndIsIdentityBackward) {
  tp_test::expect_ranks_pass_for({1, 2, 4}, "g_mapping", "g");
}

TEST(TPMappings, BothOnTensorGroupsSmallerThanTheWorld) {
  tp_test::expect_all_ranks_pass(tp_test::run_ranks(4, "mappings_subgroups"), 4, "f and g on groups {0, 2} and {1, 3}");
}

}  // namespace
