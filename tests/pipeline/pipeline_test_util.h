// Helpers for the pipeline tests: small layers, comparisons whose failure messages say
// what differed, and a guard that turns a hang into a failure.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "run_with_timeout.h"
#include "pipeline/partition.h"
#include "pipeline/stage.h"

namespace kit::test {

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.detach().cpu().to(torch::kFloat64) - b.detach().cpu().to(torch::kFloat64)).abs().max().item<double>();
}

// The layer a partition holds, seen through a WithDevice wrapper if it kept one.
inline const torch::nn::Module* unwrapped(const std::shared_ptr<torch::nn::Module>& layer) {
  if (const auto* pinned = layer->as<WithDeviceImpl>()) return pinned->module().ptr().get();
  return layer.get();
}

using kit_test::run_with_timeout;  // tests/run_with_timeout.h

// y = x * scale + shift, parameter-free; it remembers nothing. Distinct constants per
// layer make the composition order visible in the output.
class AffineImpl : public torch::nn::Module {
 public:
  AffineImpl(double scale, double shift) : scale_(scale), shift_(shift) {}
  torch::Tensor forward(torch::Tensor x) { return x * scale_ + shift_; }

 private:
  double scale_, shift_;
};
TORCH_MODULE(Affine);

// Calls a function on every forward (to observe threads, timing, grad mode), then
// returns its input unchanged.
class ProbeImpl : public torch::nn::Module {
 public:
  explicit ProbeImpl(std::function<void(const torch::Tensor&)> fn) : fn_(std::move(fn)) {}
  torch::Tensor forward(torch::Tensor x) {
    fn_(x);
    return x;
  }

 private:
  std::function<void(const torch::Tensor&)> fn_;
};
TORCH_MODULE(Probe);

// A stage on the CPU (the split_module tests pin layers with these).
inline StageDevice stage(int64_t j) { return {j, torch::Device(torch::kCPU)}; }

// "stage: [layer names] | ..." for failure messages.
inline std::string describe(const Partitions& p) {
  std::string out;
  for (size_t j = 0; j < p.size(); ++j) {
    out += (j ? " | " : "") + (j < p.stages.size() ? to_string(p.stages[j]) : std::string("?")) + ": [";
    for (size_t k = 0; k < p.partitions[j]->size(); ++k)
      out += (k ? " " : "") + p.partitions[j]->named_children().keys()[k];
    out += "]";
  }
  return out;
}

}  // namespace kit::test
