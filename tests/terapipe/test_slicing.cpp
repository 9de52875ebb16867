// Problem 7.3: the slicing dynamic program against brute force over every slicing.
//
// For L <= 14 there are 2^(L-1) slicings, few enough to try them all: the dynamic program's
// slicing must reach the smallest time(K) of them all, on random latency tables that grow
// with l and c (as attention's cost does), on tables that do not (nothing in TeraPipe's
// algorithm needs convexity or monotonicity), and for K = 1 .. 8 stages. Its sum and max
// must be those of the slicing it returns, and the slices must add up to L.
// The subject parts call the student's optimal_slicing and record the slicings it returned;
// brute force and every check are the judge's (tests/judge/judge.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "judge/judge.h"
#include "kit/errors.h"
#include "terapipe/slicing.h"
#include "slicing_reference.h"

namespace kit::judge {
// A slicing as {lengths, sum, max}.
template <>
struct Codec<kit::terapipe::Slicing> : Fields<kit::terapipe::Slicing> {
  static auto fields() {
    using S = kit::terapipe::Slicing;
    return std::make_tuple(field("lengths", &S::lengths), field("sum", &S::sum), field("max", &S::max));
  }
};
}  // namespace kit::judge

namespace {
namespace judge = kit::judge;
using kit::terapipe::Latency;
using kit::terapipe::Slicing;
using terapipe_test::brute_force;

// A table t(l, c) = a + b*l + g*l*c (+ noise when `bumpy`): fixed overhead per slice, work per
// token, attention to the context; bumpy tables are neither monotone nor convex.
int64_t g_asked_outside = 0;  // calls of a random_table outside its triangle

Latency random_table(std::mt19937& rng, int64_t L, bool bumpy) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double a = 0.5 + 2 * u(rng), b = 0.2 + u(rng), g = 0.05 * u(rng);
  std::vector<std::vector<double>> table(static_cast<size_t>(L + 1), std::vector<double>(static_cast<size_t>(L + 1)));
  for (int64_t l = 1; l <= L; ++l)
    for (int64_t c = 0; l + c <= L; ++c)
      table[l][c] = bumpy ? 0.1 + 3 * u(rng) * l / static_cast<double>(L) + (u(rng) < 0.3 ? 2 * u(rng) : 0)
                          : a + b * l + g * l * c;
  // Defined where slicing.h says the DP may ask (1 <= l, 0 <= c, l + c <= L), as a profile
  // measured on those points is: anywhere else is the DP's bug, a kit::Error here, and
  // counted (the subject records the count: a DP that catches the error still fails).
  return [table, L](int64_t l, int64_t c) {
    if (l < 1 || c < 0 || l + c > L) {
      ++g_asked_outside;
      throw kit::Error("t(" + std::to_string(l) + ", " + std::to_string(c) + ") asked on L = " + std::to_string(L) +
                       " tokens: optimal_slicing may call t only for 1 <= l, 0 <= c, l + c <= L");
    }
    return table[static_cast<size_t>(l)][static_cast<size_t>(c)];
  };
}

// One DP problem: L tokens, K stages, a latency table, and its name in messages.
struct Problem {
  int64_t L, K;
  Latency t;
  std::string what;
};

// The subject part: optimal_slicing of every problem, recorded in order.
std::vector<Slicing> solve_in_subject(const std::vector<Problem>& problems) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    std::vector<Slicing> all;
    g_asked_outside = 0;
    for (const auto& p : problems) all.push_back(kit::terapipe::optimal_slicing(p.L, p.K, p.t));
    out.put("slicings", all);
    out.put("asked_outside", g_asked_outside);
  });
  if (judge::judging())
    EXPECT_EQ(got.get<int64_t>("asked_outside"), 0)
        << "optimal_slicing asked t(l, c) outside 1 <= l, 0 <= c, l + c <= L (and went on past the error)";
  auto all = got.get<std::vector<Slicing>>("slicings");
  if (got.ok() && all.size() != problems.size())
    ADD_FAILURE() << all.size() << " slicings recorded for " << problems.size() << " problems";
  all.resize(problems.size());
  return all;
}

void expect_optimal(const Problem& p, const Slicing& s) {
  const int64_t L = p.L, K = p.K;
  const Latency& t = p.t;
  const std::string& what = p.what;
  int64_t total = 0;
  for (const int64_t l : s.lengths) {
    EXPECT_GE(l, 1) << what;
    total += l;
  }
  ASSERT_EQ(total, L) << what << ": the slices " << kit::terapipe::to_string(s.lengths) << " do not add up to L";
  ASSERT_TRUE(std::all_of(s.lengths.begin(), s.lengths.end(), [](int64_t l) { return l >= 1; })) << what;
  const Slicing again = kit::terapipe::evaluate(s.lengths, L, t);
  EXPECT_NEAR(s.sum, again.sum, 1e-9) << what << ": the sum reported is not the slicing's";
  EXPECT_NEAR(s.max, again.max, 1e-9) << what << ": the max reported is not the slicing's";
  EXPECT_NEAR(again.time(K), brute_force(L, K, t), 1e-9)
      << what << ": " << kit::terapipe::to_string(s.lengths) << " is not the best slicing";
}

void expect_all_optimal(const std::vector<Problem>& problems) {
  const std::vector<Slicing> got = solve_in_subject(problems);
  if (!judge::judging()) return;
  for (size_t i = 0; i < problems.size(); ++i) expect_optimal(problems[i], got[i]);
}

}  // namespace

TEST(Slicing, EqualsBruteForceOnIncreasingTables) {
  std::mt19937 rng(7);
  std::vector<Problem> problems;
  for (int64_t L : {1, 2, 5, 9, 14})
    for (int64_t K : {1, 2, 4, 8})
      problems.push_back({L, K, random_table(rng, L, false), "L = " + std::to_string(L) + ", K = " + std::to_string(K)});
  expect_all_optimal(problems);
}

TEST(Slicing, EqualsBruteForceOnTablesThatAreNotConvex) {
  std::mt19937 rng(11);
  std::vector<Problem> problems;
  for (int round = 0; round < 6; ++round)
    for (int64_t K : {1, 3, 8}) {
      const int64_t L = 8 + 2 * (round % 4);
      problems.push_back({L, K, random_table(rng, L, true),
                          "bumpy table " + std::to_string(round) + ", L = " + std::to_string(L) + ", K = " +
                              std::to_string(K)});
    }
  expect_all_optimal(problems);
}

// When context costs nothing, t = a + b*l: for any number of slices the sum is the same, so
// the best slicing evens out the max: its lengths differ by at most one.
TEST(Slicing, SlicesEvenlyWhenContextCostsNothing) {
  const Latency t = [](int64_t l, int64_t) { return 1.0 + 0.5 * static_cast<double>(l); };
  const std::vector<int64_t> Ks{2, 4, 16};
  std::vector<Problem> problems;
  for (int64_t K : Ks) problems.push_back({12, K, t, "K = " + std::to_string(K)});
  const std::vector<Slicing> got = solve_in_subject(problems);
  if (!judge::judging()) return;
  for (size_t i = 0; i < Ks.size(); ++i) {
    const int64_t K = Ks[i];
    const Slicing& s = got[i];
    ASSERT_FALSE(s.lengths.empty());
    const auto [lo, hi] = std::minmax_element(s.lengths.begin(), s.lengths.end());
    EXPECT_LE(*hi - *lo, 1) << "K = " << K << ": " << kit::terapipe::to_string(s.lengths);
    EXPECT_NEAR(kit::terapipe::evaluate(s.lengths, 12, t).time(K), brute_force(12, K, t), 1e-9)
        << "K = " << K << ": " << kit::terapipe::to_string(s.lengths);
  }
  // More stages make the slowest slice count more, so more (smaller) slices (K = 2 and 16).
  EXPECT_LT(got[0].lengths.size(), got[2].lengths.size());
}

// At a length the kit runs (bench/terapipe.py slices 128 to 512 tokens), past any search of the
// 2^(L-1) slicings: L = 64, t = a + b*l again. With n slices the sum is n*a + b*L and the max at
// least a + b*ceil(L/n), so the best time(K) is the smallest of those over n.
TEST(Slicing, SixtyFourTokensWithoutContextCostSliceEvenly) {
  const double a = 1.0, b = 0.5;
  const Latency t = [=](int64_t l, int64_t) { return a + b * static_cast<double>(l); };
  const int64_t L = 64, K = 4;
  const std::vector<Slicing> got = solve_in_subject({{L, K, t, "L = 64, K = 4"}});
  if (!judge::judging()) return;
  double best = std::numeric_limits<double>::infinity();
  for (int64_t n = 1; n <= L; ++n)
    best = std::min(best, static_cast<double>(n) * a + b * static_cast<double>(L) +
                              static_cast<double>(K - 1) * (a + b * static_cast<double>((L + n - 1) / n)));
  const Slicing& s = got[0];
  ASSERT_FALSE(s.lengths.empty());
  EXPECT_NEAR(kit::terapipe::evaluate(s.lengths, L, t).time(K), best, 1e-9) << kit::terapipe::to_string(s.lengths);
}

// With one stage there is no pipeline to fill: the (K - 1) max term is 0 and a fixed cost per
// slice makes one slice of all L tokens the best. With many stages that one slice is the
// worst: the max term is what the dynamic program must weigh.
TEST(Slicing, TheMaxTermDecidesBetweenOneSliceAndMany) {
  const Latency t = [](int64_t l, int64_t c) { return 1.0 + static_cast<double>(l) * (1.0 + 0.01 * c); };
  const std::vector<Slicing> got = solve_in_subject({{12, 1, t, "K = 1"}, {12, 8, t, "K = 8"}});
  if (!judge::judging()) return;
  EXPECT_EQ(got[0].lengths, std::vector<int64_t>{12});
  const Slicing& many = got[1];
  EXPECT_GT(many.lengths.size(), 1u) << kit::terapipe::to_string(many.lengths);
  EXPECT_NEAR(many.time(8), brute_force(12, 8, t), 1e-9);
}

TEST(Slicing, EvaluateAndBadArgumentsAreClearErrors) {
  const Latency t = [](int64_t l, int64_t) { return static_cast<double>(l); };
  const judge::Record got = judge::subject([&](judge::Record& out) {
    out.outcome("L = 0", [&] { kit::terapipe::optimal_slicing(0, 2, t); });
    out.outcome("K = 0", [&] { kit::terapipe::optimal_slicing(8, 0, t); });
  });
  if (!judge::judging()) return;
  EXPECT_THROW(kit::terapipe::evaluate({3, 4}, 8, t), kit::Error);
  EXPECT_THROW(kit::terapipe::evaluate({3, 0, 5}, 8, t), kit::Error);
  EXPECT_THROW(kit::terapipe::uniform_slicing(8, 9), kit::Error);
  EXPECT_EQ(kit::terapipe::uniform_slicing(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(got.get<judge::Outcome>("L = 0").kind, "kit::Error") << got.get<judge::Outcome>("L = 0").describe();
  EXPECT_EQ(got.get<judge::Outcome>("K = 0").kind, "kit::Error") << got.get<judge::Outcome>("K = 0").describe();
  try {
    kit::terapipe::evaluate({3, 4}, 8, t);
  } catch (const kit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("add up to L"), std::string::npos) << e.what();
  }
}
