// Problem 7 (given): TeraPipe's latency model t(l, c) = a + b*l + d*l*(c+l), measured and
// fitted. See terapipe/latency.h.
#include "terapipe/latency.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <fstream>
#include <sstream>

#include "kit/errors.h"
#include "model/gpt2.h"
#include "terapipe/sliced_attention.h"

namespace kit::terapipe {
namespace {

std::string pair(int64_t l, int64_t c) { return "(l=" + std::to_string(l) + ", c=" + std::to_string(c) + ")"; }

void check_samples(const std::vector<LatencySample>& samples, size_t at_least) {
  if (samples.size() < at_least)
    throw Error("the latency fit has " + std::to_string(samples.size()) + " samples but needs at least " +
                std::to_string(at_least) + ": profile more (l, c) pairs");
  for (const auto& s : samples) {
    if (s.l < 1 || s.c < 0)
      throw Error("the latency sample " + pair(s.l, s.c) + " has no tokens or a negative context: l >= 1, c >= 0");
    if (!std::isfinite(s.seconds) || s.seconds <= 0)
      throw Error("the latency sample " + pair(s.l, s.c) + " took " + std::to_string(s.seconds) +
                  " seconds: a measured time must be finite and positive");
  }
}

std::array<double, 3> features(int64_t l, int64_t c) {
  return {1.0, static_cast<double>(l), static_cast<double>(l) * static_cast<double>(c + l)};
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();  // kernels run asynchronously
}

}  // namespace

double LatencyModel::operator()(int64_t l, int64_t c) const {
  const auto f = features(l, c);
  return a * f[0] + b * f[1] + d * f[2];
}

Latency LatencyModel::latency() const {
  return [m = *this](int64_t l, int64_t c) { return m(l, c); };
}

std::string LatencyModel::to_string() const {
  std::ostringstream out;
  out.precision(3);
  out << "t(l, c) = " << a << " + " << b << " * l + " << d << " * l * (c + l) seconds";
  return out.str();
}

LatencyModel fit_latency(const std::vector<LatencySample>& samples) {
  check_samples(samples, 3);
  // l * (c + l) runs to ~1e6 while 1 stays 1: scale each feature to at most 1, so that the
  // normal equations' pivots compare like with like and a tiny pivot means "undetermined".
  std::array<double, 3> scale{0, 0, 0};
  for (const auto& s : samples) {
    const auto f = features(s.l, s.c);
    for (int j = 0; j < 3; ++j) scale[j] = std::max(scale[j], std::abs(f[j]));
  }
  // The normal equations (X^T X) beta = X^T y, with the right-hand side as a fourth column.
  double m[3][4] = {};
  for (const auto& s : samples) {
    auto f = features(s.l, s.c);
    for (int j = 0; j < 3; ++j) f[j] /= scale[j];
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 3; ++k) m[j][k] += f[j] * f[k];
      m[j][3] += f[j] * s.seconds;
    }
  }
  // Gaussian elimination with partial pivoting; the diagonal is at most n after scaling.
  const double tiny = 1e-10 * static_cast<double>(samples.size());
  for (int col = 0; col < 3; ++col) {
    int best = col;
    for (int r = col + 1; r < 3; ++r)
      if (std::abs(m[r][col]) > std::abs(m[best][col])) best = r;
    if (std::abs(m[best][col]) < tiny)
      throw Error("the latency samples cannot tell the fixed, per-token and attention costs apart: profile more "
                  "than one slice length l and more than one context c (e.g. lengths and contexts from latency_grid)");
    std::swap(m[col], m[best]);
    for (int r = 0; r < 3; ++r) {
      if (r == col) continue;
      const double factor = m[r][col] / m[col][col];
      for (int k = col; k < 4; ++k) m[r][k] -= factor * m[col][k];
    }
  }
  return {m[0][3] / m[0][0] / scale[0], m[1][3] / m[1][1] / scale[1], m[2][3] / m[2][2] / scale[2]};
}

FitError fit_error(const LatencyModel& model, const std::vector<LatencySample>& samples) {
  check_samples(samples, 1);
  FitError e;
  for (const auto& s : samples) {
    const double r = (model(s.l, s.c) - s.seconds) / s.seconds;
    e.rms_relative += r * r;
    e.max_relative = std::max(e.max_relative, std::abs(r));
  }
  e.rms_relative = std::sqrt(e.rms_relative / static_cast<double>(samples.size()));
  return e;
}

std::vector<LatencySample> profile_latency(GPT2Impl& model, int64_t first_block, int64_t num_blocks, int64_t batch,
                                           const std::vector<int64_t>& lengths, const std::vector<int64_t>& contexts,
                                           int repeats) {
  const GPT2Config& cfg = model.config();
  const auto blocks = static_cast<int64_t>(model.h->size());
  if (first_block < 0 || num_blocks < 1 || first_block + num_blocks > blocks)
    throw Error("the stage's blocks [" + std::to_string(first_block) + ", " + std::to_string(first_block + num_blocks) +
                ") are not inside the model's " + std::to_string(blocks) + " blocks: pick a range within 0.." +
                std::to_string(blocks));
  if (batch < 1 || repeats < 1)
    throw Error("profiling the latency needs batch >= 1 and repeats >= 1, got batch " + std::to_string(batch) +
                " and repeats " + std::to_string(repeats));
  std::vector<std::pair<int64_t, int64_t>> grid;
  for (const int64_t l : lengths)
    for (const int64_t c : contexts) {
      if (l < 1 || c < 0) throw Error("cannot profile " + pair(l, c) + ": slice lengths must be >= 1, contexts >= 0");
      if (l + c <= cfg.n_positions) grid.emplace_back(l, c);
    }
  if (grid.empty())
    throw Error("no (l, c) pair to profile has l + c <= n_positions = " + std::to_string(cfg.n_positions) +
                ": pass shorter lengths or contexts");

  const torch::Tensor p = model.parameters().front();
  const auto opts = torch::TensorOptions().dtype(p.dtype()).device(p.device());
  const int64_t hs = cfg.n_embd / cfg.n_head;
  torch::AutoGradMode grad_on(true);
  // One forward + backward of the stage; the random inputs are made before the clock starts.
  auto time_once = [&](int64_t l, int64_t c) {
    std::vector<KVCache> caches(static_cast<size_t>(num_blocks));
    if (c > 0)
      for (auto& cache : caches) {
        cache.k = torch::randn({batch, cfg.n_head, c, hs}, opts).requires_grad_();
        cache.v = torch::randn({batch, cfg.n_head, c, hs}, opts).requires_grad_();
      }
    const torch::Tensor x = torch::randn({batch, l, cfg.n_embd}, opts).requires_grad_();
    const torch::Tensor grad = torch::randn({batch, l, cfg.n_embd}, opts);
    synchronize(p.device());
    const auto start = std::chrono::steady_clock::now();
    torch::Tensor y = x;
    for (int64_t b = 0; b < num_blocks; ++b)
      y = sliced_block(*model.h[static_cast<size_t>(first_block + b)]->as<BlockImpl>(), y, caches[static_cast<size_t>(b)]);
    y.backward(grad);
    synchronize(p.device());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  std::vector<LatencySample> samples;
  for (const auto& [l, c] : grid) {
    time_once(l, c);  // warm-up: allocator, kernel selection, first gradient buffers
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) times.push_back(time_once(l, c));
    std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
    samples.push_back({l, c, times[static_cast<size_t>(repeats / 2)]});
  }
  model.zero_grad();
  return samples;
}

std::vector<int64_t> latency_grid(int64_t L) {
  if (L < 1) throw Error("latency_grid needs L >= 1, got " + std::to_string(L));
  std::vector<int64_t> grid;
  for (int64_t p = 1; p <= L; p *= 2) {
    grid.push_back(p);
    if (p >= 2 && p + p / 2 <= L) grid.push_back(p + p / 2);
  }
  if (grid.back() != L) grid.push_back(L);
  return grid;
}

nlohmann::json to_json(const LatencyModel& model) { return {{"a", model.a}, {"b", model.b}, {"d", model.d}}; }

LatencyModel latency_model_from_json(const nlohmann::json& j) {
  auto coefficient = [&](const char* key) {
    if (!j.is_object() || !j.contains(key) || !j.at(key).is_number())
      throw Error(std::string("the latency model's JSON has no number \"") + key +
                  "\": write it with to_json(LatencyModel), {\"a\": .., \"b\": .., \"d\": ..}");
    return j.at(key).get<double>();
  };
  return {coefficient("a"), coefficient("b"), coefficient("d")};
}

nlohmann::json to_json(const std::vector<LatencySample>& samples) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& s : samples) list.push_back({{"l", s.l}, {"c", s.c}, {"seconds", s.seconds}});
  return list;
}

LatencyModel read_latency_model(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) throw Error(flag + " " + path + " cannot be read: write it first with --profile " + path);
  try {
    return latency_model_from_json(nlohmann::json::parse(in).at("model"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(flag + " " + path + " is not a --profile file: " + e.what());
  }
}

StageProfile profile_stage(GPT2Impl& model, int64_t num_blocks, int64_t rows, int64_t L, int repeats) {
  std::vector<int64_t> contexts{0};
  if (L > 1)
    for (const int64_t c : latency_grid(L - 1)) contexts.push_back(c);
  StageProfile p;
  p.samples = profile_latency(model, 0, num_blocks, rows, latency_grid(L), contexts, repeats);
  p.fit = fit_latency(p.samples);
  p.error = fit_error(p.fit, p.samples);
  return p;
}

nlohmann::json latency_file_json(const StageProfile& profile, nlohmann::json about) {
  about["model"] = to_json(profile.fit);
  about["fit_error"] = {{"rms_relative", profile.error.rms_relative}, {"max_relative", profile.error.max_relative}};
  about["samples"] = to_json(profile.samples);
  return about;
}

}  // namespace kit::terapipe
