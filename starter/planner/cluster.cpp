// Problem 8 (given): the cluster description (see planner/cluster.h).
#include "planner/cluster.h"

#include <nlohmann/json.hpp>

#include "kit/errors.h"
#include "planner/json_fields.h"
#include "planner/profile.h"

namespace kit::planner {

using nlohmann::json;

namespace {

constexpr const char* kClusterFormat = "starter/planner/cluster.h";

const json& cluster_field(const json& j, const char* key, const std::string& where) {
  return planner::field(j, key, where, kClusterFormat);
}
double positive(const json& j, const char* key, const std::string& where) {
  return positive_number(j, key, where, kClusterFormat);
}
double non_negative(const json& j, const char* key, const std::string& where) {
  return non_negative_number(j, key, where, kClusterFormat);
}

Link link_from_json(const json& j, const char* key, const std::string& where) {
  const std::string at = where + "." + key;
  const json& l = cluster_field(j, key, where);
  return {positive(l, "bandwidth", at), non_negative(l, "latency", at)};
}

}  // namespace

int64_t Cluster::devices() const {
  int64_t n = 0;
  for (const auto& node : nodes) n += node.devices;
  return n;
}

int64_t Cluster::node_of(int64_t rank) const {
  if (rank >= 0)
    for (size_t k = 0; k < nodes.size(); ++k) {
      if (rank < nodes[k].devices) return static_cast<int64_t>(k);
      rank -= nodes[k].devices;
    }
  throw Error("rank outside the cluster " + name + " of " + std::to_string(devices()) + " devices");
}

const DeviceType& Cluster::device_of(int64_t rank) const {
  return device_types.at(nodes[static_cast<size_t>(node_of(rank))].device_type);
}

const Link& Cluster::link_of(const std::vector<int64_t>& ranks) const {
  if (ranks.empty()) throw Error("link_of: an empty group has no link");
  const int64_t first = node_of(ranks.front());
  for (const int64_t r : ranks)
    if (node_of(r) != first) return inter_node;
  return intra_node;
}

Cluster cluster_from_json(const json& j, const std::string& where, const std::string& dir) {
  Cluster c;
  const json& name = cluster_field(j, "name", where);
  if (!name.is_string()) throw Error(where + ".name is not a string");
  c.name = name.get<std::string>();
  const json& types = cluster_field(j, "device_types", where);
  if (!types.is_object() || types.empty()) throw Error(where + ".device_types must map at least one name to a device");
  for (const auto& [type, d] : types.items()) {
    const std::string at = where + ".device_types." + type;
    DeviceType& device = c.device_types[type] = {positive(d, "flops", at), positive(d, "memory_bytes", at), nullptr};
    if (d.contains("profile")) {
      if (!d["profile"].is_string() || d["profile"].get<std::string>().empty())
        throw Error(at + ".profile must be the path of a layer profile (planner/profile.h), e.g. \"profile.json\"");
      std::string path = d["profile"].get<std::string>();
      if (path.front() != '/' && !dir.empty()) path = dir + "/" + path;
      device.profile = std::make_shared<const LayerProfile>(read_profile(path));
    }
  }
  const json& nodes = cluster_field(j, "nodes", where);
  if (!nodes.is_array() || nodes.empty()) throw Error(where + ".nodes must be a list of at least one node");
  for (size_t k = 0; k < nodes.size(); ++k) {
    const std::string at = where + ".nodes[" + std::to_string(k) + "]";
    const json& type = cluster_field(nodes[k], "device_type", at);
    if (!type.is_string() || !c.device_types.count(type.get<std::string>()))
      throw Error(at + ".device_type " + type.dump() + " is not one of " + where + ".device_types");
    const json& n = cluster_field(nodes[k], "devices", at);
    if (!n.is_number_integer() || n.get<int64_t>() < 1) throw Error(at + ".devices must be a whole number, 1 or more");
    c.nodes.push_back({type.get<std::string>(), n.get<int64_t>(),
                       nodes[k].contains("shared_flops") ? positive(nodes[k], "shared_flops", at) : 0.0});
  }
  c.intra_node = link_from_json(j, "intra_node", where);
  c.inter_node = link_from_json(j, "inter_node", where);
  return c;
}

Cluster read_cluster(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return cluster_from_json(read_json_file(path, "cluster"), path, slash == std::string::npos ? "." : path.substr(0, slash));
}

json to_json(const Cluster& c) {
  json types = json::object(), nodes = json::array();
  for (const auto& [name, d] : c.device_types) {
    types[name] = {{"flops", d.flops}, {"memory_bytes", d.memory_bytes}};
    if (d.profile) types[name]["profile"] = d.profile->file;
  }
  for (const auto& n : c.nodes) {
    nodes.push_back({{"device_type", n.device_type}, {"devices", n.devices}});
    if (n.shared_flops > 0) nodes.back()["shared_flops"] = n.shared_flops;
  }
  auto link = [](const Link& l) { return json{{"bandwidth", l.bandwidth}, {"latency", l.latency}}; };
  return {{"name", c.name}, {"device_types", types}, {"nodes", nodes}, {"intra_node", link(c.intra_node)},
          {"inter_node", link(c.inter_node)}};
}

}  // namespace kit::planner
