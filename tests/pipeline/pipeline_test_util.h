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

#include "judge/judge.h"
#include "judge/tensor.h"
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

// What split_module returned, as data (the subject records it with record_partitions, the judge
// reads it with read_partitions): per partition its stage, its children's names, and which of
// the test's layers each child is (the layer's index in the test's list; -1 for none of them).
struct SplitResult {
  std::vector<std::string> stages;
  std::vector<std::vector<std::string>> names;
  std::vector<std::vector<int64_t>> layers;
  size_t size() const { return stages.size(); }
  // "stage: [layer names] | ..." for failure messages.
  std::string describe() const {
    std::string out;
    for (size_t j = 0; j < stages.size(); ++j) {
      out += (j ? " | " : "") + stages[j] + ": [";
      for (size_t k = 0; j < names.size() && k < names[j].size(); ++k) out += (k ? " " : "") + names[j][k];
      out += "]";
    }
    return out;
  }
  // Every layer in partition order (their indices in the test's list).
  std::vector<int64_t> layer_order() const {
    std::vector<int64_t> all;
    for (const auto& part : layers) all.insert(all.end(), part.begin(), part.end());
    return all;
  }
};

inline void record_partitions(judge::Record& out, const Partitions& p,
                              const std::vector<const torch::nn::Module*>& layers) {
  SplitResult r;
  for (size_t j = 0; j < p.size(); ++j) {
    r.stages.push_back(j < p.stages.size() ? to_string(p.stages[j]) : std::string("?"));
    r.names.push_back(p.partitions[j]->named_children().keys());
    std::vector<int64_t> which;
    for (size_t k = 0; k < p.partitions[j]->size(); ++k) {
      const torch::nn::Module* m = unwrapped(p.partitions[j]->ptr(k));
      int64_t at = -1;
      for (size_t i = 0; i < layers.size(); ++i)
        if (layers[i] == m) at = static_cast<int64_t>(i);
      which.push_back(at);
    }
    r.layers.push_back(which);
  }
  out.put("partition_count", static_cast<int64_t>(p.size()));
  out.put("stage_count", static_cast<int64_t>(p.stages.size()));
  out.put("stages", r.stages);
  out.put("names", r.names);
  out.put("layers", r.layers);
}

inline SplitResult read_partitions(const judge::Record& got) {
  SplitResult r;
  r.stages = got.get<std::vector<std::string>>("stages");
  r.names = got.get<std::vector<std::vector<std::string>>>("names");
  r.layers = got.get<std::vector<std::vector<int64_t>>>("layers");
  if (got.ok() && (r.names.size() != r.stages.size() || r.layers.size() != r.stages.size() ||
                   got.get<int64_t>("partition_count") != static_cast<int64_t>(r.stages.size()) ||
                   got.get<int64_t>("stage_count") != static_cast<int64_t>(r.stages.size())))
    ADD_FAILURE() << "split_module returned " << got.get<int64_t>("partition_count") << " partitions and "
                  << got.get<int64_t>("stage_count") << " stages: one stage per partition";
  return r;
}

}  // namespace kit::test
