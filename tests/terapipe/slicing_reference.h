// The judge's references for Problems 7.2 and 7.3 that need no model: GPipe's order with
// slices, written out as a sort (not the student's sliced_schedule), and the best time(K) over
// every slicing by brute force (not the student's optimal_slicing). The public tests and their
// hidden variants (grader/hidden_tests/terapipe/) both use them.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "pipeline_training/schedules.h"
#include "terapipe/slicing.h"

namespace terapipe_test {

// GPipe's order with slices, written out here (not the student's sliced_schedule) as a sort:
// every forward before every backward; forwards by unit, then stage; backwards by micro-batch,
// then the later slice first, then the later stage first.
inline kit::pp::RankSchedule gpipe_slice_order(int64_t m, int64_t n, int64_t chunks) {
  std::vector<std::array<int64_t, 3>> keys;  // {op, unit, chunk}
  for (int64_t op = 0; op < 2; ++op)
    for (int64_t u = 0; u < m * n; ++u)
      for (int64_t c = 0; c < chunks; ++c) keys.push_back({op, u, c});
  const auto rank = [n](const std::array<int64_t, 3>& k) {
    return k[0] == 0 ? std::make_tuple(int64_t{0}, k[1], int64_t{0}, k[2])
                     : std::make_tuple(int64_t{1}, k[1] / n, -(k[1] % n), -k[2]);
  };
  std::sort(keys.begin(), keys.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  kit::pp::RankSchedule out;
  for (const auto& k : keys) out.push_back(k[0] == 0 ? kit::pp::F(k[1], k[2]) : kit::pp::B(k[1], k[2]));
  return out;
}

// The smallest time(K) over every slicing of L tokens (each of the L-1 gaps cut or not).
inline double brute_force(int64_t L, int64_t K, const kit::terapipe::Latency& t) {
  double best = std::numeric_limits<double>::infinity();
  for (uint32_t cuts = 0; cuts < (1u << (L - 1)); ++cuts) {
    std::vector<int64_t> lengths;
    int64_t len = 1;
    for (int64_t gap = 0; gap < L - 1; ++gap) {
      if (cuts & (1u << gap)) {
        lengths.push_back(len);
        len = 0;
      }
      ++len;
    }
    lengths.push_back(len);
    best = std::min(best, kit::terapipe::evaluate(lengths, L, t).time(K));
  }
  return best;
}

}  // namespace terapipe_test
