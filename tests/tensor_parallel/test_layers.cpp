// Problem 4.2: ColumnParallelLinear and RowParallelLinear on t = 1, 2, 4 ranks against the
// torch::nn::Linear built from the same seed: the output, the input gradient and the weight
// and bias gradients are the matching slices of the single-device layer's. Each rank loads the
// Linear's weights into its parallel layer and records what that layer gave it; the judge
// runs the Linear itself and compares every rank's record with its slices.
// The upstream gradient G is random (not ones), so a gradient summed or sliced wrongly shows.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tensor_parallel/layers.h"
#include "tp_test_util.h"

namespace {
namespace tp = kit::tp;
namespace judge = kit::judge;
using tp_test::close;

constexpr int64_t kIn = 8, kOut = 12;

// The single-device layer, its input and upstream gradient (built in both processes), and,
// in the judge only (run_reference), its output and gradients.
struct Reference {
  torch::nn::Linear full{nullptr};
  torch::Tensor x, G, y, x_grad;
};
Reference inputs() {
  torch::manual_seed(2);
  Reference ref;
  ref.full = torch::nn::Linear(kIn, kOut);
  ref.x = torch::randn({2, 3, kIn});
  ref.G = torch::randn({2, 3, kOut});
  return ref;
}
Reference reference() {
  Reference ref = inputs();
  auto x = ref.x.clone().requires_grad_(true);
  ref.y = ref.full(x);
  (ref.y * ref.G).sum().backward();
  ref.x_grad = x.grad();
  return ref;
}

// Subject: this rank's column-parallel layer on the whole input; its output, input gradient
// and weight and bias gradients, recorded under pre.
void column_parallel(const kit::dist::Group& group, bool gather, judge::Record& out, const std::string& pre) {
  const int64_t r = group.rank(), part = kOut / group.size();
  const Reference ref = inputs();
  tp::ColumnParallelLinear col(kIn, kOut, group, /*bias=*/true, gather);
  col->load_full(ref.full->weight, ref.full->bias);
  auto x = ref.x.clone().requires_grad_(true);
  auto y = col(x);
  out.put(pre + "y", y);
  (y * (gather ? ref.G : ref.G.narrow(-1, r * part, part))).sum().backward();
  out.put(pre + "x_grad", x.grad());
  out.put(pre + "weight_grad", col->weight.grad());
  out.put(pre + "bias_grad", col->bias.grad());
}

// Judge: rank r of t's record of column_parallel.
void check_column_parallel(const judge::Record& got, int64_t r, int64_t t, bool gather, const std::string& pre) {
  const int64_t part = kOut / t;
  const Reference ref = reference();
  if (gather) {
    EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "y"), ref.y)) << "gathered output, rank " << r;
  } else {
    EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "y"), ref.y.narrow(-1, r * part, part)))
        << "output slice, rank " << r;
  }
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "x_grad"), ref.x_grad))
      << "input gradient (whole: the sum of every rank's share), rank " << r;
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "weight_grad"), ref.full->weight.grad().narrow(0, r * part, part)))
      << "weight gradient rows";
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "bias_grad"), ref.full->bias.grad().narrow(0, r * part, part)))
      << "bias gradient slice";
}

void row_parallel(const kit::dist::Group& group, judge::Record& out, const std::string& pre) {
  const int64_t r = group.rank(), part = kIn / group.size();
  const Reference ref = inputs();
  tp::RowParallelLinear row(kIn, kOut, group);
  row->load_full(ref.full->weight, ref.full->bias);
  auto x = ref.x.narrow(-1, r * part, part).clone().requires_grad_(true);  // a column-parallel layer's slice
  auto y = row(x);
  out.put(pre + "y", y);
  (y * ref.G).sum().backward();
  out.put(pre + "x_grad", x.grad());
  out.put(pre + "weight_grad", row->weight.grad());
  out.put(pre + "bias_grad", row->bias.grad());
}

void check_row_parallel(const judge::Record& got, int64_t r, int64_t t, const std::string& pre) {
  const int64_t part = kIn / t;
  const Reference ref = reference();
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "y"), ref.y)) << "output (whole, the bias added once), rank " << r;
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "x_grad"), ref.x_grad.narrow(-1, r * part, part)))
      << "input gradient slice, rank " << r;
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "weight_grad"), ref.full->weight.grad().narrow(1, r * part, part)))
      << "weight gradient columns";
  EXPECT_TRUE(close(got.get<torch::Tensor>(pre + "bias_grad"), ref.full->bias.grad()))
      << "bias gradient (whole on every rank)";
}

TP_SUBJECT(column_parallel_linear) { column_parallel(group, /*gather=*/false, out, "column."); }
TP_SUBJECT(column_parallel_linear_gathered) { column_parallel(group, /*gather=*/true, out, "gathered."); }
TP_SUBJECT(row_parallel_linear) { row_parallel(group, out, "row."); }

// Both layers built without a bias (bias = false: the bias is undefined), as a layer before a
// LayerNorm is: the output and gradients of a Linear without bias.
TP_SUBJECT(linear_without_bias) {
  const int64_t r = group.rank(), t = group.size();
  torch::manual_seed(2);
  torch::nn::Linear full(torch::nn::LinearOptions(kIn, kOut).bias(false));
  const Reference ref = inputs();  // its x and G
  tp::ColumnParallelLinear col(kIn, kOut, group, /*bias=*/false, /*gather_output=*/true);
  col->load_full(full->weight, torch::Tensor());
  auto x = ref.x.clone().requires_grad_(true);
  out.outcome("column", [&] {
    auto y = col(x);
    out.put("column.y", y);
    (y * ref.G).sum().backward();
    out.put("column.weight_grad", col->weight.grad());
  });
  tp::RowParallelLinear row(kIn, kOut, group, /*bias=*/false);
  row->load_full(full->weight, torch::Tensor());
  auto xr = ref.x.narrow(-1, r * (kIn / t), kIn / t).clone().requires_grad_(true);
  out.outcome("row", [&] {
    auto y = row(xr);
    out.put("row.y", y);
    (y * ref.G).sum().backward();
    out.put("row.weight_grad", row->weight.grad());
  });
}

TP_SUBJECT(linear_sizes_not_divisible) {  // t = 2
  out.outcome("column_7", [&] { tp::ColumnParallelLinear(kIn, 7, group); });
  out.outcome("row_7", [&] { tp::RowParallelLinear(7, kOut, group); });
}

// Both layers on tensor groups smaller than the world: world 4, groups {0, 2} and {1, 3}.
TP_SUBJECT(linear_subgroups) {
  const kit::dist::Group mine = tp_test::strided_pair_group();
  tp_test::record_group(mine, out);
  column_parallel(mine, /*gather=*/false, out, "column.");
  column_parallel(mine, /*gather=*/true, out, "gathered.");
  row_parallel(mine, out, "row.");
}

TEST(TPLinear, ColumnParallelEqualsLinearSlice) {
  tp_test::for_ranks({1, 2, 4}, "column_parallel_linear", "ColumnParallelLinear",
                     [](const judge::Record& got, int r, int n) { check_column_parallel(got, r, n, false, "column."); });
}

TEST(TPLinear, ColumnParallelGatherOutputEqualsLinear) {
  tp_test::for_ranks({1, 2, 4}, "column_parallel_linear_gathered", "ColumnParallelLinear(gather_output)",
                     [](const judge::Record& got, int r, int n) { check_column_parallel(got, r, n, true, "gathered."); });
}

TEST(TPLinear, RowParallelEqualsLinearWithBiasAddedOnce) {
  tp_test::for_ranks({1, 2, 4}, "row_parallel_linear", "RowParallelLinear",
                     [](const judge::Record& got, int r, int n) { check_row_parallel(got, r, n, "row."); });
}

TEST(TPLinear, BothLayersOnTensorGroupsSmallerThanTheWorld) {
  tp_test::for_ranks({4}, "linear_subgroups", "column and row parallel linear on groups {0, 2} and {1, 3}",
                     [](const judge::Record& got, int w, int) {
                       if (!tp_test::expect_strided_pair_group(got, w)) return;
                       check_column_parallel(got, w / 2, 2, false, "column.");
                       check_column_parallel(got, w / 2, 2, true, "gathered.");
                       check_row_parallel(got, w / 2, 2, "row.");
                     });
}

TEST(TPLinear, BothLayersWithoutABiasEqualALinearWithoutOne) {
  tp_test::for_ranks({1, 2, 4}, "linear_without_bias", "column and row parallel linear with bias = false",
                     [](const judge::Record& got, int r, int n) {
                       torch::manual_seed(2);
                       torch::nn::Linear full(torch::nn::LinearOptions(kIn, kOut).bias(false));
                       const Reference ref = inputs();
                       auto x = ref.x.clone().requires_grad_(true);
                       const auto y = full(x);
                       (y * ref.G).sum().backward();
                       for (const char* which : {"column", "row"}) {
                         const auto o = got.get<judge::Outcome>(which);
                         ASSERT_FALSE(o.threw()) << which << "-parallel layer without a bias (its bias undefined), "
                                                 << "rank " << r << " of " << n << ": " << o.describe();
                         EXPECT_TRUE(close(got.get<torch::Tensor>(std::string(which) + ".y"), y))
                             << which << "-parallel output without a bias, rank " << r << " of " << n;
                       }
                       const int64_t out_part = kOut / n, in_part = kIn / n;
                       EXPECT_TRUE(close(got.get<torch::Tensor>("column.weight_grad"),
                                         full->weight.grad().narrow(0, r * out_part, out_part)))
                           << "column-parallel weight gradient without a bias, rank " << r;
                       EXPECT_TRUE(close(got.get<torch::Tensor>("row.weight_grad"),
                                         full->weight.grad().narrow(1, r * in_part, in_part)))
                           << "row-parallel weight gradient without a bias, rank " << r;
                     });
}

// Given code (the constructors): passes with the starter's stubs too.
TEST(TPLinear, FeaturesThatTDoesNotDivideAreAnErrorNamingTheSize) {
  tp_test::for_ranks({2}, "linear_sizes_not_divisible", "sizes", [](const judge::Record& got, int, int) {
    tp_test::expect_error_outcome(got.get<judge::Outcome>("column_7"), {"(7)", "t = 2"},
                                  "a column-parallel layer of 7 outputs on 2 ranks");
    tp_test::expect_error_outcome(got.get<judge::Outcome>("row_7"), {"(7)", "t = 2"},
                                  "a row-parallel layer of 7 inputs on 2 ranks");
  });
}

}  // namespace
