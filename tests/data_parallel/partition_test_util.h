// Helpers shared by the partition tests (the public ones and the grader's hidden variants):
// a fake data source whose examples carry an index value unlike their position, so
// partitions are compared by value, never by position or object identity; and a partition
// as data (PartView), what a subject part records of the student's Partition for its judge
// (tests/judge/judge.h).
#pragma once
#include <memory>
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
