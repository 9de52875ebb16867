// Problem 8 (given): the model as the planner sees it; bad files name the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "error_of.h"
#include "kit/errors.h"
#include "planner/model_spec.h"

namespace {
namespace pl = kit::planner;
using nlohmann::json;

// The message of the kit::Error that model_from_json throws for j, or "" when it throws none.
std::string model_error_of(const json& j) {
  return kit_test::kit_error_message([&] { pl::model_from_json(j); }).value_or("");
}

json one_layer() {
  return json::parse(R"({"name": "m", "heads": 4, "layers": [{"name": "x", "flops_per_token": 1e6,
      "param_bytes": 4e6, "activation_bytes_per_token": 512, "output_bytes_per_token": 128, "tp_all_reduces": 4}]})");
}

}  // namespace

TEST(PlannerModel, Gpt2PresetCountsTheKnownParameters) {
  // GPT-2 small has 124,439,808 parameters; the head's copy of the tied embedding comes on top.
  const pl::ModelSpec m = pl::read_model("gpt2", 1024, {0, 0, 0, 50257});
  ASSERT_EQ(m.layers.size(), 14u);
  EXPECT_NEAR(m.param_bytes(0, 14) / 4 - 50257.0 * 768, 124439808, 0.5);
  // A block: 24 h^2 + 4 s h forward FLOPs per token, 4 tensor-parallel all-reduces.
  EXPECT_DOUBLE_EQ(m.layers[1].flops_per_token, 24.0 * 768 * 768 + 4.0 * 1024 * 768);
  EXPECT_EQ(m.layers[1].tp_all_reduces, 4);
  EXPECT_EQ(m.heads, 12);
  EXPECT_DOUBLE_EQ(m.layers.back().flops_per_token, 2.0 * 768 * 50257);
}

TEST(PlannerModel, JsonRoundTripAndBadFilesNameTheField) {
  const pl::ModelSpec m = pl::model_from_json(one_layer());
  EXPECT_EQ(m.heads, 4);
  EXPECT_DOUBLE_EQ(pl::model_from_json(pl::to_json(m)).layers[0].activation_bytes_per_token, 512);
  auto expect = [](json j, const std::string& part) {
    const std::string msg = model_error_of(j);
    EXPECT_NE(msg.find(part), std::string::npos) << "wanted \"" << part << "\" in: " << msg;
  };
  json j = one_layer();
  j["layers"][0].erase("param_bytes");
  expect(j, "model.layers[0] has no \"param_bytes\"");
  j = one_layer();
  j["layers"][0]["flops_per_token"] = -1;
  expect(j, "model.layers[0].flops_per_token is -1: it must be 0 or more");
  j = one_layer();
  j["layers"][0]["tp_all_reduces"] = 1.5;
  expect(j, "model.layers[0].tp_all_reduces is 1.5");
  j = one_layer();
  j["layers"] = json::array();
  expect(j, "model.layers must be a list of at least one layer");
  try {
    pl::read_model("no-such-preset", 128);
    FAIL() << "no error";
  } catch (const kit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu-small"), std::string::npos) << e.what();  // names the presets
  }
}
