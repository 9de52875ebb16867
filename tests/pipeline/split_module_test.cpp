// Problem 2.1: split_module. Every stage here is the CPU, so a layer's stage comes from
// its WithDevice pin; the partitions must follow the order of the layers.
// The subject part calls split_module and records the partitions as data (record_partitions:
// stages, names, which layer each child is); the judge checks them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "judge/judge.h"
#include "kit/errors.h"
#include "pipeline/partition.h"
#include "pipeline_test_util.h"

namespace kit::test {  // its helpers (pipeline_test_util.h) without a using list
namespace {

// split_module(seq) in the subject, its partitions as data in the judge; `layers` are the
// layers the test built, in their order (a child is named by its index in them).
SplitResult split(torch::nn::Sequential seq, const std::vector<const torch::nn::Module*>& layers,
                  const std::string& label = "") {
  return read_partitions(
      judge::subject([&](judge::Record& out) { record_partitions(out, split_module(seq), layers); }, label));
}

TEST(SplitModule, LayoutABAGivesThreePartitions) {
  torch::nn::Linear a1(4, 4), b(4, 4), a2(4, 4);
  torch::nn::Sequential seq(WithDevice(a1, stage(0)), WithDevice(b, stage(1)), WithDevice(a2, stage(0)));
  const SplitResult p = split(seq, {a1.get(), b.get(), a2.get()});
  if (!judge::judging()) return;
  ASSERT_EQ(p.size(), 3u) << "stages 0, 1, 0 must give three partitions (one per run of consecutive layers); "
                             "grouping layers by stage merges the two runs on stage 0 and runs layer 2 before "
                             "layer 1. got: "
                          << p.describe();
  EXPECT_EQ(p.stages[0], to_string(stage(0)));
  EXPECT_EQ(p.stages[1], to_string(stage(1)));
  EXPECT_EQ(p.stages[2], to_string(stage(0)));
  EXPECT_EQ(p.layer_order(), (std::vector<int64_t>{0, 1, 2})) << "partition j must hold layer j, got: " << p.describe();
}

TEST(SplitModule, GroupsConsecutiveLayersOfOneStageAndKeepsTheirOrder) {
  torch::nn::Sequential seq;
  std::vector<const torch::nn::Module*> layers;
  const std::vector<int64_t> stage_of_layer = {0, 0, 1, 1, 1, 2};
  for (int64_t s : stage_of_layer) {
    torch::nn::Linear layer(3, 3);
    layers.push_back(layer.get());
    seq->push_back(WithDevice(layer, stage(s)));
  }
  const SplitResult p = split(seq, layers);
  if (!judge::judging()) return;
  ASSERT_EQ(p.size(), 3u) << p.describe();
  EXPECT_EQ(p.layers[0].size(), 2u) << p.describe();
  EXPECT_EQ(p.layers[1].size(), 3u) << p.describe();
  EXPECT_EQ(p.layers[2].size(), 1u) << p.describe();
  for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(p.stages[static_cast<size_t>(j)], to_string(stage(j))) << p.describe();
  EXPECT_EQ(p.layer_order(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}))
      << "the layers must stay in their order, got: " << p.describe();
  // Names stay the container's, so a parameter's name still says which layer it belongs to.
  EXPECT_EQ(p.names[1], (std::vector<std::string>{"2", "3", "4"})) << p.describe();
}

TEST(SplitModule, ParameterFreeLayerLandsWhereItIsPinned) {
  for (int64_t pin : {0, 1}) {
    torch::nn::Linear first(4, 4), last(4, 4);
    torch::nn::ReLU relu;
    torch::nn::Sequential seq(WithDevice(first, stage(0)), WithDevice(relu, stage(pin)), WithDevice(last, stage(1)));
    const SplitResult p = split(seq, {first.get(), relu.get(), last.get()}, "ReLU pinned to " + std::to_string(pin));
    if (!judge::judging()) continue;
    ASSERT_EQ(p.size(), 2u) << "ReLU pinned to stage " << pin << ": " << p.describe();
    const auto& part = p.layers[static_cast<size_t>(pin)];
    EXPECT_NE(std::find(part.begin(), part.end(), 1), part.end())
        << "the ReLU is pinned to stage " << pin << " but is not in that stage's partition: " << p.describe();
    EXPECT_EQ(p.layer_order(), (std::vector<int64_t>{0, 1, 2})) << p.describe();
  }
}

TEST(SplitModule, SingleStageIsOnePartition) {
  torch::nn::Linear linear(2, 2);
  torch::nn::Tanh tanh;
  torch::nn::Sequential seq(WithDevice(linear, stage(3)), WithDevice(tanh, stage(3)));
  const SplitResult p = split(seq, {linear.get(), tanh.get()});
  if (!judge::judging()) return;
  ASSERT_EQ(p.size(), 1u) << p.describe();
  EXPECT_EQ(p.stages[0], to_string(stage(3)));
  EXPECT_EQ(p.layers[0].size(), 2u);
}

TEST(SplitModule, RejectsAnEmptySequential) {
  torch::nn::Sequential empty;
  const judge::Record got =
      judge::subject([&](judge::Record& out) { out.outcome("split", [&] { split_module(empty); }); });
  JUDGE EXPECT_EQ(got.get<judge::Outcome>("split").kind, "kit::Error")
      << "an empty Sequential must be a kit::Error; split_module " << got.get<judge::Outcome>("split").describe();
}

TEST(SplitModule, RejectsAnUnpinnedParameterFreeLayer) {
  // Nothing says where a bare ReLU runs: the error must say to pin it.
  torch::nn::Sequential seq(WithDevice(torch::nn::Linear(2, 2), stage(0)), torch::nn::ReLU());
  const judge::Record got =
      judge::subject([&](judge::Record& out) { out.outcome("split", [&] { split_module(seq); }); });
  if (!judge::judging()) return;
  const judge::Outcome o = got.get<judge::Outcome>("split");
  ASSERT_EQ(o.kind, "kit::Error") << "split_module must reject a parameter-free layer that is not pinned to a "
                                     "stage with a kit::Error; it "
                                  << o.describe();
  EXPECT_NE(o.message.find("WithDevice"), std::string::npos)
      << "the message should say how to fix it (wrap the layer in WithDevice): " << o.message;
}

TEST(SplitModule, RejectsAnUnpinnedCpuLayer) {
  // On the CPU every stage is the same device, so parameters cannot name a stage.
  torch::nn::Sequential seq(torch::nn::Linear(2, 2));
  const judge::Record got =
      judge::subject([&](judge::Record& out) { out.outcome("split", [&] { split_module(seq); }); });
  JUDGE EXPECT_EQ(got.get<judge::Outcome>("split").kind, "kit::Error")
      << "an unpinned layer on the CPU must be a kit::Error; split_module " << got.get<judge::Outcome>("split").describe();
}

}  // namespace
}  // namespace kit::test
