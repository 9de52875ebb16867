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

std::vector<int64_t> slicing_from_spec(const std::string& s, int64_t L, int64_t K,
                                       const std::function<Latency()>& latency) {
  if (s == "none") return {L};
  if (s.rfind("uniform:", 0) == 0) {
    int64_t k = 0;
    try {
      k = std::stoll(s.substr(8));
    } catch (const std::exception&) {
      throw Error("--slices " + s + ": uniform:N takes a number of slices N");
    }
    return uniform_slicing(L, k);
  }
  if (s == "dp") return optimal_slicing(L, K, latency()).lengths;
  std::vector<int64_t> lengths;
  size_t at = 0;
  try {
    while (at <= s.size()) {
      const size_t plus = s.find('+', at);
      lengths.push_back(std::stoll(s.substr(at, plus == std::string::npos ? std::string::npos : plus - at)));
      if (plus == std::string::npos) break;
      at = plus + 1;
    }
  } catch (const std::exception&) {
    throw Error("--slices " + s + " is none of none, uniform:N, dp or lengths like 64+32+32");
  }
  evaluate(lengths, L, [](int64_t, int64_t) { return 0.0; });  // its checks: every slice >= 1, sum = L
  return lengths;
}

}  // namespace kit::terapipe
