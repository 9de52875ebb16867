// Problem 5.5: ZeRO stage 3 / FSDP (see fsdp.h): gathering a unit, reduce-scattering its
// gradients, where the forward gathers and frees, and the shard's AdamW step.
#include <torch/torch.h>

#include "kit/errors.h"
#include "zero/fsdp.h"

namespace kit::zero {

void Fsdp::gather(FsdpUnit& u) {
  // TODO(Problem 5.5 Fsdp::gather): your code here.
  throw kit::NotImplemented("Problem 5.5 Fsdp::gather");
}

torch::Tensor Fsdp::reduce_scatter(FsdpUnit& u, const torch::Tensor& grad) {
  // TODO(Problem 5.5 Fsdp::reduce_scatter): your code here.
  throw kit::NotImplemented("Problem 5.5 Fsdp::reduce_scatter");
}

torch::Tensor Fsdp::forward_units(const torch::Tensor& idx) {
  // TODO(Problem 5.5 Fsdp::forward_units): your code here.
  throw kit::NotImplemented("Problem 5.5 Fsdp::forward_units");
}

void Fsdp::step() {
  // TODO(Problem 5.5 Fsdp::step): your code here.
  throw kit::NotImplemented("Problem 5.5 Fsdp::step");
}

}  // namespace kit::zero
