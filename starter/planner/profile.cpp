// Problem 8 (given): see planner/profile.h.
#include "planner/profile.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "kit/errors.h"
#include "planner/json_fields.h"

namespace kit::planner {

using nlohmann::json;

namespace {

constexpr const char* kProfileFormat = "starter/planner/profile.h";

bool same(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); }

std::string number_text(double x) { return json(x).dump(); }

// The profile's entry for this layer's kind, checked to be the same layer.
const Layer& measured_layer(const LayerProfile& p, const Layer& layer) {
  const std::string again = ": profile this model on the device (profile_layers --preset ... --seq-len ..., with "
                            "its width, heads, vocabulary and sequence length) and name that file";
  const auto it = p.layers.find(layer.kind.empty() ? layer.name : layer.kind);
  if (it == p.layers.end())
    throw Error("the profile " + p.file + " has no layer of kind \"" + (layer.kind.empty() ? layer.name : layer.kind) +
                "\" (the model's " + layer.name + ")" + again);
  const Layer& m = it->second;
  if (!same(m.flops_per_token, layer.flops_per_token) || !same(m.param_bytes, layer.param_bytes))
    throw Error("the profile " + p.file + " measured a " + it->first + " of " + number_text(m.flops_per_token) +
                " FLOPs per token and " + number_text(m.param_bytes) + " parameter bytes; the model's " + layer.name +
                " has " + number_text(layer.flops_per_token) + " and " + number_text(layer.param_bytes) +
                " (another shape or sequence length)" + again);
  return m;
}

std::string no_tp(const LayerProfile& p, const std::string& kind, int64_t tp) {
  return "the profile " + p.file + " has no " + kind + " at tensor-parallel degree t = " + std::to_string(tp) +
         ": profile it with that degree (profile_layers --tp 1,2,4 ...)";
}

}  // namespace

LayerSeconds layer_seconds(const Layer& layer, double tokens, int64_t tp, const DeviceType& device) {
  if (tp < 1) throw Error("layer_seconds: the tensor-parallel degree must be 1 or more");
  if (!device.profile) {
    const double forward = layer.flops_per_token * tokens / static_cast<double>(tp) / device.flops;
    return {forward, 2 * forward};  // backward: two GEMMs for each of the forward's
  }
  const LayerProfile& p = *device.profile;
  const std::string& kind = measured_layer(p, layer).kind;
  const auto it = p.times.find({kind, tp});
  if (it == p.times.end() || it->second.empty()) throw Error(no_tp(p, kind, tp));
  const std::vector<LayerProfile::Point>& pts = it->second;
  // Outside the profiled sizes: the nearest one's time per token.
  const LayerProfile::Point& end = tokens <= pts.front().tokens ? pts.front() : pts.back();
  if (tokens <= pts.front().tokens || tokens >= pts.back().tokens)
    return {end.seconds.forward * tokens / end.tokens, end.seconds.backward * tokens / end.tokens};
  size_t k = 1;
  while (pts[k].tokens < tokens) ++k;  // pts[k - 1].tokens < tokens <= pts[k].tokens
  const LayerProfile::Point &a = pts[k - 1], &b = pts[k];
  const double f = (tokens - a.tokens) / (b.tokens - a.tokens);
  return {a.seconds.forward + f * (b.seconds.forward - a.seconds.forward),
          a.seconds.backward + f * (b.seconds.backward - a.seconds.backward)};
}

double optimizer_seconds(const Layer& layer, int64_t tp, const DeviceType& device) {
  if (!device.profile) return 0;
  const LayerProfile& p = *device.profile;
  const std::string& kind = measured_layer(p, layer).kind;
  const auto it = p.optimizer.find({kind, tp});
  if (it == p.optimizer.end()) throw Error(no_tp(p, kind, tp));
  return it->second;
}

LayerProfile profile_from_json(const json& j, const std::string& where) {
  LayerProfile p;
  p.file = where;
  const json& format = field(j, "format", where, kProfileFormat);
  if (format != "kit layer profile")
    throw Error(where + ".format is " + format.dump() + ", not \"kit layer profile\": is it profile_layers' output?");
  if (j.contains("device") && j["device"].is_string()) p.device = j["device"].get<std::string>();
  p.seq_len = static_cast<int64_t>(positive_number(j, "seq_len", where, kProfileFormat));
  if (j.contains("tensor_parallel_included")) {
    if (!j["tensor_parallel_included"].is_boolean())
      throw Error(where + ".tensor_parallel_included must be true or false");
    p.tensor_parallel_included = j["tensor_parallel_included"].get<bool>();
  }
  const json& layers = field(j, "layers", where, kProfileFormat);
  if (!layers.is_object() || layers.empty()) throw Error(where + ".layers must map at least one kind to its layer");
  for (const auto& [kind, l] : layers.items()) {
    const std::string at = where + ".layers." + kind;
    Layer x;
    x.name = x.kind = kind;
    x.flops_per_token = non_negative_number(l, "flops_per_token", at, kProfileFormat);
    x.param_bytes = non_negative_number(l, "param_bytes", at, kProfileFormat);
    p.layers[kind] = x;
  }
  auto kind_tp = [&](const json& e, const std::string& at) {
    const json& kind = field(e, "kind", at, kProfileFormat);
    if (!kind.is_string() || !p.layers.count(kind.get<std::string>()))
      throw Error(at + ".kind " + kind.dump() + " is not one of " + where + ".layers");
    const json& tp = field(e, "tp", at, kProfileFormat);
    if (!tp.is_number_integer() || tp.get<int64_t>() < 1) throw Error(at + ".tp must be a whole number, 1 or more");
    return std::make_pair(kind.get<std::string>(), tp.get<int64_t>());
  };
  const json& times = field(j, "times", where, kProfileFormat);
  if (!times.is_array() || times.empty()) throw Error(where + ".times must be a list of at least one measurement");
  for (size_t k = 0; k < times.size(); ++k) {
    const std::string at = where + ".times[" + std::to_string(k) + "]";
    const auto key = kind_tp(times[k], at);
    LayerProfile::Point q;
    q.tokens = positive_number(times[k], "tokens", at, kProfileFormat);
    q.seconds = {positive_number(times[k], "forward_s", at, kProfileFormat),
                 positive_number(times[k], "backward_s", at, kProfileFormat)};
    std::vector<LayerProfile::Point>& pts = p.times[key];
    for (const auto& other : pts)
      if (other.tokens == q.tokens)
        throw Error(at + " measures " + key.first + " at t = " + std::to_string(key.second) + " and " +
                    number_text(q.tokens) + " tokens a second time");
    pts.push_back(q);
  }
  for (auto& [key, pts] : p.times)
    std::sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) { return a.tokens < b.tokens; });
  if (j.contains("optimizer")) {
    const json& opt = j["optimizer"];
    if (!opt.is_array()) throw Error(where + ".optimizer must be a list of {kind, tp, seconds}");
    for (size_t k = 0; k < opt.size(); ++k) {
      const std::string at = where + ".optimizer[" + std::to_string(k) + "]";
      p.optimizer[kind_tp(opt[k], at)] = non_negative_number(opt[k], "seconds", at, kProfileFormat);
    }
  }
  return p;
}

LayerProfile read_profile(const std::string& path) { return profile_from_json(read_json_file(path, "profile"), path); }

}  // namespace kit::planner
