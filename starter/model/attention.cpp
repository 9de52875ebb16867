#include "model/attention.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "kit/compat.h"
#include "kit/errors.h"

namespace kit {

bool fused_attention_available() { return KIT_HAVE_SDPA; }

AttentionKernel default_attention_kernel(const c10::Device& device) {
  return device.is_cuda() && fused_attention_available() ? AttentionKernel::Fused : AttentionKernel::Manual;
}

namespace {

at::Tensor manual(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double p, bool training) {
  const int64_t T = q.size(-2), hs = q.size(-1);
  auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hs)));
  // Causal mask: future positions get -inf before the softmax.
  auto future = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
  att = att.masked_fill(future, -std::numeric_limits<float>::infinity());
  att = torch::dropout(torch::softmax(att, -1), p, training);
  return torch::matmul(att, v);
}

}  // namespace

at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                            bool training, AttentionKernel kernel) {
  if (kernel == AttentionKernel::Manual) return manual(q, k, v, dropout_p, training);
#if KIT_HAVE_SDPA
  // The default scale is 1/sqrt(head_size), as above; is_causal masks the future.
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, training ? dropout_p : 0.0,
                                          /*is_causal=*/true);
#else
  throw Error("the fused attention kernel needs LibTorch 2.0 or newer (this is " + std::to_string(TORCH_VERSION_MAJOR) +
              "." + std::to_string(TORCH_VERSION_MINOR) + "): use AttentionKernel::Manual");
#endif
}

}  // namespace kit
