#include "pipeline/stage.h"

#include <torch/torch.h>

#include "kit/errors.h"

namespace kit {

std::string to_string(const StageDevice& s) {
  return "stage " + std::to_string(s.index) + " (" + s.device.str() + ")";
}

std::vector<StageDevice> cpu_stages(int64_t n) {
  if (n < 1) throw Error("a pipeline needs at least 1 stage (got " + std::to_string(n) + ")");
  std::vector<StageDevice> stages;
  for (int64_t j = 0; j < n; ++j) stages.push_back({j, torch::Device(torch::kCPU)});
  return stages;
}

std::vector<StageDevice> default_stages(int64_t n) {
  auto stages = cpu_stages(n);
  if (torch::cuda::is_available() && static_cast<int64_t>(torch::cuda::device_count()) >= n)
    for (auto& s : stages) s.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(s.index));
  return stages;
}

WithDeviceImpl::WithDeviceImpl(torch::nn::AnyModule module, StageDevice stage)
    : module_(std::move(module)), stage_(stage) {
  if (module_.is_empty()) throw Error("WithDevice needs a layer to wrap (got an empty module)");
  if (stage_.index < 0) throw Error("stage index must be >= 0 (got " + std::to_string(stage_.index) + ")");
  register_module("module", module_.ptr());
  module_.ptr()->to(stage_.device);
}

torch::Tensor WithDeviceImpl::forward(torch::Tensor x) { return module_.forward<torch::Tensor>(std::move(x)); }

StageDevice stage_of_parameters(const std::string& name, const torch::nn::Module& layer) {
  const auto params = layer.parameters();
  const std::string what = "layer '" + name + "' (" + layer.name() + ")";
  if (params.empty())
    throw Error(what + " has no parameters, so nothing says which stage it runs on: wrap it in "
                "WithDevice(layer, stage)");
  const torch::Device device = params.front().device();
  for (const auto& p : params)
    if (p.device() != device)
      throw Error(what + " has parameters on both " + device.str() + " and " + p.device().str() +
                  ": a layer must live on one device (move it with ->to(device), or split it into two layers)");
  if (!device.is_cuda() || !device.has_index())
    throw Error(what + " has its parameters on " + device.str() + ", which does not tell stages apart (every "
                "stage may be that device): wrap it in WithDevice(layer, stage) to say which stage it belongs to");
  return {device.index(), device};
}

}  // namespace kit
