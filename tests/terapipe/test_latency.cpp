// Problem 7 (given): the latency model t(l, c) = a + b*l + d*l*(c+l). The fit recovers a known
// model exactly, is the least-squares fit on noisy samples, refuses samples that cannot
// determine it; profiling a tiny GPT-2 stage times the grid it is given, in order.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kit/errors.h"
#include "model/gpt2.h"
#include "terapipe/latency.h"

namespace {
using kit::terapipe::LatencyModel;
using kit::terapipe::LatencySample;

const LatencyModel kKnown{2e-4, 3e-6, 5e-9};  // about what a small model on a CPU shows

// Samples of `m` on lengths latency_grid(L) and contexts 0 + latency_grid(L - 1), l + c <= L.
std::vector<LatencySample> samples_of(const LatencyModel& m, int64_t L) {
  std::vector<int64_t> contexts{0};
  for (const int64_t c : kit::terapipe::latency_grid(L - 1)) contexts.push_back(c);
  std::vector<LatencySample> samples;
  for (const int64_t l : kit::terapipe::latency_grid(L))
    for (const int64_t c : contexts)
      if (l + c <= L) samples.push_back({l, c, m(l, c)});
  return samples;
}

double sum_of_squares(const LatencyModel& m, const std::vector<LatencySample>& samples) {
  double sum = 0;
  for (const auto& s : samples) sum += (m(s.l, s.c) - s.seconds) * (m(s.l, s.c) - s.seconds);
  return sum;
}

// Passes when f throws kit::Error whose message contains `words`.
void expect_error(const std::function<void()>& f, const std::string& words) {
  try {
    f();
    ADD_FAILURE() << "no kit::Error (expected one saying \"" << words << "\")";
  } catch (const kit::Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

kit::GPT2 tiny_float32_model() {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.vocab_size = 64;
  cfg.dropout = 0;
  torch::manual_seed(3);
  return kit::GPT2(cfg);
}

}  // namespace

TEST(LatencyFit, RecoversAKnownModel) {
  const auto samples = samples_of(kKnown, 128);
  const LatencyModel m = kit::terapipe::fit_latency(samples);
  EXPECT_NEAR(m.a, kKnown.a, 1e-9 * kKnown.a) << m.to_string();
  EXPECT_NEAR(m.b, kKnown.b, 1e-9 * kKnown.b) << m.to_string();
  EXPECT_NEAR(m.d, kKnown.d, 1e-9 * kKnown.d) << m.to_string();
  const auto e = kit::terapipe::fit_error(m, samples);
  EXPECT_LT(e.rms_relative, 1e-9);
  EXPECT_LT(e.max_relative, 1e-9);
  EXPECT_DOUBLE_EQ(m.latency()(7, 20), m(7, 20));
}

// t = 1 + l against 2, 4 and 2.5 seconds measured: relative errors 0, -1/4 and -1/5.
TEST(LatencyFit, ErrorIsRelativeToTheMeasurement) {
  const LatencyModel m{1, 1, 0};
  const auto e = kit::terapipe::fit_error(m, {{1, 0, 2.0}, {2, 0, 4.0}, {1, 1, 2.5}});
  EXPECT_NEAR(e.rms_relative, std::sqrt((0.0625 + 0.04) / 3), 1e-15);
  EXPECT_NEAR(e.max_relative, 0.25, 1e-15);
}

// On noisy samples no nearby model has a smaller sum of squares, and the residuals are
// orthogonal to each feature (the normal equations).
TEST(LatencyFit, IsTheLeastSquaresFit) {
  auto samples = samples_of(kKnown, 64);
  for (size_t i = 0; i < samples.size(); ++i) samples[i].seconds *= 1 + 0.2 * std::sin(3.0 * static_cast<double>(i));
  const LatencyModel m = kit::terapipe::fit_latency(samples);
  const double best = sum_of_squares(m, samples);
  for (double LatencyModel::*coef : {&LatencyModel::a, &LatencyModel::b, &LatencyModel::d})
    for (const double step : {-1e-3, 1e-3}) {
      LatencyModel near = m;
      near.*coef *= 1 + step;
      EXPECT_GT(sum_of_squares(near, samples), best) << "a " << step << " relative step from " << m.to_string();
    }
  double dot[3] = {}, size[3] = {};  // sum of r * feature, and of |r * feature|
  for (const auto& s : samples) {
    const double r = m(s.l, s.c) - s.seconds, l = static_cast<double>(s.l);
    const double feature[3] = {1.0, l, l * static_cast<double>(s.c + s.l)};
    for (int j = 0; j < 3; ++j) dot[j] += r * feature[j], size[j] += std::abs(r * feature[j]);
  }
  for (int j = 0; j < 3; ++j) EXPECT_LT(std::abs(dot[j]), 1e-9 * size[j]) << "feature " << j;
}

TEST(LatencyFit, SamplesThatCannotDetermineTheModelAreErrors) {
  using S = std::vector<LatencySample>;
  const auto fit = [](const S& s) { return [s] { kit::terapipe::fit_latency(s); }; };
  expect_error(fit({{1, 0, 1.0}, {2, 0, 2.0}}), "at least 3");
  expect_error(fit({{4, 8, 1.0}, {4, 8, 1.1}, {4, 8, 0.9}}), "more than one slice length");
  expect_error(fit({{4, 0, 1.0}, {4, 8, 1.1}, {4, 16, 1.2}}), "more than one slice length");
  expect_error(fit({{1, 0, 1.0}, {2, 0, 0.0}, {3, 0, 3.0}}), "finite and positive");
  expect_error(fit({{1, 0, 1.0}, {2, 0, -1.0}, {3, 0, 3.0}}), "finite and positive");
  expect_error(fit({{1, 0, 1.0}, {2, 0, std::nan("")}, {3, 0, 3.0}}), "finite and positive");
  expect_error(fit({{0, 0, 1.0}, {2, 0, 2.0}, {3, 0, 3.0}}), "l >= 1");
  expect_error(fit({{1, -1, 1.0}, {2, 0, 2.0}, {3, 0, 3.0}}), "c >= 0");
}

TEST(LatencyFit, ModelRoundTripsThroughJson) {
  const LatencyModel m = kit::terapipe::latency_model_from_json(kit::terapipe::to_json(kKnown));
  EXPECT_EQ(m.a, kKnown.a);
  EXPECT_EQ(m.b, kKnown.b);
  EXPECT_EQ(m.d, kKnown.d);
  expect_error([] { kit::terapipe::latency_model_from_json({{"a", 1.0}, {"b", 2.0}}); }, "\"d\"");
  expect_error([] { kit::terapipe::latency_model_from_json({{"a", 1.0}, {"b", "x"}, {"d", 3.0}}); }, "\"b\"");
  const auto j = kit::terapipe::to_json(std::vector<LatencySample>{{3, 5, 0.25}});
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0].at("l"), 3);
  EXPECT_EQ(j[0].at("c"), 5);
  EXPECT_EQ(j[0].at("seconds"), 0.25);
}

TEST(LatencyFit, GridHasPowersOfTwoAndTheirMidpoints) {
  EXPECT_EQ(kit::terapipe::latency_grid(16), (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16}));
  EXPECT_EQ(kit::terapipe::latency_grid(20), (std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 20}));
  EXPECT_EQ(kit::terapipe::latency_grid(1), (std::vector<int64_t>{1}));
  expect_error([] { kit::terapipe::latency_grid(0); }, "L >= 1");
}

// A 2 x 2 grid on both blocks of tiny GPT-2: four positive timings, lengths outer, contexts
// inner; pairs past n_positions (128) are skipped; the gradients are left zero.
TEST(ProfileLatency, TimesTheGridInOrder) {
  kit::GPT2 model = tiny_float32_model();
  const auto samples = kit::terapipe::profile_latency(*model, 0, 2, 1, {2, 8}, {0, 16}, 3);
  ASSERT_EQ(samples.size(), 4u);
  const std::vector<std::pair<int64_t, int64_t>> order{{2, 0}, {2, 16}, {8, 0}, {8, 16}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(samples[i].l, order[i].first) << i;
    EXPECT_EQ(samples[i].c, order[i].second) << i;
    EXPECT_GT(samples[i].seconds, 0) << i;
    EXPECT_TRUE(std::isfinite(samples[i].seconds)) << i;
  }
  for (const auto& p : model->parameters())
    if (p.grad().defined()) EXPECT_EQ(p.grad().abs().max().item<double>(), 0);

  const auto fits = kit::terapipe::profile_latency(*model, 1, 1, 2, {4, 100}, {0, 28, 30}, 1);
  ASSERT_EQ(fits.size(), 5u) << "(100, 30) is past n_positions = 128";
  EXPECT_EQ(fits.back().l, 100);
  EXPECT_EQ(fits.back().c, 28);
}

TEST(ProfileLatency, BadArgumentsAreErrors) {
  kit::GPT2 model = tiny_float32_model();
  auto profile = [&](int64_t first, int64_t num, int64_t batch, std::vector<int64_t> lengths, int repeats) {
    return [=, &model] { kit::terapipe::profile_latency(*model, first, num, batch, lengths, {0}, repeats); };
  };
  expect_error(profile(1, 2, 1, {4}, 1), "not inside the model's 2 blocks");
  expect_error(profile(-1, 1, 1, {4}, 1), "not inside the model's 2 blocks");
  expect_error(profile(0, 0, 1, {4}, 1), "not inside the model's 2 blocks");
  expect_error(profile(0, 1, 0, {4}, 1), "batch >= 1");
  expect_error(profile(0, 1, 1, {4}, 0), "repeats >= 1");
  expect_error(profile(0, 1, 1, {0}, 1), "slice lengths must be >= 1");
  expect_error(profile(0, 1, 1, {129}, 1), "n_positions = 128");
}

// A model fitted to real timings predicts a finite, positive latency where it was measured.
TEST(ProfileLatency, AFittedModelPredictsPositiveLatencies) {
  kit::GPT2 model = tiny_float32_model();
  const auto samples = kit::terapipe::profile_latency(*model, 0, 2, 1, {4, 16, 48}, {0, 32, 64}, 3);
  ASSERT_EQ(samples.size(), 9u);
  const LatencyModel m = kit::terapipe::fit_latency(samples);
  const auto e = kit::terapipe::fit_error(m, samples);
  EXPECT_TRUE(std::isfinite(e.rms_relative) && std::isfinite(e.max_relative)) << m.to_string();
  const double t = m(48, 64);
  EXPECT_TRUE(std::isfinite(t)) << m.to_string();
  EXPECT_GT(t, 0) << m.to_string();
}
