// Problem 1.1: DataPartitioner, Partition, partition_dataset.
//
// Partitions are compared by the examples' own index field (a value), never by object
// identity: the original's test hashed tensors by identity and let overlapping
// partitions pass.
// Each case's subject part calls the student's code and records what it served (sizes, the
// partitions' example indices, what threw); every check is the judge's (tests/judge/judge.h).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data_parallel/dataset.h"
#include "data_parallel/partition_test_util.h"
#include "judge/judge.h"
#include "kit/errors.h"

namespace partition_test {  // its helpers (partition_test_util.h) without a using list
namespace {

namespace judge = kit::judge;

constexpr int64_t kIndexBase = 1000;  // example i carries index 1000 + i, so values differ from positions


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

// The judge's reading of one outcome: a kit::Error (with a message) was thrown.
void expect_kit_error(const judge::Record& got, const std::string& what, const std::string& why) {
  const auto o = got.get<judge::Outcome>(what);
  if (!got.ok()) return;
  EXPECT_EQ(o.kind, "kit::Error") << why << ": must throw kit::Error; it " << o.describe();
}

struct Case {
  int64_t n;
  int world;
  std::string name() const { return "n = " + std::to_string(n) + ", world_size = " + std::to_string(world); }
};
std::vector<Case> cases() {
  std::vector<Case> c;
  for (int64_t n : {64, 128, 512})
    for (int w : {1, 2, 4, 8}) c.push_back({n, w});  // 1: one process, the whole dataset
  return c;
}

TEST(DataPartitioner, EqualSplitsAreDisjointAndCoverWhatTheSizesPromise) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    auto data = fake(c.n);
    const judge::Record got = judge::subject(
        [&](judge::Record& out) {
          std::vector<int64_t> counts;
          std::vector<PartView> parts;
          for (int r = 0; r < c.world; ++r) {
            // Each rank builds its own partitioner, as separate processes do.
            kit::DataPartitioner partitioner(data, std::vector<double>(c.world, 1.0 / c.world));
            counts.push_back(partitioner.num_partitions());
            if (partitioner.num_partitions() != c.world) break;
            parts.push_back(view_of(partitioner.use(r)));
          }
          out.put("num_partitions", counts);
          out.put("parts", parts);
        },
        c.name());
    if (!judge::judging()) continue;
    std::vector<std::vector<int64_t>> per_rank;
    expect_rank_views(got, c.world, c.n, kIndexBase, &per_rank);
    if (HasFailure()) return;  // one failing case says enough
  }
}

TEST(DataPartitioner, EveryRankComputesTheSamePermutation) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    const std::vector<double> sizes(c.world, 1.0 / c.world);
    const judge::Record got = judge::subject(
        [&](judge::Record& out) {
          kit::DataPartitioner a(fake(c.n), sizes), b(fake(c.n), sizes);
          out.put("a_count", a.num_partitions());
          out.put("b_count", b.num_partitions());
          if (a.num_partitions() != b.num_partitions()) return;
          std::vector<std::vector<int64_t>> va, vb;
          for (int64_t k = 0; k < a.num_partitions(); ++k) {
            va.push_back(values_of(a.use(k)));
            vb.push_back(values_of(b.use(k)));
          }
          out.put("a", va);
          out.put("b", vb);
        },
        c.name());
    if (!judge::judging()) continue;
    ASSERT_EQ(got.get<int64_t>("a_count"), got.get<int64_t>("b_count"));
    const auto a = got.get<std::vector<std::vector<int64_t>>>("a");
    const auto b = got.get<std::vector<std::vector<int64_t>>>("b");
    ASSERT_EQ(a.size(), b.size());
    ASSERT_EQ(static_cast<int64_t>(a.size()), got.get<int64_t>("a_count"));
    for (size_t k = 0; k < a.size(); ++k)
      EXPECT_EQ(a[k], b[k]) << "two partitioners built from the same data and seed disagree on partition " << k
                            << ": seed the shuffle with `seed` (no std::random_device, no time)";
    if (HasFailure()) return;
  }
}

TEST(DataPartitioner, ShufflesWithTheSeed) {
  const int64_t n = 128;
  const judge::Record got =
      judge::subject([&](judge::Record& out) { record_seeded_orders(out, fake(n), {0.5, 0.5}, 1234, 4321); });
  if (!judge::judging()) return;
  std::vector<int64_t> identity(n);
  for (int64_t i = 0; i < n; ++i) identity[static_cast<size_t>(i)] = kIndexBase + i;
  expect_seeded_orders(got, 1234, 4321, identity);
}

TEST(DataPartitioner, DefaultSizesCutFloorOfEachShareAndDropTheRest) {
  // {0.7, 0.2, 0.1} of 15: floor(10.5) = 10, floor(3) = 3, floor(1.5) = 1; one example unused.
  const judge::Record got = judge::subject([&](judge::Record& out) {
    kit::DataPartitioner p(fake(15));
    record_partitions(out, p, 3);
  });
  if (!judge::judging()) return;
  expect_cut(got, {10, 3, 1});
}

TEST(DataPartitioner, AZeroSizeIsAnEmptyPartition) {
  // A size of 0 is not negative: partition 1 exists and holds nothing; the others are as usual.
  const judge::Record got = judge::subject([&](judge::Record& out) {
    kit::DataPartitioner p(fake(10), {0.5, 0.0, 0.5});
    out.put("num_partitions", p.num_partitions());
    if (p.num_partitions() != 3) return;
    std::vector<int64_t> sizes;
    for (int64_t k = 0; k < 3; ++k) sizes.push_back(p.use(k).size());
    out.put("sizes", sizes);
  });
  if (!judge::judging()) return;
  ASSERT_EQ(got.get<int64_t>("num_partitions"), 3) << "sizes {0.5, 0.0, 0.5} make three partitions";
  EXPECT_EQ(got.get<std::vector<int64_t>>("sizes"), (std::vector<int64_t>{5, 0, 5}));
}

TEST(DataPartitioner, RejectsSizesAboveOneAndMissingPartitions) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.outcome("{0.6, 0.5}", [&] { kit::DataPartitioner(fake(10), {0.6, 0.5}); });
    out.outcome("{0.5, 0.3, 0.3}", [&] { kit::DataPartitioner(fake(10), {0.5, 0.3, 0.3}); });
    out.outcome("{-0.2, 0.5}", [&] { kit::DataPartitioner(fake(10), {-0.2, 0.5}); });
    kit::DataPartitioner p(fake(10), {0.5, 0.5});
    out.outcome("use(2)", [&] { p.use(2); });
    out.outcome("use(-1)", [&] { p.use(-1); });
    out.outcome("use(0).get(5)", [&] { p.use(0).get(5); });
    out.outcome("use(0).get(-1)", [&] { p.use(0).get(-1); });
  });
  if (!judge::judging()) return;
  expect_kit_error(got, "{0.6, 0.5}", "sizes adding up to 1.1");
  expect_kit_error(got, "{0.5, 0.3, 0.3}", "sizes adding up to 1.1");
  expect_kit_error(got, "{-0.2, 0.5}", "a negative size");
  expect_kit_error(got, "use(2)", "partition 2 of 2");
  expect_kit_error(got, "use(-1)", "partition -1");
  expect_kit_error(got, "use(0).get(5)", "item 5 of a 5-item partition");
  expect_kit_error(got, "use(0).get(-1)", "item -1 of a 5-item partition");
}

// The judge's reading of one outcome: a kit::Error whose message says something.
void expect_kit_error_with_message(const judge::Record& got, const std::string& what, const std::string& why) {
  const auto o = got.get<judge::Outcome>(what);
  if (!got.ok()) return;
  EXPECT_EQ(o.kind, "kit::Error") << why << ": must throw kit::Error; it " << o.describe();
  if (o.kind == "kit::Error") EXPECT_FALSE(o.message.empty()) << why << ": the kit::Error must say what is wrong";
}

TEST(DataPartitioner, UsingAPartitionThatDoesNotExistIsAnErrorWithAMessage) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    // No sizes (a world of 0): the constructor or use(0) must say so.
    out.outcome("use(0) of 0", [&] { kit::DataPartitioner(fake(10), {}).use(0); });
    kit::DataPartitioner p(fake(10), {0.5, 0.5});
    out.outcome("use(-1) of 2", [&] { p.use(-1); });
    out.outcome("use(2) of 2", [&] { p.use(2); });
  });
  if (!judge::judging()) return;
  expect_kit_error_with_message(got, "use(0) of 0", "partition 0 of a partitioner with no sizes (world size 0)");
  expect_kit_error_with_message(got, "use(-1) of 2", "partition -1 (a negative rank)");
  expect_kit_error_with_message(got, "use(2) of 2", "partition 2 of 2 (a rank >= the world size)");
}

TEST(DataPartitioner, APartitionOfNoDataIsAnError) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.outcome("Partition(nullptr, {0, 1})", [&] { kit::Partition(nullptr, {0, 1}); });
  });
  JUDGE expect_kit_error_with_message(got, "Partition(nullptr, {0, 1})",
                                      "a Partition of a null data pointer (item i would read through it)");
}

TEST(PartitionDataset, EachRankGetsItsShareInBatchesOfBatchSizeOverWorldSize) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    auto data = fake(c.n);
    const int64_t global_batch = 4 * c.world;
    const judge::Record got = judge::subject(
        [&](judge::Record& out) {
          std::vector<int64_t> batch_sizes, batch_counts;
          std::vector<std::vector<int64_t>> seen, reference;
          for (int r = 0; r < c.world; ++r) {
            kit::DataLoader loader = kit::partition_dataset(r, c.world, data, global_batch, kit::collate);
            batch_sizes.push_back(loader.batch_size());
            batch_counts.push_back(loader.num_batches());
            std::vector<int64_t> served;
            for (int64_t k = 0; k < loader.num_batches(); ++k) {
              kit::Batch b = loader.batch(k);
              served.insert(served.end(), b.indices.begin(), b.indices.end());
            }
            seen.push_back(served);
            // What the student's DataPartitioner, default seed, gives rank r.
            kit::DataPartitioner partitioner(data, std::vector<double>(c.world, 1.0 / c.world));
            reference.push_back(values_of(partitioner.use(r)));
          }
          out.put("batch_size", batch_sizes);
          out.put("num_batches", batch_counts);
          out.put("seen", seen);
          out.put("partitioner", reference);
        },
        c.name());
    if (!judge::judging()) continue;
    const auto batch_sizes = got.get<std::vector<int64_t>>("batch_size");
    const auto batch_counts = got.get<std::vector<int64_t>>("num_batches");
    const auto seen = got.get<std::vector<std::vector<int64_t>>>("seen");
    const auto reference = got.get<std::vector<std::vector<int64_t>>>("partitioner");
    ASSERT_TRUE(got.ok());
    const size_t W = static_cast<size_t>(c.world);
    ASSERT_TRUE(batch_sizes.size() == W && batch_counts.size() == W && seen.size() == W && reference.size() == W);
    for (size_t r = 0; r < W; ++r) {
      EXPECT_EQ(batch_sizes[r], 4) << "the per-rank batch is batch_size / world_size";
      EXPECT_EQ(batch_counts[r], batch_counts[0])
          << "rank " << r << " has a different number of batches: its all-reduce would wait forever";
      // The loader serves partition `rank` of the default-seeded partitioner, in order.
      EXPECT_EQ(seen[r], reference[r]) << "rank " << r << " does not serve DataPartitioner(...).use(rank)";
    }
    EXPECT_EQ(partition_test::check_disjoint(seen, c.n, c.n / c.world, kIndexBase), "");
    if (HasFailure()) return;
  }
}

TEST(PartitionDataset, UsesTheGivenCollateFunction) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    int calls = 0;
    kit::Collate counting = [&](const std::vector<kit::Example>& ex) {
      ++calls;
      return kit::collate(ex);
    };
    kit::DataLoader loader = kit::partition_dataset(1, 2, fake(16), 4, counting);
    loader.batch(0);
    out.put("calls", calls);
  });
  JUDGE EXPECT_EQ(got.get<int>("calls"), 1) << "partition_dataset must pass collate_fn to the DataLoader";
}

TEST(PartitionDataset, RejectsABatchThatDoesNotSplitEvenly) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.outcome("batch 10 on 4", [&] { kit::partition_dataset(0, 4, fake(64), 10, kit::collate); });
    out.outcome("batch 0", [&] { kit::partition_dataset(0, 2, fake(64), 0, kit::collate); });
    out.outcome("rank 2 of 2", [&] { kit::partition_dataset(2, 2, fake(64), 8, kit::collate); });
  });
  if (!judge::judging()) return;
  expect_kit_error(got, "batch 10 on 4", "10 is not a multiple of 4");
  expect_kit_error(got, "batch 0", "batch size 0");
  expect_kit_error(got, "rank 2 of 2", "rank 2 of 2");
}

TEST(PartitionDataset, RejectsAWorldOfZeroAndARankOutsideTheWorld) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.outcome("world size 0", [&] { kit::partition_dataset(0, 0, fake(64), 8, kit::collate); });
    out.outcome("rank -1 of 2", [&] { kit::partition_dataset(-1, 2, fake(64), 8, kit::collate); });
    out.outcome("rank 2 of 2", [&] { kit::partition_dataset(2, 2, fake(64), 8, kit::collate); });
    out.outcome("rank 5 of 4", [&] { kit::partition_dataset(5, 4, fake(64), 8, kit::collate); });
  });
  if (!judge::judging()) return;
  expect_kit_error_with_message(got, "world size 0", "partition_dataset with world_size 0 (check it before dividing by it)");
  expect_kit_error_with_message(got, "rank -1 of 2", "partition_dataset with rank -1");
  expect_kit_error_with_message(got, "rank 2 of 2", "partition_dataset with rank 2 of world size 2");
  expect_kit_error_with_message(got, "rank 5 of 4", "partition_dataset with rank 5 of world size 4");
}

}  // namespace
}  // namespace partition_test
