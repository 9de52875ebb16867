#include "train/adamw.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "kit/compat.h"
#include "kit/errors.h"
#include "kit/memory.h"

namespace kit {

void check_adamw_flags(double lr, double weight_decay) {
  if (!(lr > 0) || !std::isfinite(lr))
    throw Error("--lr must be a positive number (got " + std::to_string(lr) + "): AdamW's step size, e.g. 3e-4");
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay))
    throw Error("--weight-decay must be 0 or more (got " + std::to_string(weight_decay) +
                "): AdamW's decoupled decay, 0 for none, e.g. 0.1");
}

bool fused_adamw_available(const c10::Device& device) {
  if (device.is_cuda()) return KIT_HAVE_FUSED_ADAMW_CUDA;
  if (device.is_cpu()) return KIT_HAVE_FUSED_ADAMW_CPU;
  return false;
}

// On the CPU the _foreach ops run torch::optim::AdamW's own per-tensor ops, so ForEach is
// bitwise the reference there, and the CPU tests see the same numbers on every LibTorch.
AdamWKernel default_adamw_kernel(const c10::Device& device) {
  return device.is_cuda() && fused_adamw_available(device) ? AdamWKernel::Fused : AdamWKernel::ForEach;
}

AdamW::AdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions options, std::optional<AdamWKernel> kernel)
    : torch::optim::AdamW(params, options) {
  const c10::Device device = params.empty() ? c10::Device(c10::kCPU) : params.front().device();
  kernel_ = kernel.value_or(default_adamw_kernel(device));
  if (kernel_ == AdamWKernel::Fused && !fused_adamw_available(device))
    throw Error("AdamWKernel::Fused: LibTorch " + std::string(TORCH_VERSION) + " has no fused AdamW kernel for " +
                device.str() + " (CUDA needs 2.1+, the CPU 2.4+): use AdamWKernel::ForEach");
}

namespace {

// One step count's tensors of a group.
struct Tensors {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
};

void update(Tensors& b, int64_t step, const torch::optim::AdamWOptions& o, AdamWKernel kernel) {
  const double lr = o.lr(), wd = o.weight_decay(), eps = o.eps();
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
#if KIT_HAVE_FUSED_ADAMW_CUDA
  if (kernel == AdamWKernel::Fused) {
    // The kernel reads each parameter's step count from a tensor: one holds the bucket's.
    const torch::Tensor count =
        torch::full({}, static_cast<double>(step), torch::TensorOptions().dtype(torch::kFloat32).device(b.params[0].device()));
    const std::vector<torch::Tensor> counts(b.params.size(), count);
    at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, counts, lr, beta1, beta2,
                      wd, eps, /*amsgrad=*/false, /*maximize=*/false);
    return;
  }
#endif
  // torch::optim::AdamW's arithmetic, op for op, on all the tensors at once.
  const double bias1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias2 = 1 - std::pow(beta2, static_cast<double>(step));
  if (wd != 0) at::_foreach_mul_(b.params, 1 - lr * wd);  // decoupled weight decay
  at::_foreach_mul_(b.exp_avgs, beta1);
  at::_foreach_add_(b.exp_avgs, b.grads, 1 - beta1);
  at::_foreach_mul_(b.exp_avg_sqs, beta2);
  at::_foreach_addcmul_(b.exp_avg_sqs, b.grads, b.grads, 1 - beta2);
  std::vector<torch::Tensor> denom = at::_foreach_sqrt(b.exp_avg_sqs);
  at::_foreach_div_(denom, std::sqrt(bias2));
  at::_foreach_add_(denom, eps);
  at::_foreach_addcdiv_(b.params, b.exp_avgs, denom, -lr / bias1);
}

}  // namespace

torch::Tensor AdamW::step(LossClosure closure) {
  if (kernel_ == AdamWKernel::Loop) return torch::optim::AdamW::step(std::move(closure));
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    if (o.amsgrad()) throw Error("kit::AdamW does not implement amsgrad: use torch::optim::AdamW");
    // The parameters that have a gradient, with their state (made as torch::optim::AdamW makes
    // it), by step count, device and type: usually one bucket, but a parameter that once had no
    // gradient has taken fewer steps (its bias correction differs), model parallelism spreads a
    // group over devices, and one multi-tensor kernel takes one device and one type.
    std::map<std::tuple<int64_t, std::string, int>, Tensors> buckets;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (p.grad().is_sparse()) throw Error("kit::AdamW: sparse gradients are not supported");
      auto key = compat::optimizer_state_key(state(), p.unsafeGetTensorImpl());
      auto it = state().find(key);
      if (it == state().end()) {
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        it = state().emplace(key, std::move(s)).first;
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      s.step(s.step() + 1);
      Tensors& b = buckets[{s.step(), p.device().str(), static_cast<int>(p.scalar_type())}];
      b.params.push_back(p);
      b.grads.push_back(p.grad());
      b.exp_avgs.push_back(s.exp_avg());
      b.exp_avg_sqs.push_back(s.exp_avg_sq());
    }
    for (auto& [key, b] : buckets) update(b, std::get<0>(key), o, kernel_);
  }
  return loss;
}

int64_t adamw_state_bytes(torch::optim::AdamW& optimizer) {
  int64_t n = 0;
  for (const auto& kv : optimizer.state()) {
    const auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(kv.second.get());
    if (s) n += memory::bytes_of(s->exp_avg()) + memory::bytes_of(s->exp_avg_sq()) + memory::bytes_of(s->max_exp_avg_sq());
  }
  return n;
}

}  // namespace kit
