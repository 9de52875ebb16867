// Problem 7.3 (given code around the student's dynamic program): see terapipe/slicing.h.
#include "terapipe/slicing.h"

#include <algorithm>

#include "kit/errors.h"

namespace kit::terapipe {

Slicing evaluate(const std::vector<int64_t>& lengths, int64_t L, const Latency& t) {
  Slicing s;
  s.lengths = lengths;
  int64_t c = 0;
  for (const int64_t l : lengths) {
    if (l < 1)
      throw Error("the slicing " + to_string(lengths) + " has a slice of " + std::to_string(l) +
                  " tokens: every slice needs at least one");
    if (c + l > L) break;  // reported below, with the total
    const double ti = t(l, c);
    s.sum += ti;
    s.max = std::max(s.max, ti);
    c += l;
  }
  int64_t total = 0;
  for (const int64_t l : lengths) total += l;
  if (total != L)
    throw Error("the slicing " + to_string(lengths) + " covers " + std::to_string(total) + " tokens, not the " +
                std::to_string(L) + " of the sequence: the slices must add up to L");
  return s;
}

std::vector<int64_t> uniform_slicing(int64_t L, int64_t k) {
  if (k < 1 || k > L)
    throw Error("cannot cut " + std::to_string(L) + " tokens into " + std::to_string(k) +
                " slices: use 1 to " + std::to_string(L) + " slices");
  std::vector<int64_t> out(static_cast<size_t>(k), L / k);
  for (int64_t i = 0; i < L % k; ++i) out[static_cast<size_t>(i)] += 1;
  return out;
}

std::string to_string(const std::vector<int64_t>& lengths) {
  std::string s;
  for (const int64_t l : lengths) s += (s.empty() ? "" : "+") + std::to_string(l);
  return s.empty() ? "(none)" : s;
}

}  // namespace kit::terapipe
