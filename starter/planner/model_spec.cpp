// Problem 8 (given): see planner/model_spec.h.
#include "planner/model_spec.h"

#include <nlohmann/json.hpp>

#include "kit/errors.h"
#include "planner/json_fields.h"

namespace kit::planner {

using nlohmann::json;

namespace {
constexpr const char* kModelSpecFormat = "starter/planner/model_spec.h";
constexpr double kFloat = 4;  // bytes per fp32 element
}  // namespace

double ModelSpec::param_bytes(int64_t first, int64_t last) const {
  double b = 0;
  for (int64_t i = first; i < last; ++i) b += layers.at(static_cast<size_t>(i)).param_bytes;
  return b;
}

ModelSpec gpt2_model(const GPT2Config& c, int64_t s) {
  const double h = static_cast<double>(c.n_embd), v = static_cast<double>(c.vocab_size);
  const double a = static_cast<double>(c.n_head), seq = static_cast<double>(s);
  ModelSpec m;
  m.name = "GPT-2 " + std::to_string(c.n_layer) + " layers, " + std::to_string(c.n_embd) + " wide";
  m.heads = c.n_head;
  m.embedding_and_head = true;
  // Embedding: a lookup (no GEMM); vocab-parallel, so one all-reduce of its output forward.
  m.layers.push_back({"embedding", 0, (v + static_cast<double>(c.n_positions)) * h * kFloat, h * kFloat,
                      h * kFloat, 1, "embedding"});
  for (int64_t i = 0; i < c.n_layer; ++i) {
    // 12h^2 weights, 2 FLOPs each per token; attention: q.k and the weighted sum of v over the
    // sequence, 2sh each. Kept for backward: about 17 h-wide tensors (layer norms, q k v,
    // attention output, MLP 4h twice, residuals) and the scores and their softmax (a.s each).
    m.layers.push_back({"block " + std::to_string(i), 24 * h * h + 4 * seq * h, (12 * h * h + 13 * h) * kFloat,
                        (17 * h + 2 * a * seq) * kFloat, h * kFloat, 4, "block"});
  }
  // Final layer norm and the output projection (2hV per token); the logits and their gradient
  // are kept. Its all-reduce: the backward of f before the column-parallel head, on the h-wide
  // gradient of its input (the logits themselves stay split: vocab-parallel cross-entropy).
  m.layers.push_back({"head", 2 * h * v, (v * h + 2 * h) * kFloat, (2 * v + 2 * h) * kFloat, h * kFloat, 1, "head"});
  return m;
}

ModelSpec model_from_json(const json& j, const std::string& where) {
  ModelSpec m;
  const json& name = field(j, "name", where, kModelSpecFormat);
  if (!name.is_string()) throw Error(where + ".name is not a string");
  m.name = name.get<std::string>();
  if (j.contains("heads")) {
    if (!j["heads"].is_number_integer() || j["heads"].get<int64_t>() < 0)
      throw Error(where + ".heads must be a whole number, 0 or more (0: t is not constrained)");
    m.heads = j["heads"].get<int64_t>();
  }
  const json& layers = field(j, "layers", where, kModelSpecFormat);
  if (!layers.is_array() || layers.empty()) throw Error(where + ".layers must be a list of at least one layer");
  for (size_t k = 0; k < layers.size(); ++k) {
    const std::string at = where + ".layers[" + std::to_string(k) + "]";
    const json& l = layers[k];
    Layer x;
    x.name = l.contains("name") && l["name"].is_string() ? l["name"].get<std::string>() : "layer " + std::to_string(k);
    x.flops_per_token = non_negative_number(l, "flops_per_token", at, kModelSpecFormat);
    x.param_bytes = non_negative_number(l, "param_bytes", at, kModelSpecFormat);
    x.activation_bytes_per_token = non_negative_number(l, "activation_bytes_per_token", at, kModelSpecFormat);
    x.output_bytes_per_token = non_negative_number(l, "output_bytes_per_token", at, kModelSpecFormat);
    const json& ar = field(l, "tp_all_reduces", at, kModelSpecFormat);
    if (!ar.is_number_integer() || ar.get<int64_t>() < 0)
      throw Error(at + ".tp_all_reduces is " + ar.dump() + ": it must be a whole number, 0 or more");
    x.tp_all_reduces = ar.get<int64_t>();
    x.kind = x.name;
    if (l.contains("kind")) {
      if (!l["kind"].is_string() || l["kind"].get<std::string>().empty())
        throw Error(at + ".kind is " + l["kind"].dump() + ": it must be the name of a profiled layer, e.g. \"block\"");
      x.kind = l["kind"].get<std::string>();
    }
    m.layers.push_back(x);
  }
  return m;
}

ModelSpec read_model(const std::string& preset_or_path, int64_t seq_len, const Shape& shape) {
  if (seq_len < 1) throw Error("the sequence length must be 1 or more (--seq-len)");
  for (const auto& name : gpt2_preset_names())
    if (name == preset_or_path) {
      GPT2Config c = gpt2_preset(name);
      if (shape.n_layer > 0) c.n_layer = shape.n_layer;
      if (shape.n_embd > 0) c.n_embd = shape.n_embd;
      if (shape.n_head > 0) c.n_head = shape.n_head;
      if (shape.vocab_size > 0) c.vocab_size = shape.vocab_size;
      if (c.n_embd % c.n_head != 0)
        throw Error("n_embd " + std::to_string(c.n_embd) + " is not a multiple of n_head " + std::to_string(c.n_head));
      if (c.vocab_size == 0) c.vocab_size = DataConfig{}.vocab_size;  // the tokenizer's default
      return gpt2_model(c, seq_len);
    }
  if (preset_or_path.size() < 5 || preset_or_path.substr(preset_or_path.size() - 5) != ".json")
    gpt2_preset(preset_or_path);  // throws, naming the presets
  return model_from_json(read_json_file(preset_or_path, "model"), preset_or_path);
}

json to_json(const ModelSpec& m) {
  json layers = json::array();
  for (const auto& l : m.layers)
    layers.push_back({{"name", l.name}, {"flops_per_token", l.flops_per_token}, {"param_bytes", l.param_bytes},
                      {"activation_bytes_per_token", l.activation_bytes_per_token},
                      {"output_bytes_per_token", l.output_bytes_per_token}, {"tp_all_reduces", l.tp_all_reduces},
                      {"kind", l.kind}});
  return {{"name", m.name}, {"heads", m.heads}, {"layers", layers}};
}

}  // namespace kit::planner
