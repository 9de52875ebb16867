// The test side's own copy of the three schedules, written differently from the solution
// on purpose: a bug copied into both would otherwise pass. Each schedule is built as one
// flat sequence of "the k-th forward" and "the k-th backward" of a rank, in three phases
// (warm-up forwards, steady forward/backward pairs, cool-down backwards), the way
// Megatron-LM's forward_backward_pipelining_with_interleaving counts them; the
// non-interleaved schedules are the cases v = 1 with their own warm-up counts.
//
//   GPipe        warm-up = m                (every forward, then every backward)
//   1F1B         warm-up = min(p - r - 1, m)
//   Interleaved  total = m*v; warm-up = total when m == p, otherwise
//                min(total, (p - r - 1)*2 + (v - 1)*p)
//
// The k-th forward of a rank (k = 0 .. m*v-1) works on chunk (k % (p*v)) / p and
// micro-batch (k / (p*v))*p + k % p: groups of p micro-batches go through chunk 0, then
// the same group through chunk 1, and so on. The k-th backward takes the same micro-batch
// through the chunks in the opposite order, v-1 - (k % (p*v)) / p. With v = 1 both reduce
// to "micro-batch k, chunk 0", so backwards run in micro-batch order for every schedule.
#pragma once
#include <algorithm>
#include <cstdint>

#include "pipeline_training/action.h"

namespace pp_test {

using kit::pp::Action;
using kit::pp::RankSchedule;
using kit::pp::Schedules;

struct RefShape {
  int64_t p = 1, m = 1, v = 1;
};

// Micro-batch and chunk of the k-th forward (backward = false) or backward of a rank.
inline Action kth_action(const RefShape& s, int64_t k, bool backward) {
  const int64_t group = s.p * s.v;
  const int64_t in_group = k % group;
  const int64_t microbatch = (k / group) * s.p + in_group % s.p;
  int64_t chunk = in_group / s.p;
  if (backward) chunk = s.v - 1 - chunk;
  return backward ? kit::pp::B(microbatch, chunk) : kit::pp::F(microbatch, chunk);
}

// The three phases, given how many forwards come before the first backward.
inline RankSchedule phased(const RefShape& s, int64_t warmup) {
  const int64_t total = s.m * s.v;
  warmup = std::min(warmup, total);
  RankSchedule out;
  for (int64_t k = 0; k < warmup; ++k) out.push_back(kth_action(s, k, false));
  for (int64_t k = 0; k < total - warmup; ++k) {  // steady: forward k+warmup, then backward k
    out.push_back(kth_action(s, k + warmup, false));
    out.push_back(kth_action(s, k, true));
  }
  for (int64_t k = total - warmup; k < total; ++k) out.push_back(kth_action(s, k, true));
  return out;
}

inline RankSchedule ref_gpipe(int64_t p, int64_t m, int64_t rank) {
  (void)rank;
  return phased({p, m, 1}, m);
}

inline RankSchedule ref_1f1b(int64_t p, int64_t m, int64_t rank) { return phased({p, m, 1}, p - rank - 1); }

// Megatron's warm-up count for rank `rank` of an interleaved schedule.
inline int64_t ref_interleaved_warmup(int64_t p, int64_t m, int64_t v, int64_t rank) {
  const int64_t total = m * v;
  if (m == p) return total;  // "all warm-up": every forward, then every backward
  return std::min(total, (p - rank - 1) * 2 + (v - 1) * p);
}

inline RankSchedule ref_interleaved(int64_t p, int64_t m, int64_t v, int64_t rank) {
  return phased({p, m, v}, ref_interleaved_warmup(p, m, v, rank));
}

// The most (micro-batch, chunk) pairs rank `rank` holds at once in Megatron's interleaved
// schedule: every warm-up forward, plus the first steady forward before its backward.
inline int64_t ref_interleaved_peak_in_flight(int64_t p, int64_t m, int64_t v, int64_t rank) {
  return std::min(m * v, ref_interleaved_warmup(p, m, v, rank) + 1);
}

// Every rank's schedule.
inline Schedules ref_all_gpipe(int64_t p, int64_t m) {
  Schedules s;
  for (int64_t r = 0; r < p; ++r) s.push_back(ref_gpipe(p, m, r));
  return s;
}
inline Schedules ref_all_1f1b(int64_t p, int64_t m) {
  Schedules s;
  for (int64_t r = 0; r < p; ++r) s.push_back(ref_1f1b(p, m, r));
  return s;
}
inline Schedules ref_all_interleaved(int64_t p, int64_t m, int64_t v) {
  Schedules s;
  for (int64_t r = 0; r < p; ++r) s.push_back(ref_interleaved(p, m, v, r));
  return s;
}

}  // namespace pp_test
