// Problem 7.3: TeraPipe's dynamic program for the best slicing (see terapipe/slicing.h).
#include <algorithm>
#include <limits>
#include <vector>

#include "kit/errors.h"
#include "terapipe/slicing.h"

namespace kit::terapipe {

// 1. Tabulate t(l, c) once for every 1 <= l, l + c <= L (a DP calls it many times).
// 2. The candidate bounds B: every distinct value in the table, in increasing order (the
//    best slicing's slowest slice is one of them).
// 3. For each B: f[e] = the smallest sum of a slicing of the first e tokens whose slices all
//    take <= B; f[0] = 0, f[e] = min over l of f[e - l] + t(l, e - l) with t(l, e - l) <= B.
//    Keep the l that reached each f[e], then walk back from e = L to read the slices.
//    Its time is at most f[L] + (K - 1) * B; keep the best slicing over all B.
// 4. Stop early: the unbounded minimum sum S (f[L] with no bound) is a lower bound on any
//    f[L], so once S + (K - 1) * B is no better than the best found, no larger B can win.
Slicing optimal_slicing(int64_t L, int64_t K, const Latency& t) {
  if (L < 1 || K < 1)
    throw Error("optimal_slicing needs at least one token and one stage (got L = " + std::to_string(L) +
                ", K = " + std::to_string(K) + ")");
  // BEGIN SOLUTION 7.3 optimal_slicing
  const double inf = std::numeric_limits<double>::infinity();
  // table[l][c], l = 1..L, c = 0..L-l.
  std::vector<std::vector<double>> table(static_cast<size_t>(L + 1));
  std::vector<double> bounds;
  for (int64_t l = 1; l <= L; ++l)
    for (int64_t c = 0; l + c <= L; ++c) {
      table[static_cast<size_t>(l)].push_back(t(l, c));
      bounds.push_back(table[static_cast<size_t>(l)].back());
    }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());

  // The prefix DP under a bound; returns f[L] and fills `last` (the last slice of each prefix).
  std::vector<int64_t> last(static_cast<size_t>(L + 1), 0);
  auto solve = [&](double bound) {
    std::vector<double> f(static_cast<size_t>(L + 1), inf);
    f[0] = 0;
    for (int64_t e = 1; e <= L; ++e)
      for (int64_t l = 1; l <= e; ++l) {
        const double ti = table[static_cast<size_t>(l)][static_cast<size_t>(e - l)];
        if (ti > bound || f[static_cast<size_t>(e - l)] == inf) continue;
        if (f[static_cast<size_t>(e - l)] + ti < f[static_cast<size_t>(e)]) {
          f[static_cast<size_t>(e)] = f[static_cast<size_t>(e - l)] + ti;
          last[static_cast<size_t>(e)] = l;
        }
      }
    return f[static_cast<size_t>(L)];
  };
  const double lower = solve(inf);
  Slicing best;
  double best_time = inf;
  for (const double bound : bounds) {
    if (lower + static_cast<double>(K - 1) * bound >= best_time) break;
    if (solve(bound) == inf) continue;  // some prefix has no slice this fast
    std::vector<int64_t> lengths;
    for (int64_t e = L; e > 0; e -= last[static_cast<size_t>(e)]) lengths.push_back(last[static_cast<size_t>(e)]);
    std::reverse(lengths.begin(), lengths.end());
    Slicing s = evaluate(lengths, L, t);
    if (s.time(K) < best_time) {
      best_time = s.time(K);
      best = s;
    }
  }
  return best;
  // END SOLUTION
}

}  // namespace kit::terapipe
