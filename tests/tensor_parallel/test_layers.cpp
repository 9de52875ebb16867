// Problem 4.2: ColumnParallelLinear and RowParallelLinear on t = 1, 2, 4 ranks against the
// torch::nn::Linear every rank builds from the same seed: the output, the input gradient and
// the weight and bias gradients are the matching slices of the single-device layer's.
// The upstream gradient G is random (not ones), so a gradient summed or sliced wrongly shows.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tensor_parallel/layers.h"
#include "tp_test_util.h"

namespace {
namespace tp = kit::tp;
using tp_test::close;

constexpr int64_t kIn = 8, kOut = 12;

// The single-device layer, its input and upstream gradient, and its gradients.
struct Reference {
  torch::nn::Linear full{nullptr};
  torch::Tensor x, G, y, x_grad;
};
Reference reference() {
  torch::manual_seed(2);
  Reference ref;
  ref.full = torch::nn::Linear(kIn, kOut);
  ref.x = torch::randn({2, 3, kIn});
  ref.G = torch::randn({2, 3, kOut});
  auto x = ref.x.clone().requires_grad_(true);
  ref.y = ref.full(x);
  (ref.y * ref.G).sum().backward();
  ref.x_grad = x.grad();
  return ref;
}

void column_parallel(const kit::dist::Group& group, bool gather) {
  const int64_t r = group.rank(), part = kOut / group.size();
  Reference ref = reference();
  tp::ColumnParallelLinear col(kIn, kOut, group, /*bias=*/true, gather);
  col->load_full(ref.full->weight, ref.full->bias);
  auto x = ref.x.clone().requires_grad_(true);
  auto y = col(x);
  if (gather) {
    EXPECT_TRUE(close(y, ref.y)) << "gathered output, rank " << r;
    (y * ref.G).sum().backward();
  } else {
    EXPECT_TRUE(close(y, ref.y.narrow(-1, r * part, part))) << "output slice, rank " << r;
    (y * ref.G.narrow(-1, r * part, part)).sum().backward();
  }
  EXPECT_TRUE(close(x.grad(), ref.x_grad)) << "input gradient (whole: the sum of every rank's share), rank " << r;
  EXPECT_TRUE(close(col->weight.grad(), ref.full->weight.grad().narrow(0, r * part, part))) << "weight gradient rows";
  EXPECT_TRUE(close(col->bias.grad(), ref.full->bias.grad().narrow(0, r * part, part))) << "bias gradient slice";
}

TP_ROLE(column_parallel_linear) { column_parallel(group, /*gather=*/false); }
TP_ROLE(column_parallel_linear_gathered) { column_parallel(group, /*gather=*/true); }

TP_ROLE(row_parallel_linear) {
  const int64_t r = group.rank(), part = kIn / group.size();
  Reference ref = reference();
  tp::RowParallelLinear row(kIn, kOut, group);
  row->load_full(ref.full->weight, ref.full->bias);
  auto x = ref.x.narrow(-1, r * part, part).clone().requires_grad_(true);  // a column-parallel layer's slice
  auto y = row(x);
  EXPECT_TRUE(close(y, ref.y)) << "output (whole, the bias added once), rank " << r;
  (y * ref.G).sum().backward();
  EXPECT_TRUE(close(x.grad(), ref.x_grad.narrow(-1, r * part, part))) << "input gradient slice, rank " << r;
  EXPECT_TRUE(close(row->weight.grad(), ref.full->weight.grad().narrow(1, r * part, part))) << "weight gradient columns";
  EXPECT_TRUE(close(row->bias.grad(), ref.full->bias.grad())) << "bias gradient (whole on every rank)";
}

TP_ROLE(linear_sizes_not_divisible) {  // t = 2
  tp_test::expect_error_naming([&] { tp::ColumnParallelLinear(kIn, 7, group); }, {"(7)", "t = 2"},
                               "a column-parallel layer of 7 outputs on 2 ranks");
  tp_test::expect_error_naming([&] { tp::RowParallelLinear(7, kOut, group); }, {"(7)", "t = 2"},
                               "a row-parallel layer of 7 inputs on 2 ranks");
}

// Both layers on tensor groups smaller than the world: world 4, groups {0, 2} and {1, 3}.
TP_ROLE(linear_subgroups) {
  const kit::dist::Group mine = tp_test::strided_pair_group();
  rank_role_column_parallel_linear(mine);
  rank_role_column_parallel_linear_gathered(mine);
  rank_role_row_parallel_linear(mine);
}

TEST(TPLinear, ColumnParallelEqualsLinearSlice) {
  tp_test::expect_ranks_pass_for({1, 2, 4}, "column_parallel_linear", "ColumnParallelLinear");
}

TEST(TPLinear, ColumnParallelGatherOutputEqualsLinear) {
  tp_test::expect_ranks_pass_for({1, 2, 4}, "column_parallel_linear_gathered", "ColumnParallelLinear(gather_output)");
}

TEST(TPLinear, RowParallelEqualsLinearWithBiasAddedOnce) {
  tp_test::expect_ranks_pass_for({1, 2, 4}, "row_parallel_linear", "RowParallelLinear");
}

TEST(TPLinear, BothLayersOnTensorGroupsSmallerThanTheWorld) {
  tp_test::expect_all_ranks_pass(tp_test::run_ranks(4, "linear_subgroups"), 4,
                                 "column and row parallel linear on groups {0, 2} and {1, 3}");
}

// Given code (the constructors): passes with the starter's stubs too.
TEST(TPLinear, FeaturesThatTDoesNotDivideAreAnErrorNamingTheSize) {
  tp_test::expect_all_ranks_pass(tp_test::run_ranks(2, "linear_sizes_not_divisible"), 2, "sizes");
}

}  // namespace
