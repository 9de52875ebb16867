// One all-reduce of every gradient packed together (see data_parallel/flat_average.h).
#include "data_parallel/flat_average.h"

#include <torch/torch.h>

namespace kit {

void average_gradients_flat(const std::vector<torch::Tensor>& params, const dist::Group& group) {
  if (group.size() == 1) return;  // the average of one
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  for (torch::Tensor p : params) {  // a handle: its gradient is the parameter's
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    flat.push_back(p.grad().reshape({-1}));
  }
  torch::Tensor buffer = torch::cat(flat);
  dist::all_reduce(buffer, dist::ReduceOp::SUM, group);
  buffer.div_(static_cast<double>(group.size()));
  int64_t at = 0;
  for (const auto& p : params) {
    p.grad().copy_(buffer.narrow(0, at, p.numel()).view_as(p));
    at += p.numel();
  }
}

}  // namespace kit
