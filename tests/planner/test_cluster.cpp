// Problem 8 (given): the cluster description: ranks placed node by node, the link a group
// spans, and a clear error naming the field for each kind of bad file.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "error_of.h"
#include "kit/errors.h"
#include "planner/cluster.h"

namespace {
using nlohmann::json;
namespace pl = kit::planner;

json two_node_cluster_json() {
  return json::parse(R"({"name": "mixed", "device_types": {"V100": {"flops": 1e14, "memory_bytes": 3.2e10},
                                                     "T4": {"flops": 4e13, "memory_bytes": 1.6e10}},
                          "nodes": [{"device_type": "V100", "devices": 4}, {"device_type": "T4", "devices": 2}],
                          "intra_node": {"bandwidth": 1.5e11, "latency": 5e-6},
                          "inter_node": {"bandwidth": 1.25e10, "latency": 2e-5}})");
}

// The message of the kit::Error that cluster_from_json throws for j, or "" when it throws none.
std::string error_of(const json& j) {
  return kit_test::kit_error_message([&] { pl::cluster_from_json(j); }).value_or("");
}

}  // namespace

TEST(PlannerCluster, RanksArePlacedNodeByNode) {
  const pl::Cluster c = pl::cluster_from_json(two_node_cluster_json());
  EXPECT_EQ(c.devices(), 6);
  EXPECT_EQ(c.node_of(3), 0);
  EXPECT_EQ(c.node_of(4), 1);
  EXPECT_DOUBLE_EQ(c.device_of(5).flops, 4e13);
  EXPECT_THROW(c.node_of(6), kit::Error);
  EXPECT_DOUBLE_EQ(c.link_of({0, 1, 2, 3}).bandwidth, 1.5e11);  // inside node 0
  EXPECT_DOUBLE_EQ(c.link_of({3, 4}).bandwidth, 1.25e10);       // across the two nodes
  EXPECT_DOUBLE_EQ(pl::cluster_from_json(pl::to_json(c)).inter_node.latency, 2e-5);  // round trip
}

TEST(PlannerCluster, BadFilesNameTheField) {
  auto expect = [](json j, const std::string& part) {
    const std::string msg = error_of(j);
    EXPECT_NE(msg.find(part), std::string::npos) << "wanted \"" << part << "\" in: " << msg;
  };
  json j = two_node_cluster_json();
  j["inter_node"].erase("bandwidth");
  expect(j, "cluster.inter_node has no \"bandwidth\"");
  j = two_node_cluster_json();
  j["intra_node"]["bandwidth"] = -1;
  expect(j, "intra_node.bandwidth is -1");
  j = two_node_cluster_json();
  j["nodes"][1]["device_type"] = "A100";
  expect(j, "nodes[1].device_type \"A100\" is not one of");
  j = two_node_cluster_json();
  j["device_types"]["T4"]["flops"] = "fast";
  expect(j, "device_types.T4.flops is \"fast\", not a number");
  j = two_node_cluster_json();
  j["nodes"][0]["devices"] = 0;
  expect(j, "nodes[0].devices must be a whole number");
}
