// Pipeline stages and how a layer is placed on one.
//
// The original (torchgpipe, llmsys hw4) reads a layer's place off its parameters'
// device: cuda:0 is one stage, cuda:1 the next. On a laptop every stage is the CPU,
// so a device cannot tell stages apart. Here a stage has an identity of its own:
//
//   StageDevice{index, device}    stage 0 on cpu, stage 1 on cpu  (two worker threads)
//                                 stage 0 on cuda:0, stage 1 on cuda:1 (two GPUs)
//
// and the same code pipelines over n threads on a laptop and over n GPUs on a cluster.
// A layer says which stage it belongs to by being wrapped in WithDevice (the original's
// name): WithDevice(layer, stage) moves the layer onto stage.device and remembers the stage.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kit {

struct StageDevice {
  int64_t index = 0;                   // which stage: one worker thread per distinct index
  torch::Device device = torch::kCPU;  // where that stage's layers and activations live

  bool operator==(const StageDevice& o) const { return index == o.index && device == o.device; }
  bool operator!=(const StageDevice& o) const { return !(*this == o); }
};
std::string to_string(const StageDevice& s);  // "stage 1 (cpu)"

// n stages 0..n-1, all on the CPU: n worker threads on one machine. Throws kit::Error for n < 1.
std::vector<StageDevice> cpu_stages(int64_t n);

// n stages on cuda:0..cuda:n-1 when LibTorch sees at least n GPUs, else on the CPU.
std::vector<StageDevice> default_stages(int64_t n);

// Pins a layer to a stage (the original's WithDevice). forward() is the layer's forward.
// The layer is moved to stage.device on construction. It needs a forward(Tensor) -> Tensor,
// like every layer of a torch::nn::Sequential.
class WithDeviceImpl : public torch::nn::Module {
 public:
  WithDeviceImpl(torch::nn::AnyModule module, StageDevice stage);
  template <typename M>  // any module holder (Linear, Block, ...) or shared_ptr to one
  WithDeviceImpl(M&& module, StageDevice stage)
      : WithDeviceImpl(torch::nn::AnyModule(std::forward<M>(module)), stage) {}

  torch::Tensor forward(torch::Tensor x);

  const torch::nn::AnyModule& module() const { return module_; }  // the wrapped layer
  const StageDevice& stage() const { return stage_; }

 private:
  torch::nn::AnyModule module_;
  StageDevice stage_;
};
TORCH_MODULE(WithDevice);

// The stage a layer that is NOT wrapped in WithDevice belongs to, read off its parameters
// like the original's _retrieve_device: parameters all on cuda:k give stage k. Everywhere
// else the layer's stage cannot be known, and this throws a kit::Error saying to wrap the
// layer in WithDevice: a layer without parameters, a layer on the CPU (where every stage
// is the same device), a layer whose parameters are spread over several devices.
// `name` is the layer's name in its container, for the message.
StageDevice stage_of_parameters(const std::string& name, const torch::nn::Module& layer);

}  // namespace kit
