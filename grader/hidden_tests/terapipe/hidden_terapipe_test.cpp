// Graded variants of tests/terapipe/test_sliced_pipeline.cpp's schedule case and of
// tests/terapipe/test_slicing.cpp on shapes and tables the public cases do not use (more
// micro-batches, slices and stages per rank; other seeds, lengths and stage counts), so a
// schedule or a slicing tuned to the public cases loses these points. The subject records what
// the student's sliced_schedule and optimal_slicing returned; the judge compares them with the
// references of slicing_reference.h (a sort, brute force) and the simulator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "judge/judge.h"
#include "kit/errors.h"
#include "pipeline_training/simulate.h"
#include "terapipe/pipeline.h"
#include "terapipe/slicing.h"
#include "terapipe/slicing_reference.h"

namespace {
namespace judge = kit::judge;
namespace pp = kit::pp;
namespace tp = kit::terapipe;

struct Shape {
  int64_t m, n, chunks;
  std::string str() const {
    return "m = " + std::to_string(m) + ", " + std::to_string(n) + " slices, " + std::to_string(chunks) + " chunks";
  }
};

}  // namespace

TEST(HiddenSlicedPipeline, ScheduleIsGPipeOrderWithSlicesOnOtherShapes) {
  const std::vector<Shape> shapes{{3, 2, 1}, {1, 5, 3}, {4, 3, 2}, {2, 1, 4}, {2, 7, 1}};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (const Shape& s : shapes) out.put(s.str(), pp::to_string(tp::sliced_schedule(s.m, s.n, s.chunks)));
  });
  if (!judge::judging()) return;
  for (const Shape& s : shapes)
    EXPECT_EQ(got.get<std::string>(s.str()), pp::to_string(terapipe_test::gpipe_slice_order(s.m, s.n, s.chunks)))
        << "sliced_schedule(" << s.m << ", " << s.n << ", " << s.chunks << ")";
}

// K = 5 ranks of one stage each, n = 6 equal slices, forward 1 and backward 2: the simulator's
// makespan is (n + K - 1) * 3, and the replay ends (no rank waits for a message never sent).
TEST(HiddenSlicedPipeline, SimulatorReplaysFiveRanksOfSixSlices) {
  const int64_t K = 5, n = 6;
  const pp::PipelineShape shape{K, n, 1};
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (int64_t r = 0; r < K; ++r) out.put("rank " + std::to_string(r), pp::to_string(tp::make_sliced_schedule(shape, n, r)));
  });
  if (!judge::judging()) return;
  const std::string want = pp::to_string(terapipe_test::gpipe_slice_order(1, n, 1));
  for (int64_t r = 0; r < K; ++r) EXPECT_EQ(got.get<std::string>("rank " + std::to_string(r)), want) << "rank " << r;
  if (::testing::Test::HasFailure()) return;
  const pp::Schedules all(static_cast<size_t>(K), terapipe_test::gpipe_slice_order(1, n, 1));
  EXPECT_DOUBLE_EQ(pp::simulate(all, shape, pp::Costs{1.0, 2.0, 0.0, {}, {}}).makespan, static_cast<double>((n + K - 1) * 3));
}

namespace {

// t(l, c) = a + b*l + g*l*c from the seed, or a bumpy table; defined on 1 <= l, l + c <= L
// only (elsewhere: a kit::Error, as a measured profile would be).
tp::Latency table(std::mt19937& rng, int64_t L, bool bumpy) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double a = 0.25 + 3 * u(rng), b = 0.1 + 2 * u(rng), g = 0.1 * u(rng);
  std::vector<std::vector<double>> t(static_cast<size_t>(L + 1), std::vector<double>(static_cast<size_t>(L + 1)));
  for (int64_t l = 1; l <= L; ++l)
    for (int64_t c = 0; l + c <= L; ++c)
      t[static_cast<size_t>(l)][static_cast<size_t>(c)] =
          bumpy ? 0.2 + 2 * u(rng) * static_cast<double>(l) / static_cast<double>(L) + (u(rng) < 0.25 ? 3 * u(rng) : 0)
                : a + b * static_cast<double>(l) + g * static_cast<double>(l * c);
  return [t, L](int64_t l, int64_t c) {
    if (l < 1 || c < 0 || l + c > L) throw kit::Error("t(l, c) asked outside 1 <= l, 0 <= c, l + c <= L");
    return t[static_cast<size_t>(l)][static_cast<size_t>(c)];
  };
}

struct Problem {
  int64_t L, K;
  tp::Latency t;
  std::string what;
};

}  // namespace

TEST(HiddenSlicing, EqualsBruteForceOnOtherSeedsLengthsAndStages) {
  std::mt19937 rng(2027);
  std::vector<Problem> problems;
  for (const int64_t L : {3, 7, 11, 13})
    for (const int64_t K : {2, 5, 12})
      for (const bool bumpy : {false, true})
        problems.push_back({L, K, table(rng, L, bumpy),
                            "L = " + std::to_string(L) + ", K = " + std::to_string(K) + (bumpy ? ", bumpy" : "")});
  const judge::Record got = judge::subject([&](judge::Record& out) {
    for (const Problem& p : problems) out.put(p.what, tp::optimal_slicing(p.L, p.K, p.t).lengths);
  });
  if (!judge::judging()) return;
  for (const Problem& p : problems) {
    const auto lengths = got.get<std::vector<int64_t>>(p.what);
    int64_t total = 0;
    bool positive = true;
    for (const int64_t l : lengths) total += l, positive &= l >= 1;
    ASSERT_TRUE(positive && total == p.L) << p.what << ": " << tp::to_string(lengths) << " is not a slicing of L";
    EXPECT_NEAR(tp::evaluate(lengths, p.L, p.t).time(p.K), terapipe_test::brute_force(p.L, p.K, p.t), 1e-9)
        << p.what << ": " << tp::to_string(lengths) << " is not the best slicing";
  }
}

// L = 48 tokens on K = 6 stages, t = a + b*l: n slices cost n*a + b*L in sum and at least
// a + b*ceil(L/n) at the max, so the best time(K) is the smallest of those over n.
TEST(HiddenSlicing, FortyEightTokensWithoutContextCostOnSixStages) {
  const double a = 0.75, b = 0.25;
  const tp::Latency t = [=](int64_t l, int64_t) { return a + b * static_cast<double>(l); };
  const int64_t L = 48, K = 6;
  const judge::Record got = judge::subject([&](judge::Record& out) { out.put("lengths", tp::optimal_slicing(L, K, t).lengths); });
  if (!judge::judging()) return;
  double best = std::numeric_limits<double>::infinity();
  for (int64_t n = 1; n <= L; ++n)
    best = std::min(best, static_cast<double>(n) * a + b * static_cast<double>(L) +
                              static_cast<double>(K - 1) * (a + b * static_cast<double>((L + n - 1) / n)));
  const auto lengths = got.get<std::vector<int64_t>>("lengths");
  ASSERT_FALSE(lengths.empty());
  EXPECT_NEAR(tp::evaluate(lengths, L, t).time(K), best, 1e-9) << tp::to_string(lengths);
}
