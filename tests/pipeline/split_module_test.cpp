// Problem 2.1: split_module. Every stage here is the CPU, so a layer's stage comes from
// its WithDevice pin; the partitions must follow the order of the layers.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kit/errors.h"
#include "pipeline/partition.h"
#include "pipeline_test_util.h"

namespace kit {
namespace {

using test::describe;
using test::stage;
using test::unwrapped;

// The layers the partitions hold, in order, with WithDevice wrappers looked through.
std::vector<const torch::nn::Module*> layers_of(const Partitions& p) {
  std::vector<const torch::nn::Module*> out;
  for (const auto& part : p.partitions)
    for (size_t k = 0; k < part->size(); ++k) out.push_back(unwrapped(part->ptr(k)));
  return out;
}

TEST(SplitModule, LayoutABAGivesThreePartitions) {
  torch::nn::Linear a1(4, 4), b(4, 4), a2(4, 4);
  torch::nn::Sequential seq(WithDevice(a1, stage(0)), WithDevice(b, stage(1)), WithDevice(a2, stage(0)));
  const Partitions p = split_module(seq);
  ASSERT_EQ(p.size(), 3u) << "stages 0, 1, 0 must give three partitions (one per run of consecutive layers); "
                             "grouping layers by stage merges the two runs on stage 0 and runs layer 2 before "
                             "layer 1. got: "
                          << describe(p);
  ASSERT_EQ(p.stages.size(), 3u);
  EXPECT_EQ(p.stages[0], stage(0));
  EXPECT_EQ(p.stages[1], stage(1));
  EXPECT_EQ(p.stages[2], stage(0));
  const std::vector<const torch::nn::Module*> want = {a1.get(), b.get(), a2.get()};
  EXPECT_EQ(layers_of(p), want) << "partition j must hold layer j, got: " << describe(p);
}

TEST(SplitModule, GroupsConsecutiveLayersOfOneStageAndKeepsTheirOrder) {
  torch::nn::Sequential seq;
  std::vector<const torch::nn::Module*> want;
  const std::vector<int64_t> stage_of_layer = {0, 0, 1, 1, 1, 2};
  for (int64_t s : stage_of_layer) {
    torch::nn::Linear layer(3, 3);
    want.push_back(layer.get());
    seq->push_back(WithDevice(layer, stage(s)));
  }
  const Partitions p = split_module(seq);
  ASSERT_EQ(p.size(), 3u) << describe(p);
  EXPECT_EQ(p.partitions[0]->size(), 2u) << describe(p);
  EXPECT_EQ(p.partitions[1]->size(), 3u) << describe(p);
  EXPECT_EQ(p.partitions[2]->size(), 1u) << describe(p);
  for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(p.stages[static_cast<size_t>(j)], stage(j)) << describe(p);
  EXPECT_EQ(layers_of(p), want) << "the layers must stay in their order, got: " << describe(p);
  // Names stay the container's, so a parameter's name still says which layer it belongs to.
  EXPECT_EQ(p.partitions[1]->named_children().keys(), (std::vector<std::string>{"2", "3", "4"})) << describe(p);
}

TEST(SplitModule, ParameterFreeLayerLandsWhereItIsPinned) {
  for (int64_t pin : {0, 1}) {
    torch::nn::Linear first(4, 4), last(4, 4);
    torch::nn::ReLU relu;
    torch::nn::Sequential seq(WithDevice(first, stage(0)), WithDevice(relu, stage(pin)), WithDevice(last, stage(1)));
    const Partitions p = split_module(seq);
    ASSERT_EQ(p.size(), 2u) << "ReLU pinned to stage " << pin << ": " << describe(p);
    const size_t relu_partition = static_cast<size_t>(pin);
    const auto& part = p.partitions[relu_partition];
    bool found = false;
    for (size_t k = 0; k < part->size(); ++k) found = found || unwrapped(part->ptr(k)) == relu.get();
    EXPECT_TRUE(found) << "the ReLU is pinned to stage " << pin << " but is not in that stage's partition: "
                       << describe(p);
    EXPECT_EQ(layers_of(p), (std::vector<const torch::nn::Module*>{first.get(), relu.get(), last.get()}))
        << describe(p);
  }
}

TEST(SplitModule, SingleStageIsOnePartition) {
  torch::nn::Sequential seq(WithDevice(torch::nn::Linear(2, 2), stage(3)), WithDevice(torch::nn::Tanh(), stage(3)));
  const Partitions p = split_module(seq);
  ASSERT_EQ(p.size(), 1u) << describe(p);
  EXPECT_EQ(p.stages[0], stage(3));
  EXPECT_EQ(p.partitions[0]->size(), 2u);
}

TEST(SplitModule, RejectsAnEmptySequential) {
  torch::nn::Sequential empty;
  EXPECT_THROW(split_module(empty), Error);
}

TEST(SplitModule, RejectsAnUnpinnedParameterFreeLayer) {
  // Nothing says where a bare ReLU runs: the error must say to pin it.
  torch::nn::Sequential seq(WithDevice(torch::nn::Linear(2, 2), stage(0)), torch::nn::ReLU());
  try {
    split_module(seq);
    FAIL() << "split_module accepted a parameter-free layer that is not pinned to a stage";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("WithDevice"), std::string::npos)
        << "the message should say how to fix it (wrap the layer in WithDevice): " << e.what();
  }
}

TEST(SplitModule, RejectsAnUnpinnedCpuLayer) {
  // On the CPU every stage is the same device, so parameters cannot name a stage.
  torch::nn::Sequential seq(torch::nn::Linear(2, 2));
  EXPECT_THROW(split_module(seq), Error);
}

}  // namespace
}  // namespace kit
