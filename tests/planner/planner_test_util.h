// Helpers that more than one planner test uses, defined once: the test files compile together
// in one unity batch (the top CMakeLists.txt), where two definitions would collide.
#pragma once
#include "planner/model_spec.h"

namespace planner_test {

// Two layers with round numbers: forward FLOPs 1e9 and 3e9 per token, parameters 100 and 300
// bytes (times `scale`), kept activations 10 and 30 bytes per token, outputs 400 bytes per token.
inline kit::planner::ModelSpec two_layers(double scale = 1) {
  kit::planner::ModelSpec m;
  m.name = "two";
  m.layers = {{"a", 1e9, 100 * scale, 10, 400, 4}, {"b", 3e9, 300 * scale, 30, 400, 1}};
  return m;
}

// Three layers for activation recomputation, every number round (bytes per token, fp32):
//           forward FLOPs  parameters  activations kept  output (the next layer's input)
//   e       1e9            100         20                8
//   f       2e9            200         50                4
//   g       3e9            300         40                2
// No tensor-parallel all-reduces, so t only divides the work and the memory.
inline kit::planner::ModelSpec three_layers() {
  kit::planner::ModelSpec m;
  m.name = "three";
  m.layers = {{"e", 1e9, 100, 20, 8, 0}, {"f", 2e9, 200, 50, 4, 0}, {"g", 3e9, 300, 40, 2, 0}};
  return m;
}

}  // namespace planner_test
