// GPT-2 checkpoints as a dict from parameter name to tensor, in the file format of
// Python's torch.save, so Python reads them with torch.load and vice versa.
//
// Names are Hugging Face's (wte.weight, h.0.attn.c_attn.weight, ..., ln_f.bias) plus
// lm_head.weight, which is wte.weight again: the head is tied, as in Hugging Face's
// state_dict, and both keys share one storage in the file.
//
// Two layouts of the same names:
//   Kit          what export_checkpoint writes: every weight as torch::nn::Linear
//                stores it, (out, in).
//   HuggingFace  a GPT2Model / GPT2LMHeadModel state_dict: keys may start with
//                "transformer.", c_attn/c_proj/c_fc weights are Conv1D, (in, out), and
//                the attn.bias / attn.masked_bias buffers (causal masks) are ignored.
// Python's model.state_dict() is an OrderedDict, which LibTorch's reader cannot build;
// save a plain dict instead:  torch.save(dict(model.state_dict()), "gpt2.pt")
#pragma once
#include <ATen/core/Dict.h>
#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "kit/config.h"
#include "model/gpt2.h"

namespace kit {

enum class CheckpointLayout {
  Auto,         // HuggingFace when c_attn's weight is (C, 3C) or keys start with "transformer."
  Kit,          // (out, in) weights, no prefix
  HuggingFace,  // Conv1D (in, out) weights, optional "transformer." prefix, mask buffers
};

using TensorDict = c10::Dict<std::string, at::Tensor>;

// The names and shapes (Kit layout) a checkpoint of a model with this config holds,
// in the order export writes them; lm_head.weight comes last.
std::vector<std::pair<std::string, std::vector<int64_t>>> checkpoint_entries(const GPT2Config& cfg);

// The model's parameters under their checkpoint names, detached and on the CPU
// (views of the parameters when they live on the CPU, like PyTorch's state_dict).
TensorDict state_dict(const GPT2Impl& model);

// Copies a dict into the model. Every expected name must be present with the expected
// shape, no unknown name may be present, and lm_head.weight (when present) must equal
// wte.weight; otherwise kit::Error names the parameter and `source` (a file name), and
// the model is left untouched.
void load_state_dict(GPT2Impl& model, const TensorDict& dict,
                     CheckpointLayout layout = CheckpointLayout::Auto,
                     const std::string& source = "state dict");

// Write / read a name -> tensor dict in torch.save's zip format.
void save_tensor_dict(const TensorDict& dict, const std::string& path);
TensorDict load_tensor_dict(const std::string& path);  // kit::Error if missing or not a dict

void export_checkpoint(const GPT2Impl& model, const std::string& path);
void import_checkpoint(GPT2Impl& model, const std::string& path,
                       CheckpointLayout layout = CheckpointLayout::Auto);

}  // namespace kit
