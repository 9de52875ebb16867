// Helpers that more than one planner test uses, defined once: the test files compile together
// in one unity batch (the top CMakeLists.txt), where two definitions would collide.
// The graded cases run as subject + judge (tests/judge/judge.h): the subject calls the student's
// cost terms, partition_layers and the given search that calls them, and records what they
// returned (numbers, Memory, Cost, layer counts, what threw); the judge checks those records
// against the hand-computed values. Memory, Strategy and Cost travel as records by the Codecs
// below.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "judge/judge.h"
#include "planner/model_spec.h"
#include "planner/partition.h"
#include "planner/search.h"

namespace planner_test {

// Two layers with round numbers: forward FLOPs 1e9 and 3e9 per token, parameters 100 and 300
// bytes (times `scale`), kept activations 10 and 30 bytes per token, outputs 400 bytes per token.
inline kit::planner::ModelSpec two_layers(double scale = 1) {
  kit::planner::ModelSpec m;
  m.name = "two";
  m.layers = {{"a", 1e9, 100 * scale, 10, 400, 4}, {"b", 3e9, 300 * scale, 30, 400, 1}};
  return m;
}

// Three layers for activation recomputation, every number round (bytes per token, fp32):
//           forward FLOPs  parameters  activations kept  output (the next layer's input)
//   e       1e9            100         20                8
//   f       2e9            200         50                4
//   g       3e9            300         40                2
// No tensor-parallel all-reduces, so t only divides the work and the memory.
inline kit::planner::ModelSpec three_layers() {
  kit::planner::ModelSpec m;
  m.name = "three";
  m.layers = {{"e", 1e9, 100, 20, 8, 0}, {"f", 2e9, 200, 50, 4, 0}, {"g", 3e9, 300, 40, 2, 0}};
  return m;
}

// The smallest slowest stage over every partition of the layers into consecutive runs (brute
// force over the L - 1 gaps; given slowest_stage_seconds): the partition tests' reference.
inline double brute_force(const std::vector<std::vector<double>>& seconds) {
  const size_t p = seconds.size(), L = seconds[0].size();
  double best = std::numeric_limits<double>::infinity();
  for (uint64_t mask = 0; mask < (uint64_t{1} << (L - 1)); ++mask) {
    if (static_cast<size_t>(__builtin_popcountll(mask)) != p - 1) continue;
    std::vector<int64_t> counts{1};
    for (size_t g = 0; g + 1 < L; ++g) {
      if (mask >> g & 1) counts.push_back(0);
      ++counts.back();
    }
    best = std::min(best, kit::planner::slowest_stage_seconds(seconds, counts));
  }
  return best;
}

// The judge's check of an outcome the old test wrote as EXPECT_THROW(call, kit::Error).
inline void expect_kit_error(const kit::judge::Outcome& o, const std::string& what) {
  EXPECT_EQ(o.kind, "kit::Error") << what << " must throw kit::Error; it " << o.describe();
}

}  // namespace planner_test

namespace kit::judge {

namespace planner_codec {
// A field of a Map value as a T; false when it is missing or no T.
template <typename T>
bool field(const Value& v, const char* key, T* out) {
  if (v.kind != Value::Kind::Map) return false;
  const Value* f = v.find(key);
  return f && Codec<T>::get(*f, out);
}
template <typename T>
void add(Value* v, const char* key, const T& x) {
  v->map.emplace_back(key, Codec<T>::put(x));
}
}  // namespace planner_codec

template <>
struct Codec<kit::planner::Memory> : Fields<kit::planner::Memory> {
  static auto fields() {
    using M = kit::planner::Memory;
    return std::make_tuple(field("parameters", &M::parameters), field("gradients", &M::gradients),
                           field("optimizer", &M::optimizer), field("activations", &M::activations));
  }
};

template <>
struct Codec<kit::planner::Strategy> {
  static Value put(const kit::planner::Strategy& s) {
    Value v{Value::Kind::Map};
    planner_codec::add(&v, "dp", s.dp);
    planner_codec::add(&v, "pp", s.pp);
    planner_codec::add(&v, "tp", s.tp);
    planner_codec::add(&v, "micro_batch", s.micro_batch);
    planner_codec::add(&v, "schedule", static_cast<int64_t>(s.schedule));
    planner_codec::add(&v, "virtual_chunks", s.virtual_chunks);
    planner_codec::add(&v, "zero_stage", s.zero_stage);
    planner_codec::add(&v, "recompute", s.recompute);
    planner_codec::add(&v, "layers_per_stage", s.layers_per_stage);
    return v;
  }
  static bool get(const Value& v, kit::planner::Strategy* out) {
    int64_t schedule = -1;
    if (!(planner_codec::field(v, "dp", &out->dp) && planner_codec::field(v, "pp", &out->pp) &&
          planner_codec::field(v, "tp", &out->tp) && planner_codec::field(v, "micro_batch", &out->micro_batch) &&
          planner_codec::field(v, "schedule", &schedule) && planner_codec::field(v, "virtual_chunks", &out->virtual_chunks) &&
          planner_codec::field(v, "zero_stage", &out->zero_stage) &&
          planner_codec::field(v, "recompute", &out->recompute) &&
          planner_codec::field(v, "layers_per_stage", &out->layers_per_stage)))
      return false;
    using S = kit::planner::Schedule;
    if (schedule != static_cast<int64_t>(S::gpipe) && schedule != static_cast<int64_t>(S::one_f_one_b) &&
        schedule != static_cast<int64_t>(S::interleaved))
      return false;
    out->schedule = static_cast<S>(schedule);
    return true;
  }
};

template <>
struct Codec<kit::planner::Cost> : Fields<kit::planner::Cost> {
  static auto fields() {
    using C = kit::planner::Cost;
    return std::make_tuple(field("strategy", &C::strategy), field("micro_batches", &C::micro_batches),
                           field("stage_seconds", &C::stage_seconds), field("compute", &C::compute),
                           field("tensor", &C::tensor), field("p2p", &C::p2p), field("pipeline", &C::pipeline),
                           field("contention", &C::contention), field("optimizer", &C::optimizer),
                           field("data", &C::data), field("bubble", &C::bubble), field("total", &C::total),
                           field("memory", &C::memory), field("memory_limit", &C::memory_limit),
                           field("fits", &C::fits));
  }
};

}  // namespace kit::judge
