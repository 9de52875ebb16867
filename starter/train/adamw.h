// AdamW (Loshchilov & Hutter) as torch::optim::AdamW computes it, with the update done for all
// of a group's parameters at once. torch::optim::AdamW updates one parameter at a time: eight
// small kernels each, about a thousand launches per GPT-2 step, which on a GPU cost more than
// the arithmetic. kit::AdamW keeps torch::optim::AdamW's options, state and checkpoints (it is
// one) and replaces only step():
//   Fused    at::_fused_adamw_, one kernel per group (LibTorch 2.1+ on CUDA, 2.4+ on the CPU);
//   ForEach  the _foreach_ ops, a few multi-tensor kernels per group (every LibTorch);
//   Loop     torch::optim::AdamW's own step, parameter by parameter (the reference).
// The default: Fused on a GPU where available, ForEach otherwise (on the CPU bitwise Loop).
#pragma once
#include <torch/optim/adamw.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace kit {

enum class AdamWKernel { Loop, ForEach, Fused };

// kit::Error naming the flag when --lr is not a positive finite number or --weight-decay is
// negative or not finite: what every program checks before it builds an optimizer (LibTorch's
// own check would end the program with its stack trace).
void check_adamw_flags(double lr, double weight_decay);

// Fused on CUDA where this LibTorch has it, ForEach otherwise.
AdamWKernel default_adamw_kernel(const c10::Device& device);
bool fused_adamw_available(const c10::Device& device);

class AdamW : public torch::optim::AdamW {
 public:
  // kernel: as default_adamw_kernel(the first parameter's device) when not given. Fused where the
  // device has no fused kernel throws kit::Error.
  AdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions options,
        std::optional<AdamWKernel> kernel = std::nullopt);

  torch::Tensor step(LossClosure closure = nullptr) override;
  AdamWKernel kernel() const { return kernel_; }

 private:
  AdamWKernel kernel_;
};

// The bytes of the AdamW state tensors `optimizer` holds (exp_avg, exp_avg_sq, and
// max_exp_avg_sq with amsgrad): after the first step, its optimizer state.
int64_t adamw_state_bytes(torch::optim::AdamW& optimizer);

}  // namespace kit
