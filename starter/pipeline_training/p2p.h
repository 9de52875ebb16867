// Point-to-point messages between virtual stages (given code), over kit::dist's send/recv.
//
// Forward sends activations from stage s to s+1, backward sends gradients from s+1 to s.
// Each message is tagged with (kind, micro-batch, destination stage), so a receive can only
// ever match the message it asked for, whatever order the neighbour sent them in (Gloo
// matches on tags; NCCL ignores tags and matches in order, see p2p.cpp). Sends are
// asynchronous: send_* returns at once, a finished send lets go of its buffer at the next
// send or receive, and finish() waits for the rest, so two
// neighbours that send to each other at the same time (1F1B's steady state) never block
// each other. Receives block, with the dist layer's timeout (KIT_DIST_TIMEOUT).
// A message between two stages of the same rank (p = 1) is handed over in memory.
#pragma once
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "dist/dist.h"
#include "pipeline_training/action.h"

namespace kit::pp {

class P2P {
 public:
  // options: dtype and device of the messages (the rank's compute device).
  P2P(const PipelineShape& shape, int64_t rank, torch::TensorOptions options);
  // A pipeline inside a larger world (Problem 6's grid): `rank` is the pipeline rank and
  // world_ranks[r] the world rank of pipeline rank r. Every rank of the world builds its
  // P2P at the same point (the channels are opened over the whole world).
  P2P(const PipelineShape& shape, int64_t rank, torch::TensorOptions options, std::vector<int> world_ranks);
  ~P2P();

  void send_activation(const torch::Tensor& t, int64_t to_stage, int64_t microbatch);
  torch::Tensor recv_activation(int64_t from_stage, int64_t microbatch, const std::vector<int64_t>& shape);
  void send_gradient(const torch::Tensor& t, int64_t to_stage, int64_t microbatch);
  torch::Tensor recv_gradient(int64_t from_stage, int64_t microbatch, const std::vector<int64_t>& shape);

  // Waits for every send still in flight; kit::Error if a message to this rank itself
  // was sent but never received.
  void finish();

  int64_t messages_sent() const { return sent_; }
  int64_t messages_received() const { return received_; }
  // Seconds spent inside recv_* so far: waiting for the neighbour plus the transfer
  // (the benchmark subtracts it from an action's time to get its compute time).
  double recv_seconds() const { return recv_seconds_; }
  // Each receive since the last call, as [start, end] on the steady clock (seconds since its
  // epoch), oldest first: where inside an action its receive time lies (the executors put
  // them in the timeline, the traces show them).
  std::vector<std::pair<double, double>> take_recv_spans();

 private:
  // One message of `kind` (activation or gradient): counted, and a receive timed.
  void send(int64_t kind, const torch::Tensor& t, int64_t to_stage, int64_t microbatch);
  torch::Tensor recv(int64_t kind, int64_t from_stage, int64_t microbatch, const std::vector<int64_t>& shape);

  struct Impl;
  Impl* impl_;
  int64_t sent_ = 0, received_ = 0;
  double recv_seconds_ = 0;
  std::vector<std::pair<double, double>> recv_spans_;
};

// NCCL matches the messages between two ranks in the order they were issued, not by tag.
// Checks, from every rank's schedule, that each rank receives the messages of each
// neighbouring rank in the order that rank sends them; kit::Error naming the pair of ranks
// and the first two messages out of order otherwise. Gloo needs no such check (tags).
void check_in_order_delivery(const Schedules& schedules, const PipelineShape& shape);

}  // namespace kit::pp
