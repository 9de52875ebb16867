// Problem 6.3 (given code): the counters of block forwards and the stages' call of a block
// (see pipeline_training/recompute.h).
#include <torch/csrc/autograd/graph_task.h>

#include <atomic>

#include "pipeline_training/recompute.h"

namespace kit::pp {
namespace {

std::atomic<int64_t> g_forwards{0}, g_recomputed{0};

// True while this thread runs a backward pass (the autograd engine's current graph task).
bool inside_backward() { return torch::autograd::get_current_graph_task_exec_info() != nullptr; }

}  // namespace

void reset_recompute_counters() {
  g_forwards = 0;
  g_recomputed = 0;
}

RecomputeCounters recompute_counters() { return {g_forwards.load(), g_recomputed.load()}; }

torch::Tensor run_block(const BlockFn& block, const torch::Tensor& x, bool with_recompute) {
  // The block as recompute sees it: every call counted here, out of the student's reach. It
  // owns a copy of the block, since recompute may keep it for its backward.
  const BlockFn counted = [block](const torch::Tensor& in) {
    ++g_forwards;
    if (inside_backward()) ++g_recomputed;
    return block(in);
  };
  return with_recompute ? recompute(counted, x) : counted(x);
}

}  // namespace kit::pp
