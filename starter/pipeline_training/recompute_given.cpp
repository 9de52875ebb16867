// Problem 6.3 (given code): the generators' states, the counters of block forwards and the
// stages' call of a block (see pipeline_training/recompute.h).
#include <ATen/Context.h>
#include <torch/csrc/autograd/graph_task.h>

#include <atomic>
#include <mutex>

#include "kit/errors.h"
#include "pipeline_training/recompute.h"

namespace kit::pp {
namespace {

std::atomic<int64_t> g_forwards{0}, g_recomputed{0};

// True while this thread runs a backward pass (the autograd engine's current graph task).
bool inside_backward() { return torch::autograd::get_current_graph_task_exec_info() != nullptr; }

}  // namespace

GeneratorStates save_generators(const c10::Device& device) {
  GeneratorStates s;
  s.device = device;
  s.autocast = autocast_state(device.type());
  {
    at::Generator cpu = at::globalContext().defaultGenerator(torch::kCPU);
    std::lock_guard<std::mutex> lock(cpu.mutex());
    s.cpu = cpu.get_state();
  }
  if (device.is_cuda()) {
    at::Generator cuda = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(cuda.mutex());
    s.cuda = cuda.get_state();
  }
  return s;
}

void restore_generators(const GeneratorStates& s) {
  if (!s.cpu.defined())
    throw Error("restore_generators: these states were never saved (save_generators(device) makes them)");
  {
    at::Generator cpu = at::globalContext().defaultGenerator(torch::kCPU);
    std::lock_guard<std::mutex> lock(cpu.mutex());
    cpu.set_state(s.cpu);
  }
  if (s.cuda.defined()) {
    at::Generator cuda = at::globalContext().defaultGenerator(s.device);
    std::lock_guard<std::mutex> lock(cuda.mutex());
    cuda.set_state(s.cuda);
  }
  set_autocast_state(s.device.type(), s.autocast);
}

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
