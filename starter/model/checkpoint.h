// GPT-2 checkpoints as a dict from parameter name to tensor. Files are written in the
// format of Python's torch.save, so Python reads them with torch.load; they are read from
// that format (a dict or model.state_dict()'s OrderedDict) or from Hugging Face's
// safetensors.
//
// Names are Hugging Face's (wte.weight, h.0.attn.c_attn.weight, ..., ln_f.bias) plus
// lm_head.weight, which is wte.weight again: the head is tied, as in Hugging Face's
// state_dict, and both keys share one storage in the file. The two layouts of these names
// (the kit's Linear weights, Hugging Face's Conv1D ones) are in model/checkpoint_layout.h;
// build/convert_checkpoint converts files between them.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "kit/config.h"
#include "model/checkpoint_layout.h"
#include "model/gpt2.h"
#include "model/torch_save.h"

namespace kit {

// The names and shapes (Kit layout) a checkpoint of a model with this config holds,
// in the order export writes them; lm_head.weight comes last.
std::vector<std::pair<std::string, std::vector<int64_t>>> checkpoint_entries(const GPT2Config& cfg);

// The model's parameters under their checkpoint names, detached and on the CPU
// (views of the parameters when they live on the CPU, like PyTorch's state_dict), in
// `layout` (Kit, or HuggingFace for to_hugging_face_layout's names and shapes).
TensorDict state_dict(const GPT2Impl& model, CheckpointLayout layout = CheckpointLayout::Kit);

// Copies a dict into the model. Every expected name must be present with the expected
// shape, no unknown name may be present, and lm_head.weight (when present) must equal
// wte.weight; otherwise kit::Error names the parameter and `source` (a file name), and
// the model is left untouched.
void load_state_dict(GPT2Impl& model, const TensorDict& dict,
                     CheckpointLayout layout = CheckpointLayout::Auto,
                     const std::string& source = "state dict");

// Reads a checkpoint file: torch.save's format (model/torch_save.h) or safetensors
// (model/safetensors.h), told apart by their first bytes. kit::Error naming the file and
// the fix when it is missing or neither.
TensorDict load_tensor_dict(const std::string& path);

// Writes the model's parameters in torch.save's format: the Kit layout, or with
// CheckpointLayout::HuggingFace a state dict GPT2LMHeadModel.load_state_dict accepts.
void export_checkpoint(const GPT2Impl& model, const std::string& path,
                       CheckpointLayout layout = CheckpointLayout::Kit);
void import_checkpoint(GPT2Impl& model, const std::string& path,
                       CheckpointLayout layout = CheckpointLayout::Auto);

}  // namespace kit
