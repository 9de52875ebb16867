// Graded variants of tests/pipeline/split_module_test.cpp on stage layouts the public
// test does not use. The contract (pipeline/partition.h): a new partition wherever the
// stage changes, layers in their order and under their names, so a stage may own several
// partitions and the partitions need not be in stage order.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "judge/judge.h"
#include "pipeline/partition.h"
#include "pipeline/pipeline_test_util.h"

namespace kit::test {  // its helpers (pipeline_test_util.h) without a using list
namespace {

// Builds a Sequential with one layer per entry of `layout` (its stage; a Tanh where
// `tanh_at` says so, else a Linear), splits it, and checks the partitions against the runs
// of equal consecutive stages: their stages, their layers in order, the layers' names (the
// container's: `names` when given, else the positions "0", "1", ...).
void expect_runs(const std::vector<int64_t>& layout, const std::vector<bool>& tanh_at = {},
                 const std::vector<std::string>& names = {}) {
  const auto name_of = [&](size_t k) { return k < names.size() ? names[k] : std::to_string(k); };
  torch::nn::Sequential seq;
  std::vector<const torch::nn::Module*> layers;
  for (size_t k = 0; k < layout.size(); ++k) {
    if (k < tanh_at.size() && tanh_at[k]) {
      torch::nn::Tanh layer;
      layers.push_back(layer.get());
      seq->push_back(name_of(k), WithDevice(layer, stage(layout[k])));
    } else {
      torch::nn::Linear layer(3, 3);
      layers.push_back(layer.get());
      seq->push_back(name_of(k), WithDevice(layer, stage(layout[k])));
    }
  }
  // The subject splits; the judge holds the partitions, as data, against the runs.
  const SplitResult p = read_partitions(
      judge::subject([&](judge::Record& out) { record_partitions(out, split_module(seq), layers); }));
  if (!judge::judging()) return;
  std::vector<int64_t> want_stages;
  std::vector<std::vector<std::string>> want_names;
  for (size_t k = 0; k < layout.size(); ++k) {
    if (k == 0 || layout[k] != layout[k - 1]) {
      want_stages.push_back(layout[k]);
      want_names.emplace_back();
    }
    want_names.back().push_back(name_of(k));
  }
  ASSERT_EQ(p.size(), want_stages.size()) << "one partition per run of consecutive layers on one stage, got: "
                                          << p.describe();
  int64_t k = 0;
  for (size_t j = 0; j < p.size(); ++j) {
    EXPECT_EQ(p.stages[j], to_string(stage(want_stages[j]))) << "partition " << j << ": " << p.describe();
    EXPECT_EQ(p.names[j], want_names[j]) << "partition " << j << ": " << p.describe();
    for (size_t i = 0; i < p.layers[j].size() && k < static_cast<int64_t>(layers.size()); ++i, ++k)
      EXPECT_EQ(p.layers[j][i], k) << "partition " << j << " item " << i << " is not layer " << k << ": "
                                   << p.describe();
  }
  EXPECT_EQ(k, static_cast<int64_t>(layers.size()))
      << "the partitions hold " << k << " of the " << layers.size() << " layers";
}

TEST(HiddenSplitModule, LayoutAABBCGivesThreePartitions) { expect_runs({0, 0, 1, 1, 2}); }
TEST(HiddenSplitModule, LayoutABBACGivesFourPartitions) { expect_runs({0, 1, 1, 0, 2}); }
TEST(HiddenSplitModule, AlternatingLayoutABABGivesFourPartitions) { expect_runs({0, 1, 0, 1}); }
TEST(HiddenSplitModule, StagesOutOfIndexOrderKeepTheLayerOrder) { expect_runs({2, 0, 0, 1, 1, 1}); }
TEST(HiddenSplitModule, NamedLayersKeepTheirNamesNotTheirPositions) {
  // A Sequential built with names (as a model's blocks are): each partition's layers keep them.
  expect_runs({0, 0, 1, 1, 2}, {false, false, true, false, false}, {"wte", "h0", "act", "h1", "head"});
}
TEST(HiddenSplitModule, PinnedParameterFreeLayersStartAndEndRuns) {
  // Tanh layers pinned to stage 1 open the second run and to stage 2 close the last one.
  expect_runs({0, 0, 1, 1, 2, 2}, {false, false, true, false, false, true});
}

}  // namespace
}  // namespace kit::test
