// Causal attention over heads: softmax(q k^T / sqrt(hs), future masked) v, dropout on the weights.
//
// Two kernels compute it. The manual one writes the formula out (two matmuls and a T x T matrix
// per head): the reference, and LibTorch 1.13's only way. The fused one is LibTorch 2.0's
// scaled_dot_product_attention, whose flash and memory-efficient GPU kernels never hold the
// T x T matrix; the kit uses it on CUDA, where it is the speed of PyTorch's own GPT-2. On the
// CPU the manual kernel stays the default, so the CPU tests see the same arithmetic on every
// LibTorch. Both draw dropout with p on the weights and scale by 1/(1-p); they draw different
// random masks, so a run is reproducible with one kernel, not across the two.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace kit {

enum class AttentionKernel { Manual, Fused };

bool fused_attention_available();  // this LibTorch has scaled_dot_product_attention (2.0+)
// Fused on a CUDA device where available, Manual otherwise.
AttentionKernel default_attention_kernel(const c10::Device& device);

// q, k, v: (B, n_head, T, head_size). Returns (B, n_head, T, head_size). dropout_p applies when
// training. Asking for Fused where it is not available throws kit::Error.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                            bool training, AttentionKernel kernel);

}  // namespace kit
