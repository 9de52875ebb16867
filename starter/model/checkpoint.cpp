#include "model/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>

#include <fstream>
#include <iterator>
#include <map>

#include "kit/errors.h"

namespace kit {
namespace {

const std::string kHfPrefix = "transformer.";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

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

// Hugging Face's Conv1D layers store their weight as (in, out), the transpose of Linear.
bool is_conv1d_weight(const std::string& name) {
  return ends_with(name, "c_attn.weight") || ends_with(name, "c_proj.weight") ||
         ends_with(name, "c_fc.weight");
}

// h.N.attn.bias and h.N.attn.masked_bias: constant causal masks, not parameters.
bool is_hf_mask_buffer(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

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

// The dict renamed and transposed into the Kit layout.
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

const char* layout_name(CheckpointLayout layout) {
  switch (layout) {
    case CheckpointLayout::Kit: return "kit (Linear (out, in) weights)";
    case CheckpointLayout::HuggingFace: return "Hugging Face (Conv1D (in, out) weights)";
    default: return "auto";
  }
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

TensorDict state_dict(const GPT2Impl& model) {
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
  return dict;
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

// torch::pickle_save's format, but the dict goes in untagged: a typed dict is otherwise
// wrapped in torch.jit._pickle.restore_type_tag, which torch.load of PyTorch >= 2.6 refuses
// by default (weights_only=True). Untagged, it is the plain dict torch.save writes.
namespace {
std::vector<char> pickle_plain(const TensorDict& dict) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* b, size_t n) { pickle.insert(pickle.end(), b, b + n); }, nullptr,
                              nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::vector<char> bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* b, size_t n) {
    bytes.insert(bytes.end(), static_cast<const char*>(b), static_cast<const char*>(b) + n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  return bytes;
}
}  // namespace

void save_tensor_dict(const TensorDict& dict, const std::string& path) {
  const std::vector<char> bytes = pickle_plain(dict);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error("cannot write checkpoint '" + path + "': check that its folder exists and is writable");
}

TensorDict load_tensor_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open checkpoint '" + path + "': check the path (export one with export_checkpoint)");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    const std::string why = e.what_without_backtrace();
    if (why.find("GenericDict but got None") != std::string::npos)  // how the reader sees an OrderedDict
      throw Error("checkpoint '" + path + "' holds a Python OrderedDict (what model.state_dict() returns), which "
                  "LibTorch cannot read: save a plain dict in Python with torch.save(dict(model.state_dict()), p)");
    throw Error("checkpoint '" + path + "' is not a file written by torch.save: " + why +
                ". Files from before PyTorch 1.6 use an older format: re-save them in Python with "
                "torch.save(dict(torch.load(p)), p)");
  } catch (const std::exception& e) {
    throw Error("checkpoint '" + path + "' could not be read: " + e.what());
  }
  if (!value.isGenericDict())
    throw Error("checkpoint '" + path + "' holds a " + value.tagKind() +
                ", not a dict of named tensors: save it in Python with torch.save(dict(model.state_dict()), p)");
  TensorDict dict;
  for (const auto& e : value.toGenericDict()) {
    if (!e.key().isString() || !e.value().isTensor())
      throw Error("checkpoint '" + path + "' has an entry that is not name -> tensor (a " + e.key().tagKind() +
                  " -> " + e.value().tagKind() + "): save a dict of tensors, e.g. dict(model.state_dict())");
    dict.insert(e.key().toStringRef(), e.value().toTensor());
  }
  return dict;
}

void export_checkpoint(const GPT2Impl& model, const std::string& path) {
  save_tensor_dict(state_dict(model), path);
}

void import_checkpoint(GPT2Impl& model, const std::string& path, CheckpointLayout layout) {
  load_state_dict(model, load_tensor_dict(path), layout, path);
}

}  // namespace kit
