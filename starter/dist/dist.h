// The kit's torch.distributed: the world's process group, subgroups of it, the collectives
// and point-to-point messages the problems need, and counters that tests use to check what
// was communicated.
//
//   dist::init_process_group("gloo", rank, world_size);   // rendezvous at MASTER_ADDR:MASTER_PORT
//   dist::all_reduce(grad);                                // in place, SUM over all ranks
//   dist::Group tp = dist::new_group({0, 1});              // ranks 0 and 1 (every rank calls it)
//   if (tp.is_member()) dist::all_reduce(x, dist::ReduceOp::SUM, tp);   // SUM over ranks 0 and 1
//   dist::destroy_process_group();
//
// Rendezvous goes through c10d's TCP store, as torch.distributed's env:// does: rank 0
// serves it on MASTER_PORT and every rank connects to MASTER_ADDR:MASTER_PORT. When
// the kit's launcher starts the workers it serves the store itself (dist/launch.h) and
// sets KIT_STORE_HOSTED=1, so no rank has to bind the port.
//
// Backends: "gloo" (CPU tensors; compiled in when LibTorch ships Gloo) and "nccl"
// (CUDA tensors, one GPU per rank: cuda_device_for picks it from what the process sees;
// compiled in only when LibTorch has CUDA). KIT_GLOO_DEVICE=cuda puts Gloo ranks on a GPU
// (cuda:<local rank mod GPUs>: several ranks may share one), their tensors staged through
// host memory for every collective and message: the multi-rank code paths on a machine with
// one GPU (the suites' KIT_TEST_DEVICE=cuda), never the fast path.
//
// Timeouts are finite: every rendezvous and collective gives up after
// KIT_DIST_TIMEOUT seconds (default 60), so a dead or stalled peer becomes a
// kit::Error naming this rank instead of a hang.
#pragma once
#include <torch/nn/module.h>
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kit/errors.h"

namespace kit::dist {

enum class ReduceOp { SUM, MAX, MIN, PRODUCT };

// A collective that failed: a peer exited, crashed, stalled past the timeout, or made
// different calls. Programs exit with kExitPeerLost for it, so a launcher can tell
// the rank that failed first from the ranks that only lost it.
struct CommError : Error {
  using Error::Error;
};
inline constexpr int kExitPeerLost = 3;

// What this process has communicated since the last reset, over the world and every group
// (dist::counters()) or over one group (Group::counters()). Tests use these to catch a
// gradient reduced twice or not at all: after one data-parallel step the all-reduced bytes
// must equal the model's unique parameter bytes exactly; a tensor-parallel block makes
// exactly 2 all-reduces in forward and 2 in backward. Bytes are those of the tensor each
// call was given (all_gather: this rank's contribution), not what crossed the wire.
struct Counters {
  int64_t all_reduce_calls = 0;
  int64_t all_reduce_bytes = 0;
  int64_t all_gather_calls = 0;
  int64_t all_gather_bytes = 0;
  int64_t broadcast_calls = 0;
  int64_t broadcast_bytes = 0;
  int64_t send_bytes = 0;
  int64_t recv_bytes = 0;
  int64_t barrier_calls = 0;
  // Wall time this process spent inside blocking calls and Work::wait(), waiting for the
  // operation to finish: the transfer and reduction, plus any wait for a slower peer to
  // join. Time between starting an async call and waiting for it is not counted.
  double comm_seconds = 0;
};

// A subgroup of the world's ranks with a c10d process group of its own (torch.distributed's
// new_group): collectives and messages on it involve its members only, with the world's
// timeout (KIT_DIST_TIMEOUT) and counters of its own. Inside a group, ranks are group ranks:
// rank() is this process's position in ranks(), and the src of broadcast and the peer of
// send/recv are group ranks, so code written for "rank r of p" runs unchanged on a group.
// A Group is a handle: copies share the one process group.
class Group {
 public:
  Group() = default;                    // no group: every use is a kit::Error
  bool is_member() const;               // this process is one of ranks()
  int rank() const;                     // this process's group rank (kit::Error for a non-member)
  int size() const;                     // number of members
  const std::vector<int>& ranks() const;  // the world rank of each group rank
  const std::string& name() const;      // "world", or new_group's name
  Counters counters() const;            // what this process communicated on this group
  void reset_counters() const;
  struct State;  // dist.cpp's: the members, the c10d process group, the counters
  explicit Group(std::shared_ptr<State> s) : s_(std::move(s)) {}
  State& state(const char* what) const;  // kit::Error for Group() or after destroy_process_group

 private:
  std::shared_ptr<State> s_;
};

// The world as a Group (every rank; group rank = world rank).
Group world_group();

// Creates the group of these world ranks (group rank i is ranks[i]). Like
// torch.distributed.new_group, every rank of the world calls it for every group, in the
// same order, members and non-members alike: a non-member gets a handle that is not a
// member at once, the members meet through the store under the prefix "kit-group/<name>/"
// (name: by default the ranks, e.g. "0,2,4"). Calling it again with the same name and ranks
// returns the same group. Throws kit::Error for an empty list, a rank outside the world, a
// rank listed twice, or a name already used for other ranks; CommError when the members
// do not all show up within the timeout.
Group new_group(const std::vector<int>& ranks, const std::string& name = "");

// Creates this process's group. backend: "gloo" or "nccl". The rendezvous address and
// port come from MASTER_ADDR (default 127.0.0.1) and MASTER_PORT (required).
// Throws kit::Error for a bad rank/world size, an unknown or compiled-out backend,
// a port already in use, or peers that do not show up within the timeout.
void init_process_group(const std::string& backend, int rank, int world_size);
// The same with the address and port given explicitly.
void init_process_group(const std::string& backend, int rank, int world_size, const std::string& master_addr,
                        int master_port);

bool is_initialized();
int get_rank();                  // this process's rank (kit::Error before init)
int get_world_size();            // number of ranks (kit::Error before init)
std::string get_backend();       // "gloo" or "nccl"
torch::Device device();          // where this rank computes: cpu for gloo (or gloo_device), cuda:<local rank> for nccl

// Where a Gloo rank computes, from KIT_GLOO_DEVICE ("cpu", the default, or "cuda": GPU
// local_rank mod visible_gpus). kit::Error for another value or for "cuda" with no GPU.
torch::Device gloo_device(const char* value, int local_rank, int visible_gpus);

// Collectives. Every rank must make the same calls in the same order with tensors of
// the same shape and dtype, else they fail with CommError (never a hang: see the timeout).
// all_reduce, broadcast and recv write into `tensor` in place (a tensor is a handle, so
// it is passed as const& like LibTorch's own in-place ops); a non-contiguous tensor is
// copied to a contiguous buffer and back, and so is a bfloat16 one on Gloo (which has no
// bf16 reduction: it sums an fp32 copy; the counters count the tensor's own bytes).
void all_reduce(const torch::Tensor& tensor, ReduceOp op = ReduceOp::SUM);
// The same over the members of `group` (this process must be one).
void all_reduce(const torch::Tensor& tensor, ReduceOp op, const Group& group);

// Every member's `tensor` (same shape and dtype on all), in group-rank order.
std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor, const Group& group);

// A collective or point-to-point message that has been started and may still be running
// (torch.distributed's async_op=True, isend, irecv). wait() blocks until it is done and throws CommError when it failed;
// only after wait() does the tensor hold the result. A Work that is never waited for
// still finishes, but its errors are lost.
class Work {
 public:
  Work() = default;
  void wait();
  // True once the operation has finished (or failed): wait() then returns at once (or throws).
  // Never blocks, so a caller can let go of finished sends' buffers as it goes.
  bool completed() const;
  bool started() const { return impl_ != nullptr; }
  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Starts an all-reduce of a contiguous tensor and returns at once, so that computation
// (the rest of backward) can go on while it runs; see data_parallel/grad_buckets.h.
// The tensor must not be read or written until wait() returns. kit::Error for a bfloat16
// tensor on Gloo (all_reduce widens it; in place it cannot).
Work all_reduce_async(const torch::Tensor& tensor, ReduceOp op = ReduceOp::SUM);
Work all_reduce_async(const torch::Tensor& tensor, ReduceOp op, const Group& group);
void broadcast(const torch::Tensor& tensor, int src);
void broadcast(const torch::Tensor& tensor, int src, const Group& group);  // src: a group rank
void barrier();
void barrier(const Group& group);
void send(const torch::Tensor& tensor, int dst, int tag = 0);
void recv(const torch::Tensor& tensor, int src, int tag = 0);
void send(const torch::Tensor& tensor, int dst, int tag, const Group& group);  // dst, src: group ranks
void recv(const torch::Tensor& tensor, int src, int tag, const Group& group);

// Point-to-point, started and returned at once (torch.distributed's isend / irecv).
// wait() finishes them, with the same timeout and CommError as every other call.
// Gloo's send only completes once the receiver has posted the matching receive, so two
// ranks that both send to each other with the blocking send() at the same moment wait
// for each other forever; with send_async both go on to their receives. Gloo matches a
// receive to a send by (source, tag); NCCL ignores the tag and matches in call order per
// pair of ranks. The tensor must be contiguous and must not be touched until wait().
// channel: 0 is the world's group; others come from open_channel.
Work send_async(const torch::Tensor& tensor, int dst, int tag = 0, int channel = 0);
Work recv_async(const torch::Tensor& tensor, int src, int tag = 0, int channel = 0);
// The same inside a group (dst, src: group ranks). A group's own channels are groups of the
// same ranks under other names: new_group(g.ranks(), g.name() + "/up").
Work send_async(const torch::Tensor& tensor, int dst, int tag, const Group& group);
Work recv_async(const torch::Tensor& tensor, int src, int tag, const Group& group);

// A channel is one more process group over the same ranks, for point-to-point messages
// that must not queue behind other traffic. NCCL runs the operations between two ranks in
// order, on one stream per process group, and a send waits for its receive: two neighbours
// that send to each other at the same moment in one group can block each other (unless
// the messages fit NCCL's buffers), which is why Megatron groups such pairs. Traffic that
// flows one way only in a channel of its own cannot. Collective: every rank opens the same
// channels in the same order; opening a name again returns the same number (>= 1).
int open_channel(const std::string& name);

// Copies rank src's parameters and buffers into every rank's model, so all ranks start
// from the same weights whatever their random state. Counted as broadcasts.
void broadcast_parameters(torch::nn::Module& model, int src = 0);

// Waits for every rank (so no rank tears down a connection another still needs),
// then releases the group. Safe to call when not initialised.
void destroy_process_group();

// What this process has communicated on all groups together since the last reset (a
// group's own: Group::counters()). reset_counters() resets every group's too.
Counters counters();
void reset_counters();

// KIT_DIST_TIMEOUT in seconds (default 60); kit::Error for a value that is not a positive number.
std::chrono::milliseconds timeout_from_env();

// The backends this build of the kit can use, e.g. {"gloo"}.
std::vector<std::string> available_backends();

// The CUDA device a rank of the nccl backend takes, from its local rank (LOCAL_RANK or
// SLURM_LOCALID: its index among the ranks on its node) and the GPUs it can see. A task that
// sees exactly one GPU takes it, whatever its local rank: that is Slurm's per-task binding
// (srun --gpus-per-task=1, --gpu-bind=single:1), where each task's CUDA_VISIBLE_DEVICES holds
// its own GPU. A task that sees several takes the local rank's (one process per GPU of the
// node, as torchrun). kit::Error, naming the fix, when it sees none or fewer than its local
// rank needs.
int cuda_device_for(int rank, int local_rank, int visible_gpus);

}  // namespace kit::dist
