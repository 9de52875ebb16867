// Problem 7.3: the slicing dynamic program against brute force over every slicing.
//
// For L <= 14 there are 2^(L-1) slicings, few enough to try them all: the dynamic program's
// slicing must reach the smallest time(K) of them all, on random latency tables that grow
// with l and c (as attention's cost does), on tables that do not (nothing in TeraPipe's
// algorithm needs convexity or monotonicity), and for K = 1 .. 8 stages. Its sum and max
// must be those of the slicing it returns, and the slices must add up to L.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kit/errors.h"
#include "terapipe/slicing.h"

namespace {
using kit::terapipe::Latency;
using kit::terapipe::Slicing;

// The smallest time(K) over every slicing of L tokens (each of the L-1 gaps cut or not).
double brute_force(int64_t L, int64_t K, const Latency& t) {
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

// A table t(l, c) = a + b*l + g*l*c (+ noise when `bumpy`): fixed overhead per slice, work per
// token, attention to the context; bumpy tables are neither monotone nor convex.
Latency random_table(std::mt19937& rng, int64_t L, bool bumpy) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double a = 0.5 + 2 * u(rng), b = 0.2 + u(rng), g = 0.05 * u(rng);
  std::vector<std::vector<double>> table(static_cast<size_t>(L + 1), std::vector<double>(static_cast<size_t>(L + 1)));
  for (int64_t l = 1; l <= L; ++l)
    for (int64_t c = 0; l + c <= L; ++c)
      table[l][c] = bumpy ? 0.1 + 3 * u(rng) * l / static_cast<double>(L) + (u(rng) < 0.3 ? 2 * u(rng) : 0)
                          : a + b * l + g * l * c;
  return [table](int64_t l, int64_t c) { return table[static_cast<size_t>(l)][static_cast<size_t>(c)]; };
}

void expect_optimal(int64_t L, int64_t K, const Latency& t, const std::string& what) {
  const Slicing s = kit::terapipe::optimal_slicing(L, K, t);
  int64_t total = 0;
  for (const int64_t l : s.lengths) {
    EXPECT_GE(l, 1) << what;
    total += l;
  }
  ASSERT_EQ(total, L) << what << ": the slices " << kit::terapipe::to_string(s.lengths) << " do not add up to L";
  const Slicing again = kit::terapipe::evaluate(s.lengths, L, t);
  EXPECT_NEAR(s.sum, again.sum, 1e-9) << what << ": the sum reported is not the slicing's";
  EXPECT_NEAR(s.max, again.max, 1e-9) << what << ": the max reported is not the slicing's";
  EXPECT_NEAR(again.time(K), brute_force(L, K, t), 1e-9)
      << what << ": " << kit::terapipe::to_string(s.lengths) << " is not the best slicing";
}

}  // namespace

TEST(Slicing, EqualsBruteForceOnIncreasingTables) {
  std::mt19937 rng(7);
  for (int64_t L : {1, 2, 5, 9, 14})
    for (int64_t K : {1, 2, 4, 8}) {
      const Latency t = random_table(rng, L, false);
      expect_optimal(L, K, t, "L = " + std::to_string(L) + ", K = " + std::to_string(K));
    }
}

TEST(Slicing, EqualsBruteForceOnTablesThatAreNotConvex) {
  std::mt19937 rng(11);
  for (int round = 0; round < 6; ++round)
    for (int64_t K : {1, 3, 8}) {
      const int64_t L = 8 + 2 * (round % 4);
      expect_optimal(L, K, random_table(rng, L, true),
                     "bumpy table " + std::to_string(round) + ", L = " + std::to_string(L) + ", K = " +
                         std::to_string(K));
    }
}

// When context costs nothing, t = a + b*l: for any number of slices the sum is the same, so
// the best slicing evens out the max: its lengths differ by at most one.
TEST(Slicing, SlicesEvenlyWhenContextCostsNothing) {
  const Latency t = [](int64_t l, int64_t) { return 1.0 + 0.5 * static_cast<double>(l); };
  for (int64_t K : {2, 4, 16}) {
    const Slicing s = kit::terapipe::optimal_slicing(12, K, t);
    ASSERT_FALSE(s.lengths.empty());
    const auto [lo, hi] = std::minmax_element(s.lengths.begin(), s.lengths.end());
    EXPECT_LE(*hi - *lo, 1) << "K = " << K << ": " << kit::terapipe::to_string(s.lengths);
    EXPECT_NEAR(kit::terapipe::evaluate(s.lengths, 12, t).time(K), brute_force(12, K, t), 1e-9)
        << "K = " << K << ": " << kit::terapipe::to_string(s.lengths);
  }
  // More stages make the slowest slice count more, so more (smaller) slices.
  EXPECT_LT(kit::terapipe::optimal_slicing(12, 2, t).lengths.size(),
            kit::terapipe::optimal_slicing(12, 16, t).lengths.size());
}

// With one stage there is no pipeline to fill: the (K - 1) max term is 0 and a fixed cost per
// slice makes one slice of all L tokens the best. With many stages that one slice is the
// worst: the max term is what the dynamic program must weigh.
TEST(Slicing, TheMaxTermDecidesBetweenOneSliceAndMany) {
  const Latency t = [](int64_t l, int64_t c) { return 1.0 + static_cast<double>(l) * (1.0 + 0.01 * c); };
  EXPECT_EQ(kit::terapipe::optimal_slicing(12, 1, t).lengths, std::vector<int64_t>{12});
  const Slicing many = kit::terapipe::optimal_slicing(12, 8, t);
  EXPECT_GT(many.lengths.size(), 1u) << kit::terapipe::to_string(many.lengths);
  EXPECT_NEAR(many.time(8), brute_force(12, 8, t), 1e-9);
}

TEST(Slicing, EvaluateAndBadArgumentsAreClearErrors) {
  const Latency t = [](int64_t l, int64_t) { return static_cast<double>(l); };
  EXPECT_THROW(kit::terapipe::evaluate({3, 4}, 8, t), kit::Error);
  EXPECT_THROW(kit::terapipe::evaluate({3, 0, 5}, 8, t), kit::Error);
  EXPECT_THROW(kit::terapipe::uniform_slicing(8, 9), kit::Error);
  EXPECT_EQ(kit::terapipe::uniform_slicing(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_THROW(kit::terapipe::optimal_slicing(0, 2, t), kit::Error);
  EXPECT_THROW(kit::terapipe::optimal_slicing(8, 0, t), kit::Error);
  try {
    kit::terapipe::evaluate({3, 4}, 8, t);
  } catch (const kit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("add up to L"), std::string::npos) << e.what();
  }
}
