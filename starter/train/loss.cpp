#include "train/loss.h"

#include <torch/torch.h>

#include "kit/precision.h"

namespace kit {

torch::Tensor masked_cross_entropy(const torch::Tensor& low_logits, const torch::Tensor& labels,
                                   const torch::Tensor& mask) {
  const torch::Tensor logits = full_precision(low_logits);
  const auto V = logits.size(-1);
  auto token_loss = torch::nn::functional::cross_entropy(
      logits.reshape({-1, V}), labels.reshape({-1}).to(logits.device()),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  auto m = mask.to(logits.device(), torch::kFloat32);
  token_loss = token_loss.view(labels.sizes()) * m;
  // clamp: an example whose target was truncated away contributes 0, not NaN.
  auto per_example = token_loss.sum(1) / m.sum(1).clamp_min(1.0);
  return per_example.mean();
}

}  // namespace kit
