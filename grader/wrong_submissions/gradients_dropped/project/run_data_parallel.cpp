// Problem 1.2: setup, launch_workers, average_gradients (see project/run_data_parallel.h).
#include "project/run_data_parallel.h"

#include <torch/torch.h>

#include <vector>

#include "dist/dist.h"
#include "dist/launch.h"
#include "kit/errors.h"

namespace kit {

// Hint: one call to the dist layer. The rendezvous address and port are already in
// MASTER_ADDR / MASTER_PORT (the original sets them by hand to localhost:11868, which
// collides when two runs share a machine; the kit's launcher picks a free port).
void setup(int rank, int world_size, const std::string& backend) {
  // BEGIN SOLUTION 1.2 setup
  dist::init_process_group(backend, rank, world_size);
  // END SOLUTION
}

// Hints:
//  1. One kit::Process per rank: Process(rank, world_size, rdzv). Keep them in a
//     std::vector<Process> (a Process can be moved, not copied).
//  2. start() every process, then wait for all of them with join_all(processes): it
//     stops the others and throws when one fails, so a failed run never hangs.
void launch_workers(int world_size, const Rendezvous& rdzv) {
  // BEGIN SOLUTION 1.2 launch_workers
  std::vector<Process> processes;
  for (int rank = 0; rank < world_size; ++rank) {
    processes.emplace_back(rank, world_size, rdzv);
    processes.back().start();
  }
  join_all(processes);
  // END SOLUTION
}

// Hints:
//  1. Walk model.parameters(); each gradient is p.grad() (a tensor you may modify in place).
//  2. dist::all_reduce sums over the ranks (Gloo has no AVG), so divide by the world size.
//  3. Every rank must make exactly the same all_reduce calls: give a parameter that got no
//     gradient on this rank a zero one (p.mutable_grad() = torch::zeros_like(p)) rather than
//     skipping it, or the ranks' calls stop lining up.
//  4. The tied lm_head/wte weight is one parameter: reduce it once.
void average_gradients(torch::nn::Module& model) {
  // BEGIN SOLUTION 1.2 average_gradients
  const double world_size = dist::get_world_size();
  for (auto& p : model.parameters(/*recurse=*/false)) {  // wrong: skips every submodule
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    dist::all_reduce(p.grad(), dist::ReduceOp::SUM);
    p.grad().div_(world_size);
  }
  // END SOLUTION
}

}  // namespace kit
