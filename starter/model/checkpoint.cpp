#include "model/checkpoint.h"

#include <torch/torch.h>

#include <fstream>
#include <map>

#include "kit/errors.h"
#include "model/safetensors.h"

namespace kit {
namespace {

std::string shape_str(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Up to `limit` names, then "and N more".
std::string name_list(const std::vector<std::string>& names, size_t limit = 5) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > limit) s += " and " + std::to_string(names.size() - limit) + " more";
  return s;
}

}  // namespace

std::vector<std::pair<std::string, std::vector<int64_t>>> checkpoint_entries(const GPT2Config& cfg) {
  const int64_t C = cfg.n_embd;
  std::vector<std::pair<std::string, std::vector<int64_t>>> e = {
      {"wte.weight", {cfg.vocab_size, C}}, {"wpe.weight", {cfg.n_positions, C}}};
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    e.push_back({h + "ln_1.weight", {C}});
    e.push_back({h + "ln_1.bias", {C}});
    e.push_back({h + "attn.c_attn.weight", {3 * C, C}});
    e.push_back({h + "attn.c_attn.bias", {3 * C}});
    e.push_back({h + "attn.c_proj.weight", {C, C}});
    e.push_back({h + "attn.c_proj.bias", {C}});
    e.push_back({h + "ln_2.weight", {C}});
    e.push_back({h + "ln_2.bias", {C}});
    e.push_back({h + "mlp.c_fc.weight", {4 * C, C}});
    e.push_back({h + "mlp.c_fc.bias", {4 * C}});
    e.push_back({h + "mlp.c_proj.weight", {C, 4 * C}});
    e.push_back({h + "mlp.c_proj.bias", {C}});
  }
  e.push_back({"ln_f.weight", {C}});
  e.push_back({"ln_f.bias", {C}});
  e.push_back({"lm_head.weight", {cfg.vocab_size, C}});
  return e;
}

TensorDict state_dict(const GPT2Impl& model, CheckpointLayout layout) {
  auto params = model.named_parameters();
  TensorDict dict;
  for (const auto& entry : checkpoint_entries(model.config())) {
    const std::string& name = entry.first;
    // lm_head.weight is wte.weight: the same CPU tensor, so the file stores it once.
    if (name == "lm_head.weight") {
      dict.insert(name, dict.at("wte.weight"));
      continue;
    }
    const at::Tensor* p = params.find(name);
    if (!p) throw Error("the model has no parameter '" + name + "': model/gpt2.h and checkpoint_entries disagree");
    dict.insert(name, p->detach().to(torch::kCPU).contiguous());
  }
  return layout == CheckpointLayout::HuggingFace ? to_hugging_face_layout(dict) : dict;
}

void load_state_dict(GPT2Impl& model, const TensorDict& dict, CheckpointLayout layout,
                     const std::string& source) {
  const GPT2Config& cfg = model.config();
  if (layout == CheckpointLayout::Auto) layout = detect_layout(dict, cfg);
  auto tensors = to_kit_layout(dict, layout);
  const std::string where = "checkpoint '" + source + "' (read as " + layout_name(layout) + ")";
  const std::string hint =
      " It was saved from a model of another shape: build the model with the config it was trained with (preset '" +
      cfg.name + "' here: " + std::to_string(cfg.n_layer) + " layers, n_embd " + std::to_string(cfg.n_embd) +
      ", vocab " + std::to_string(cfg.vocab_size) + ", " + std::to_string(cfg.n_positions) + " positions)" +
      (layout == CheckpointLayout::Kit ? ", or import a Hugging Face file with CheckpointLayout::HuggingFace." : ".");

  // Check everything first, so that a bad file leaves the model as it was.
  auto entries = checkpoint_entries(cfg);
  std::vector<std::string> missing, unknown;
  for (const auto& e : entries) {
    auto it = tensors.find(e.first);
    if (it == tensors.end()) {
      if (e.first != "lm_head.weight") missing.push_back(e.first);  // optional: it is wte
      continue;
    }
    const at::Tensor& t = it->second;
    if (t.sizes().vec() != e.second)
      throw Error(where + ": parameter '" + e.first + "' has shape " + shape_str(t.sizes()) +
                  ", the model expects " + shape_str(e.second) + "." + hint);
    if (!t.is_floating_point())
      throw Error(where + ": parameter '" + e.first + "' has dtype " + std::string(c10::toString(t.scalar_type())) +
                  ", expected a floating-point tensor.");
  }
  if (!missing.empty())
    throw Error(where + " has no parameter " + name_list(missing) + " (" + std::to_string(missing.size()) + " of " +
                std::to_string(entries.size() - 1) + " missing)." + hint);
  for (const auto& t : tensors) {
    bool known = false;
    for (const auto& e : entries) known = known || e.first == t.first;
    if (!known) unknown.push_back(t.first);
  }
  if (!unknown.empty())
    throw Error(where + " holds parameters this model does not have: " + name_list(unknown) + "." + hint);
  auto head = tensors.find("lm_head.weight");
  if (head != tensors.end() && !torch::equal(head->second, tensors.at("wte.weight")))
    throw Error(where + ": lm_head.weight differs from wte.weight. The kit's GPT-2 ties the output head to the "
                "token embedding (as GPT-2 does); an untied head cannot be loaded.");

  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters()) p.value().copy_(tensors.at(p.key()));
}

TensorDict load_tensor_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open checkpoint '" + path + "': check the path (export one with export_checkpoint)");
  std::string head(9, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  if (head.compare(0, 4, "PK\x03\x04") == 0) return read_torch_save(path);  // a zip archive
  if (looks_like_safetensors(head)) return read_safetensors(path);
  throw Error("checkpoint '" + path + "' is neither a file torch.save wrote (a zip archive) nor safetensors: "
              "export one with export_checkpoint, or in Python with torch.save(model.state_dict(), p). Files "
              "from before PyTorch 1.6 use an older format: re-save them with torch.save(torch.load(p), p)");
}

void export_checkpoint(const GPT2Impl& model, const std::string& path, CheckpointLayout layout) {
  save_tensor_dict(state_dict(model, layout), path);
}

void import_checkpoint(GPT2Impl& model, const std::string& path, CheckpointLayout layout) {
  load_state_dict(model, load_tensor_dict(path), layout, path);
}

}  // namespace kit
