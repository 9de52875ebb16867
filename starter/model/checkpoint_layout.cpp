#include "model/checkpoint_layout.h"

#include <vector>

namespace kit {
namespace {

const std::string kHfPrefix = "transformer.";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Hugging Face's Conv1D layers store their weight as (in, out), the transpose of Linear.
bool is_conv1d_weight(const std::string& name) {
  return ends_with(name, "c_attn.weight") || ends_with(name, "c_proj.weight") ||
         ends_with(name, "c_fc.weight");
}

// h.N.attn.bias and h.N.attn.masked_bias: constant causal masks, not parameters.
bool is_hf_mask_buffer(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

}  // namespace

CheckpointLayout detect_layout(const TensorDict& dict, const GPT2Config& cfg) {
  for (const std::string& prefix : {std::string(), kHfPrefix}) {
    auto it = dict.find(prefix + "h.0.attn.c_attn.weight");
    if (it == dict.end()) continue;
    auto shape = it->value().sizes().vec();
    if (shape == std::vector<int64_t>{cfg.n_embd, 3 * cfg.n_embd}) return CheckpointLayout::HuggingFace;
    if (shape == std::vector<int64_t>{3 * cfg.n_embd, cfg.n_embd}) return CheckpointLayout::Kit;
  }
  for (const auto& e : dict)
    if (starts_with(e.key(), kHfPrefix)) return CheckpointLayout::HuggingFace;
  return CheckpointLayout::Kit;
}

std::map<std::string, at::Tensor> to_kit_layout(const TensorDict& dict, CheckpointLayout layout) {
  std::map<std::string, at::Tensor> out;
  for (const auto& e : dict) {
    std::string name = e.key();
    at::Tensor t = e.value();
    if (layout == CheckpointLayout::HuggingFace) {
      if (starts_with(name, kHfPrefix)) name = name.substr(kHfPrefix.size());
      if (is_hf_mask_buffer(name)) continue;
      if (is_conv1d_weight(name) && t.dim() == 2) t = t.t();
    }
    out[name] = t;
  }
  return out;
}

TensorDict to_hugging_face_layout(const TensorDict& kit_dict) {
  TensorDict out;
  for (const auto& e : kit_dict) {
    const std::string& name = e.key();
    at::Tensor t = e.value();
    if (is_conv1d_weight(name) && t.dim() == 2) t = t.t().contiguous();
    out.insert(name == "lm_head.weight" ? name : kHfPrefix + name, t);
  }
  return out;
}

const char* layout_name(CheckpointLayout layout) {
  switch (layout) {
    case CheckpointLayout::Kit: return "kit (Linear (out, in) weights)";
    case CheckpointLayout::HuggingFace: return "Hugging Face (Conv1D (in, out) weights)";
    default: return "auto";
  }
}

}  // namespace kit
