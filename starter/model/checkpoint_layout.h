// The two layouts a GPT-2 checkpoint comes in, and the mapping between them. Both use
// Hugging Face's parameter names (wte.weight, h.0.attn.c_attn.weight, ..., ln_f.bias,
// lm_head.weight):
//   Kit          what export_checkpoint writes by default: every weight as
//                torch::nn::Linear stores it, (out, in); no prefix.
//   HuggingFace  a GPT2Model / GPT2LMHeadModel state_dict: keys may start with
//                "transformer." (lm_head.weight never does), c_attn/c_proj/c_fc weights
//                are Conv1D, (in, out), and files may hold the attn.bias /
//                attn.masked_bias buffers (causal masks), which carry no parameters.
#pragma once
#include <ATen/core/Dict.h>
#include <torch/types.h>

#include <map>
#include <string>

#include "kit/config.h"

namespace kit {

enum class CheckpointLayout {
  Auto,         // reading: HuggingFace when c_attn's weight is (C, 3C) or keys start with "transformer."
  Kit,          // (out, in) weights, no prefix
  HuggingFace,  // Conv1D (in, out) weights, "transformer." prefix, mask buffers (ignored on reading)
};

using TensorDict = c10::Dict<std::string, at::Tensor>;

// Which layout `dict` is in, judged by c_attn's shape for a model with this config, then
// by the "transformer." prefix; Kit when nothing tells.
CheckpointLayout detect_layout(const TensorDict& dict, const GPT2Config& cfg);

// `dict` (in `layout`, not Auto) renamed and transposed into the Kit layout; mask buffers
// are dropped. Tensors that need no change are the same tensors, not copies.
std::map<std::string, at::Tensor> to_kit_layout(const TensorDict& dict, CheckpointLayout layout);

// A Kit-layout dict in the layout GPT2LMHeadModel.state_dict() has (transformers 4.31
// and later, whose mask buffers are not saved): "transformer." before every name but
// lm_head.weight, Conv1D weights transposed (and contiguous). Order is kept, and
// lm_head.weight stays the very tensor wte.weight is, so a file stores it once.
TensorDict to_hugging_face_layout(const TensorDict& kit_dict);

// For messages: "kit (Linear (out, in) weights)", ...
const char* layout_name(CheckpointLayout layout);

}  // namespace kit
