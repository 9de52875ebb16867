// Graded variants of tests/pipeline/split_module_test.cpp on stage layouts the public
// test does not use. The contract (pipeline/partition.h): a new partition wherever the
// stage changes, layers in their order and under their names, so a stage may own several
// partitions and the partitions need not be in stage order.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "pipeline/partition.h"
#include "pipeline/pipeline_test_util.h"

namespace kit {
namespace {

using test::describe;
using test::stage;
using test::unwrapped;

// Builds a Sequential with one layer per entry of `layout` (its stage; a Tanh where
// `tanh_at` says so, else a Linear), splits it, and checks the partitions against the runs
// of equal consecutive stages: their stages, their layers in order, the layers' names.
void expect_runs(const std::vector<int64_t>& layout, const std::vector<bool>& tanh_at = {}) {
  torch::nn::Sequential seq;
  std::vector<const torch::nn::Module*> layers;
  for (size_t k = 0; k < layout.size(); ++k) {
    if (k < tanh_at.size() && tanh_at[k]) {
      torch::nn::Tanh layer;
      layers.push_back(layer.get());
      seq->push_back(WithDevice(layer, stage(layout[k])));
    } else {
      torch::nn::Linear layer(3, 3);
      layers.push_back(layer.get());
      seq->push_back(WithDevice(layer, stage(layout[k])));
    }
  }
  std::vector<int64_t> want_stages;
  std::vector<std::vector<std::string>> want_names;
  for (size_t k = 0; k < layout.size(); ++k) {
    if (k == 0 || layout[k] != layout[k - 1]) {
      want_stages.push_back(layout[k]);
      want_names.emplace_back();
    }
    want_names.back().push_back(std::to_string(k));
  }

  const Partitions p = split_module(seq);
  ASSERT_EQ(p.size(), want_stages.size()) << "one partition per run of consecutive layers on one stage, got: "
                                          << describe(p);
  ASSERT_EQ(p.stages.size(), p.size()) << describe(p);
  size_t k = 0;
  for (size_t j = 0; j < p.size(); ++j) {
    EXPECT_EQ(p.stages[j], stage(want_stages[j])) << "partition " << j << ": " << describe(p);
    EXPECT_EQ(p.partitions[j]->named_children().keys(), want_names[j]) << "partition " << j << ": " << describe(p);
    for (size_t i = 0; i < p.partitions[j]->size() && k < layers.size(); ++i, ++k)
      EXPECT_EQ(unwrapped(p.partitions[j]->ptr(i)), layers[k])
          << "partition " << j << " item " << i << " is not layer " << k << ": " << describe(p);
  }
  EXPECT_EQ(k, layers.size()) << "the partitions hold " << k << " of the " << layers.size() << " layers";
}

TEST(HiddenSplitModule, LayoutAABBCGivesThreePartitions) { expect_runs({0, 0, 1, 1, 2}); }
TEST(HiddenSplitModule, LayoutABBACGivesFourPartitions) { expect_runs({0, 1, 1, 0, 2}); }
TEST(HiddenSplitModule, AlternatingLayoutABABGivesFourPartitions) { expect_runs({0, 1, 0, 1}); }
TEST(HiddenSplitModule, StagesOutOfIndexOrderKeepTheLayerOrder) { expect_runs({2, 0, 0, 1, 1, 1}); }
TEST(HiddenSplitModule, PinnedParameterFreeLayersStartAndEndRuns) {
  // Tanh layers pinned to stage 1 open the second run and to stage 2 close the last one.
  expect_runs({0, 0, 1, 1, 2, 2}, {false, false, true, false, false, true});
}

}  // namespace
}  // namespace kit
