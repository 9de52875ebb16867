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
  // TODO(Problem 7.3 optimal_slicing): your code here.
  throw kit::NotImplemented("Problem 7.3 optimal_slicing");
}

}  // namespace kit::terapipe
