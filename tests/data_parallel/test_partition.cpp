// Problem 1.1: DataPartitioner, Partition, partition_dataset.
//
// Partitions are compared by the examples' own index field (a value), never by object
// identity: the original's test hashed tensors by identity and let overlapping
// partitions pass.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data_parallel/dataset.h"
#include "data_parallel/partition_test_util.h"
#include "kit/errors.h"

namespace {

constexpr int64_t kIndexBase = 1000;  // example i carries index 1000 + i, so values differ from positions

using partition_test::values_of;

std::shared_ptr<const kit::ExampleSource> fake(int64_t n) {
  return std::make_shared<partition_test::FakeSource>(n, kIndexBase, 7);
}

std::string describe(const std::vector<int64_t>& v, size_t max_items = 12) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size() && i < max_items; ++i) s << (i ? ", " : "") << v[i];
  if (v.size() > max_items) s << ", ... (" << v.size() << " items)";
  s << "]";
  return s.str();
}

// Checks that the ranks' example sets are disjoint, each of `expected_each` examples, every
// value a real example; returns a message describing the first problem ("" when fine).
std::string check_disjoint(const std::vector<std::vector<int64_t>>& per_rank, int64_t n, int64_t expected_each) {
  std::map<int64_t, int> owner;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (static_cast<int64_t>(per_rank[r].size()) != expected_each)
      return "rank " + std::to_string(r) + " got " + std::to_string(per_rank[r].size()) + " examples, expected " +
             std::to_string(expected_each) + " (floor(n / world_size))";
    for (int64_t v : per_rank[r]) {
      if (v < kIndexBase || v >= kIndexBase + n)
        return "rank " + std::to_string(r) + " serves example index " + std::to_string(v) + ", which is not in the data";
      auto [it, fresh] = owner.emplace(v, static_cast<int>(r));
      if (!fresh)
        return "example " + std::to_string(v - kIndexBase) + " is in the partitions of rank " +
               std::to_string(it->second) + " and rank " + std::to_string(r) +
               ": partitions must not overlap (each rank must see different data)";
    }
  }
  return "";
}

struct Case {
  int64_t n;
  int world;
};
std::vector<Case> cases() {
  std::vector<Case> c;
  for (int64_t n : {64, 128, 512})
    for (int w : {2, 4, 8}) c.push_back({n, w});
  return c;
}

TEST(DataPartitioner, EqualSplitsAreDisjointAndCoverWhatTheSizesPromise) {
  for (const Case& c : cases()) {
    SCOPED_TRACE("n = " + std::to_string(c.n) + ", world_size = " + std::to_string(c.world));
    auto data = fake(c.n);
    std::vector<std::vector<int64_t>> per_rank;
    for (int r = 0; r < c.world; ++r) {
      // Each rank builds its own partitioner, as separate processes do.
      kit::DataPartitioner partitioner(data, std::vector<double>(c.world, 1.0 / c.world));
      ASSERT_EQ(partitioner.num_partitions(), c.world);
      kit::Partition part = partitioner.use(r);
      // A Partition is a view: item i is data[index[i]].
      ASSERT_EQ(part.size(), static_cast<int64_t>(part.index().size()));
      for (int64_t i = 0; i < part.size(); ++i)
        ASSERT_EQ(part.get(i).index, kIndexBase + part.index()[static_cast<size_t>(i)])
            << "Partition::get(" << i << ") must return data[index[" << i << "]]";
      per_rank.push_back(values_of(part));
    }
    const std::string problem = check_disjoint(per_rank, c.n, c.n / c.world);
    EXPECT_EQ(problem, "");
    std::set<int64_t> all;
    for (const auto& v : per_rank) all.insert(v.begin(), v.end());
    EXPECT_EQ(static_cast<int64_t>(all.size()), c.world * (c.n / c.world)) << "the union of the partitions";
    if (HasFailure()) return;  // one failing case says enough
  }
}

TEST(DataPartitioner, EveryRankComputesTheSamePermutation) {
  for (const Case& c : cases()) {
    SCOPED_TRACE("n = " + std::to_string(c.n) + ", world_size = " + std::to_string(c.world));
    const std::vector<double> sizes(c.world, 1.0 / c.world);
    kit::DataPartitioner a(fake(c.n), sizes), b(fake(c.n), sizes);
    ASSERT_EQ(a.num_partitions(), b.num_partitions());
    for (int64_t k = 0; k < a.num_partitions(); ++k)
      EXPECT_EQ(values_of(a.use(k)), values_of(b.use(k)))
          << "two partitioners built from the same data and seed disagree on partition " << k
          << ": seed the shuffle with `seed` (no std::random_device, no time)";
    if (HasFailure()) return;
  }
}

TEST(DataPartitioner, ShufflesWithTheSeed) {
  const int64_t n = 128;
  auto order = [&](uint64_t seed) {
    kit::DataPartitioner p(fake(n), {0.5, 0.5}, seed);
    std::vector<int64_t> all = values_of(p.use(0)), second = values_of(p.use(1));
    all.insert(all.end(), second.begin(), second.end());
    return all;
  };
  const auto a = order(1234), b = order(4321);
  EXPECT_NE(a, b) << "seeds 1234 and 4321 gave the same order " << describe(a) << ": the seed must drive the shuffle";
  std::vector<int64_t> identity(n);
  for (int64_t i = 0; i < n; ++i) identity[static_cast<size_t>(i)] = kIndexBase + i;
  EXPECT_NE(a, identity) << "the positions are not shuffled (partition 0 is the first half of the data)";
  EXPECT_EQ(order(1234), a) << "the same seed must give the same order";
}

TEST(DataPartitioner, DefaultSizesCutFloorOfEachShareAndDropTheRest) {
  // {0.7, 0.2, 0.1} of 15: floor(10.5) = 10, floor(3) = 3, floor(1.5) = 1; one example unused.
  kit::DataPartitioner p(fake(15));
  ASSERT_EQ(p.num_partitions(), 3);
  EXPECT_EQ(p.use(0).size(), 10);
  EXPECT_EQ(p.use(1).size(), 3);
  EXPECT_EQ(p.use(2).size(), 1);
  std::vector<std::vector<int64_t>> parts = {values_of(p.use(0)), values_of(p.use(1)), values_of(p.use(2))};
  std::set<int64_t> all;
  for (const auto& v : parts) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), 14u) << "partitions overlap";
}

TEST(DataPartitioner, RejectsSizesAboveOneAndMissingPartitions) {
  EXPECT_THROW((kit::DataPartitioner(fake(10), {0.6, 0.5})), kit::Error) << "sizes adding up to 1.1";
  EXPECT_THROW((kit::DataPartitioner(fake(10), {0.5, 0.3, 0.3})), kit::Error) << "sizes adding up to 1.1";
  EXPECT_THROW((kit::DataPartitioner(fake(10), {-0.2, 0.5})), kit::Error) << "a negative size";
  kit::DataPartitioner p(fake(10), {0.5, 0.5});
  EXPECT_THROW(p.use(2), kit::Error) << "partition 2 of 2";
  EXPECT_THROW(p.use(-1), kit::Error);
  EXPECT_THROW(p.use(0).get(5), kit::Error) << "item 5 of a 5-item partition";
}

TEST(PartitionDataset, EachRankGetsItsShareInBatchesOfBatchSizeOverWorldSize) {
  for (const Case& c : cases()) {
    SCOPED_TRACE("n = " + std::to_string(c.n) + ", world_size = " + std::to_string(c.world));
    auto data = fake(c.n);
    const int64_t global_batch = 4 * c.world;
    std::vector<std::vector<int64_t>> per_rank;
    int64_t batches = -1;
    for (int r = 0; r < c.world; ++r) {
      kit::DataLoader loader = kit::partition_dataset(r, c.world, data, global_batch, kit::collate);
      EXPECT_EQ(loader.batch_size(), 4) << "the per-rank batch is batch_size / world_size";
      if (batches < 0) batches = loader.num_batches();
      EXPECT_EQ(loader.num_batches(), batches)
          << "rank " << r << " has a different number of batches: its all-reduce would wait forever";
      std::vector<int64_t> seen;
      for (int64_t k = 0; k < loader.num_batches(); ++k) {
        kit::Batch b = loader.batch(k);
        seen.insert(seen.end(), b.indices.begin(), b.indices.end());
      }
      // The loader serves partition `rank` of the default-seeded partitioner, in order.
      kit::DataPartitioner reference(data, std::vector<double>(c.world, 1.0 / c.world));
      EXPECT_EQ(seen, values_of(reference.use(r))) << "rank " << r << " does not serve DataPartitioner(...).use(rank)";
      per_rank.push_back(seen);
    }
    EXPECT_EQ(check_disjoint(per_rank, c.n, c.n / c.world), "");
    if (HasFailure()) return;
  }
}

TEST(PartitionDataset, UsesTheGivenCollateFunction) {
  int calls = 0;
  kit::Collate counting = [&](const std::vector<kit::Example>& ex) {
    ++calls;
    return kit::collate(ex);
  };
  kit::DataLoader loader = kit::partition_dataset(1, 2, fake(16), 4, counting);
  loader.batch(0);
  EXPECT_EQ(calls, 1) << "partition_dataset must pass collate_fn to the DataLoader";
}

TEST(PartitionDataset, RejectsABatchThatDoesNotSplitEvenly) {
  EXPECT_THROW(kit::partition_dataset(0, 4, fake(64), 10, kit::collate), kit::Error) << "10 is not a multiple of 4";
  EXPECT_THROW(kit::partition_dataset(0, 2, fake(64), 0, kit::collate), kit::Error) << "batch size 0";
  EXPECT_THROW(kit::partition_dataset(2, 2, fake(64), 8, kit::collate), kit::Error) << "rank 2 of 2";
}

}  // namespace
