// Helpers shared by the partition tests (the public ones and the grader's hidden variants):
// a fake data source whose examples carry an index value unlike their position, so
// partitions are compared by value, never by position or object identity; and a partition
// as data (PartView), what a subject part records of the student's Partition for its judge
// (tests/judge/judge.h).
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data_parallel/dataset.h"
#include "judge/judge.h"

namespace partition_test {

// n examples of two tokens each; example i carries index index_base + i.
class FakeSource : public kit::ExampleSource {
 public:
  FakeSource(int64_t n, int64_t index_base, int64_t vocab) {
    for (int64_t i = 0; i < n; ++i) {
      kit::Example e;
      e.index = index_base + i;
      e.tokens = {i % vocab, (i + 1) % vocab};
      e.loss_mask = {1};
      examples_.push_back(e);
    }
  }
  int64_t size() const override { return static_cast<int64_t>(examples_.size()); }
  const kit::Example& get(int64_t i) const override { return examples_.at(static_cast<size_t>(i)); }

 private:
  std::vector<kit::Example> examples_;
};

// The example indices a partition serves, read through its public get().
inline std::vector<int64_t> values_of(const kit::ExampleSource& part) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < part.size(); ++i) v.push_back(part.get(i).index);
  return v;
}

// What a Partition shows through its public interface: size(), index(), and the example
// indices get(0..size-1) serves (only read when size() agrees with index(), so that a wrong
// size cannot send get() out of range before the judge has said so).
struct PartView {
  int64_t size = 0;
  std::vector<int64_t> index;
  std::vector<int64_t> values;
};
inline PartView view_of(const kit::Partition& part) {
  PartView v;
  v.size = part.size();
  v.index = part.index();
  if (v.size == static_cast<int64_t>(v.index.size())) v.values = values_of(part);
  return v;
}

// "" when the ranks' example sets are disjoint, each of `each` examples, every value one of
// the n examples (index_base + i); else the first problem.
inline std::string check_disjoint(const std::vector<std::vector<int64_t>>& per_rank, int64_t n, int64_t each,
                                  int64_t index_base) {
  std::map<int64_t, size_t> owner;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (static_cast<int64_t>(per_rank[r].size()) != each)
      return "rank " + std::to_string(r) + " got " + std::to_string(per_rank[r].size()) + " examples, expected " +
             std::to_string(each) + " (floor(n / world_size))";
    for (int64_t v : per_rank[r]) {
      if (v < index_base || v >= index_base + n)
        return "rank " + std::to_string(r) + " serves example index " + std::to_string(v) + ", which is not in the data";
      auto [it, fresh] = owner.emplace(v, r);
      if (!fresh)
        return "example " + std::to_string(v - index_base) + " is in the partitions of rank " +
               std::to_string(it->second) + " and rank " + std::to_string(r) +
               ": partitions must not overlap (each rank must see different data)";
    }
  }
  return "";
}

// A subject part's record of a DataPartitioner cut into `expected` shares: num_partitions,
// and, when there are that many, each partition's size and example indices.
inline void record_partitions(kit::judge::Record& out, kit::DataPartitioner& p, int64_t expected) {
  out.put("num_partitions", p.num_partitions());
  if (p.num_partitions() != expected) return;
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> parts;
  for (int64_t k = 0; k < expected; ++k) {
    sizes.push_back(p.use(k).size());
    parts.push_back(values_of(p.use(k)));
  }
  out.put("sizes", sizes);
  out.put("parts", parts);
}

// The judge's reading of record_partitions: exactly `sizes` (floor of each share), the
// partitions' examples all distinct.
inline void expect_cut(const kit::judge::Record& got, const std::vector<int64_t>& sizes) {
  const auto want = static_cast<int64_t>(sizes.size());
  ASSERT_EQ(got.get<int64_t>("num_partitions"), want);
  const auto got_sizes = got.get<std::vector<int64_t>>("sizes");
  const auto parts = got.get<std::vector<std::vector<int64_t>>>("parts");
  ASSERT_TRUE(static_cast<int64_t>(got_sizes.size()) == want && static_cast<int64_t>(parts.size()) == want);
  EXPECT_EQ(got_sizes, sizes) << "floor(size x n) examples per partition";
  std::set<int64_t> all;
  int64_t total = 0;
  for (const auto& v : parts) {
    all.insert(v.begin(), v.end());
    total += static_cast<int64_t>(v.size());
  }
  EXPECT_EQ(static_cast<int64_t>(all.size()), total) << "partitions overlap";
}

// The judge's reading of a record of every rank's own partitioner (num_partitions: each
// rank's count; parts: rank r's PartView of partition r): `world` partitions everywhere, each a
// view (item i is data[index[i]]), disjoint, floor(n / world) examples each. Rank r's example
// indices go to (*per_rank)[r]; a fatal failure when the record is not that.
inline void expect_rank_views(const kit::judge::Record& got, int world, int64_t n, int64_t index_base,
                              std::vector<std::vector<int64_t>>* per_rank) {
  const auto counts = got.get<std::vector<int64_t>>("num_partitions");
  const auto parts = got.get<std::vector<PartView>>("parts");
  ASSERT_TRUE(got.ok());
  per_rank->clear();
  for (size_t r = 0; r < counts.size(); ++r) {
    ASSERT_EQ(counts[r], world);
    ASSERT_LT(r, parts.size());
    const PartView& part = parts[r];
    // A Partition is a view: item i is data[index[i]].
    ASSERT_EQ(part.size, static_cast<int64_t>(part.index.size()));
    ASSERT_EQ(part.values.size(), part.index.size());
    for (int64_t i = 0; i < part.size; ++i)
      ASSERT_EQ(part.values[static_cast<size_t>(i)], index_base + part.index[static_cast<size_t>(i)])
          << "Partition::get(" << i << ") must return data[index[" << i << "]]";
    per_rank->push_back(part.values);
  }
  ASSERT_EQ(per_rank->size(), static_cast<size_t>(world));
  EXPECT_EQ(check_disjoint(*per_rank, n, n / world, index_base), "");
  std::set<int64_t> all;
  for (const auto& v : *per_rank) all.insert(v.begin(), v.end());
  EXPECT_EQ(static_cast<int64_t>(all.size()), world * (n / world)) << "the union of the partitions";
}

// A subject part's record of the order DataPartitioner(source, sizes, seed) serves, every
// partition's example indices one after the other, for seed a, seed b and seed a again.
inline void record_seeded_orders(kit::judge::Record& out, const std::shared_ptr<const kit::ExampleSource>& source,
                                 const std::vector<double>& sizes, uint64_t a, uint64_t b) {
  auto order = [&](uint64_t seed) {
    kit::DataPartitioner p(source, sizes, seed);
    std::vector<int64_t> all;
    for (int64_t k = 0; k < p.num_partitions(); ++k) {
      const auto v = values_of(p.use(k));
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  out.put("a", order(a));
  out.put("b", order(b));
  out.put("a again", order(a));
}

// The judge's reading of record_seeded_orders: the two seeds' orders differ, the same seed
// gives the same order twice, and the order is not `unshuffled` (the examples as they are).
inline void expect_seeded_orders(const kit::judge::Record& got, uint64_t a, uint64_t b,
                                 const std::vector<int64_t>& unshuffled) {
  const auto first = got.get<std::vector<int64_t>>("a"), second = got.get<std::vector<int64_t>>("b");
  ASSERT_TRUE(got.ok());
  EXPECT_NE(first, second) << "seeds " << a << " and " << b << " gave the same order: the seed must drive the shuffle";
  EXPECT_NE(first, unshuffled) << "the positions are not shuffled (partition 0 is the first examples of the data)";
  EXPECT_EQ(got.get<std::vector<int64_t>>("a again"), first) << "the same seed must give the same order";
}

}  // namespace partition_test

namespace kit::judge {
template <>
struct Codec<partition_test::PartView> : Fields<partition_test::PartView> {
  static auto fields() {
    using P = partition_test::PartView;
    return std::make_tuple(field("size", &P::size), field("index", &P::index), field("values", &P::values));
  }
};
}  // namespace kit::judge
