// Schedules in records (tests/judge/judge.h): a step is the pair (micro-batch, partition).
#pragma once
#include "judge/judge.h"
#include "pipeline/schedule.h"

namespace kit::judge {
template <>
struct Codec<kit::Step> {
  static Value put(const kit::Step& s) { return Codec<std::pair<int64_t, int64_t>>::put({s.microbatch, s.partition}); }
  static bool get(const Value& v, kit::Step* out) {
    std::pair<int64_t, int64_t> p;
    if (!Codec<std::pair<int64_t, int64_t>>::get(v, &p)) return false;
    *out = kit::Step{p.first, p.second};
    return true;
  }
};
}  // namespace kit::judge
