// Problem 8 (given): the cluster a parallel strategy runs on, as the planner sees it
// (AMP, NeurIPS 2022): device types with their sustained FLOP/s and memory, nodes of devices,
// and the two kinds of link, inside a node and between nodes, each a bandwidth and a latency.
//
//   {"name": "4x8 A100",
//    "device_types": {"A100": {"flops": 1.5e14, "memory_bytes": 4.0e10}},
//    "nodes": [{"device_type": "A100", "devices": 8}, ...],
//    "intra_node": {"bandwidth": 2.4e11, "latency": 5e-6},
//    "inter_node": {"bandwidth": 2.5e10, "latency": 2e-5}}
//
// A node may also give "shared_flops": what all its devices compute together when they share
// processors, as processes on a CPU with fewer cores than processes do. A device alone then
// runs at its type's flops, but the node never exceeds shared_flops in all (a waiting process
// gives its core to the others). Absent: the devices do not share (devices x flops).
//
// A device type may also name a "profile": its layers' times measured (planner/profile.h; a
// path relative to the cluster file). Its compute then comes from the measurement instead of
// FLOPs / flops (flops stays required: the shared-node bound below compares it with shared_flops).
//
// Ranks are numbered node by node (node 0's devices first), as srun and torchrun place them,
// so a group of consecutive ranks (Megatron's tensor groups) stays inside a node when it fits.
// Bandwidths are bytes per second in each direction; latencies seconds per message.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kit::planner {

struct LayerProfile;  // planner/profile.h

struct DeviceType {
  double flops = 0;         // sustained FLOP/s on the model's matrix multiplies
  double memory_bytes = 0;  // what a process may hold
  std::shared_ptr<const LayerProfile> profile;  // measured layer times (null: count FLOPs)
};

struct Link {
  double bandwidth = 0;  // bytes/s, one direction
  double latency = 0;    // seconds per message
};

struct Node {
  std::string device_type;
  int64_t devices = 0;
  double shared_flops = 0;  // > 0: the node's devices share processors worth this many FLOP/s
};

struct Cluster {
  std::string name;
  std::map<std::string, DeviceType> device_types;
  std::vector<Node> nodes;
  Link intra_node, inter_node;

  int64_t devices() const;                         // all ranks
  int64_t node_of(int64_t rank) const;             // kit::Error outside 0..devices()-1
  const DeviceType& device_of(int64_t rank) const;
  // The link a group of ranks communicates over: intra_node when every rank is on one node,
  // inter_node otherwise (a ring is as slow as its slowest hop).
  const Link& link_of(const std::vector<int64_t>& ranks) const;
};

// Reads and checks a cluster; kit::Error naming the field (e.g. "nodes[2].device_type") and
// what is wrong: missing, not a number, not positive, a device type not defined, a profile
// that cannot be read. A relative profile path is taken from `dir` (read_cluster: the file's).
Cluster cluster_from_json(const nlohmann::json& j, const std::string& where = "cluster", const std::string& dir = "");
Cluster read_cluster(const std::string& path);
nlohmann::json to_json(const Cluster& c);

}  // namespace kit::planner
