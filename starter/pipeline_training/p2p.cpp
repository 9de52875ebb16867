// Point-to-point messages between virtual stages (see pipeline_training/p2p.h).
//
// Matching. Every message carries the tag (micro-batch * S + destination stage) * 2 + kind,
// so Gloo hands a receive exactly the message it asked for, whatever order the sender
// issued them in. NCCL ignores tags: on each pair of ranks it matches the k-th send with
// the k-th receive. So under NCCL the executor relies on this ordering guarantee:
//
//   for every ordered pair of ranks (a, b), the messages a sends to b (activations and
//   gradients together, in a's action order) are the messages b receives from a, in b's
//   action order.
//
// check_in_order_delivery() checks it from the schedule before a run (train_parallel
// calls it when the backend is nccl). GPipe, 1F1B and interleaved 1F1B all satisfy it: a
// stage forwards micro-batches in the order its successor forwards them, and backwards
// them in the order its predecessor backwards them.
//
// Channels. NCCL also runs a pair's operations in order on one stream per process group,
// and a send waits for its receive: rank r sending an activation up while rank r+1 sends a
// gradient down (1F1B's steady state) would each wait for a receive queued behind the
// other's send. Megatron groups such pairs (batch_isend_irecv); here each kind of message
// and direction has a process group of its own (dist::open_channel), in which traffic
// flows one way only, so no send ever waits behind a send going the other way. Gloo does
// not need them, but uses them too, so that the tests run this very code.
//
// Sends are asynchronous and keep their buffer until they are done (checked at each send and
// receive; finish() waits for the rest); receives block, with the
// dist layer's timeout, and a failure names this rank, the stage, the micro-batch and the
// peer. Between two stages of one rank (p = 1) a message is a tensor in a map.
#include "pipeline_training/p2p.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <sstream>
#include <utility>

#include "kit/errors.h"

namespace kit::pp {

namespace {

enum Kind : int64_t { Activation = 0, Gradient = 1 };

const char* kind_name(int64_t kind) { return kind == Activation ? "activation" : "gradient"; }

// The stage a message of `kind` from `from_stage` goes to.
int64_t destination(int64_t kind, int64_t from_stage) { return kind == Activation ? from_stage + 1 : from_stage - 1; }

std::string describe(int64_t kind, int64_t microbatch, int64_t from_stage, int64_t to_stage) {
  return std::string("the ") + kind_name(kind) + " of micro-batch " + std::to_string(microbatch) + " from stage " +
         std::to_string(from_stage) + " to stage " + std::to_string(to_stage);
}

std::string shape_string(c10::IntArrayRef s) {
  std::ostringstream o;
  o << s;
  return o.str();
}

}  // namespace

struct P2P::Impl {
  PipelineShape shape;
  int64_t rank = 0;                // this process's pipeline rank
  std::vector<int> world;          // the world rank of each pipeline rank
  torch::TensorOptions options;

  struct Pending {
    dist::Work work;
    torch::Tensor buffer;  // must outlive the send
    std::string what;
  };
  std::vector<Pending> sends;
  // Messages between stages of this rank: (kind, micro-batch, destination stage) -> data.
  std::map<std::tuple<int64_t, int64_t, int64_t>, torch::Tensor> local;

  // Four channels (dist::open_channel), one per kind of message and direction between two
  // ranks, so each carries traffic one way only: with NCCL, which runs a pair's operations
  // in order on one stream per group, an activation going up can never wait behind a
  // gradient coming down (1F1B's steady state), nor a wrapped-around interleaved
  // activation behind one going the other way. channel[kind][up] (up: to a higher rank).
  int channel[2][2] = {{0, 0}, {0, 0}};

  void open_channels() {
    for (int kind = 0; kind < 2; ++kind)
      for (int up = 0; up < 2; ++up)
        channel[kind][up] = dist::open_channel(std::string("pp-") + kind_name(kind) + (up ? "-up" : "-down"));
  }
  int channel_to(int64_t kind, int64_t peer) const { return channel[kind][peer > rank ? 1 : 0]; }
  int channel_from(int64_t kind, int64_t peer) const { return channel[kind][rank > peer ? 1 : 0]; }

  std::string who() const { return "rank " + std::to_string(rank); }

  int tag(int64_t kind, int64_t microbatch, int64_t to_stage) const {
    const int64_t t = (microbatch * shape.stages() + to_stage) * 2 + kind;
    if (t >= std::numeric_limits<int>::max())  // the largest is sum_tied_gradients'
      throw Error("too many micro-batches and stages for a message tag (m = " + std::to_string(shape.microbatches) +
                  ", S = " + std::to_string(shape.stages()) + ")");
    return static_cast<int>(t);
  }

  void check_stage(int64_t stage, const char* role, int64_t kind, int64_t microbatch) const {
    if (stage < 0 || stage >= shape.stages())
      throw Error(who() + ": the " + kind_name(kind) + " of micro-batch " + std::to_string(microbatch) + " names " +
                  role + " stage " + std::to_string(stage) + ", but the stages are 0.." +
                  std::to_string(shape.stages() - 1));
    if (microbatch < 0 || microbatch >= shape.microbatches)
      throw Error(who() + ": micro-batch " + std::to_string(microbatch) + " is outside 0.." +
                  std::to_string(shape.microbatches - 1));
  }

  void send(int64_t kind, const torch::Tensor& t, int64_t to_stage, int64_t microbatch) {
    check_stage(to_stage, "destination", kind, microbatch);
    const int64_t from_stage = kind == Activation ? to_stage - 1 : to_stage + 1;
    check_stage(from_stage, "source", kind, microbatch);
    if (!t.defined())
      throw Error(who() + ": sending " + describe(kind, microbatch, from_stage, to_stage) +
                  ", but the tensor is undefined (a gradient that backward never computed: does the input "
                  "require grad?)");
    // Data only: whatever is sent leaves the autograd graph here, as it would on the wire.
    torch::Tensor data = t.detach().to(options).contiguous();
    const int64_t dst = rank_of_stage(shape, to_stage);
    if (dst == rank) {
      auto key = std::make_tuple(kind, microbatch, to_stage);
      if (local.count(key)) throw Error(who() + ": " + describe(kind, microbatch, from_stage, to_stage) + " was sent twice");
      local[key] = data.clone();  // the receiver owns its copy, as after a real transfer
      return;
    }
    Pending p;
    p.buffer = data;
    p.what = describe(kind, microbatch, from_stage, to_stage) + " (rank " + std::to_string(dst) + ")";
    p.work = dist::send_async(p.buffer, world[static_cast<size_t>(dst)], tag(kind, microbatch, to_stage),
                              channel_to(kind, dst));
    sends.push_back(std::move(p));
    release_finished_sends();
  }

  // Lets go of the buffers of sends that have finished, so a stage holds only what is still
  // on its way (else a rank would keep every output it sent until the end of the batch,
  // and 1F1B's memory would grow with m after all). A failed send is reported here.
  void release_finished_sends() {
    auto done = std::stable_partition(sends.begin(), sends.end(), [](Pending& p) { return !p.work.completed(); });
    for (auto it = done; it != sends.end(); ++it) wait_for(*it);
    sends.erase(done, sends.end());
  }

  void wait_for(Pending& p) {
    try {
      p.work.wait();
    } catch (const dist::CommError& e) {
      throw dist::CommError(who() + ": " + p.what + " was never received:\n  " + e.what());
    }
  }

  torch::Tensor recv(int64_t kind, int64_t from_stage, int64_t microbatch, const std::vector<int64_t>& shape_) {
    check_stage(from_stage, "source", kind, microbatch);
    const int64_t to_stage = destination(kind, from_stage);
    check_stage(to_stage, "destination", kind, microbatch);
    const int64_t src = rank_of_stage(shape, from_stage);
    if (src == rank) {
      auto it = local.find(std::make_tuple(kind, microbatch, to_stage));
      if (it == local.end())
        throw Error(who() + ": stage " + std::to_string(to_stage) + " needs " +
                    describe(kind, microbatch, from_stage, to_stage) +
                    ", which was never sent: stage " + std::to_string(from_stage) + " has not run its " +
                    (kind == Activation ? "forward" : "backward") + " of micro-batch " + std::to_string(microbatch) +
                    " yet (check the schedule's order), or it did not send");
      torch::Tensor t = std::move(it->second);
      local.erase(it);
      if (t.sizes() != c10::IntArrayRef(shape_))
        throw Error(who() + ": " + describe(kind, microbatch, from_stage, to_stage) + " has shape " +
                    shape_string(t.sizes()) + " but " + shape_string(shape_) + " was expected");
      return t;
    }
    torch::Tensor buffer = torch::empty(shape_, options);
    try {
      dist::recv_async(buffer, world[static_cast<size_t>(src)], tag(kind, microbatch, to_stage), channel_from(kind, src))
          .wait();
      release_finished_sends();
    } catch (const dist::CommError& e) {
      throw dist::CommError(who() + " (stage " + std::to_string(to_stage) + ") waited for " +
                            describe(kind, microbatch, from_stage, to_stage) + " on rank " + std::to_string(src) +
                            " in vain:\n  " + e.what());
    }
    return buffer;
  }

  void finish() {
    std::vector<Pending> pending = std::move(sends);
    sends.clear();
    for (auto& p : pending) wait_for(p);
    if (!local.empty()) {
      const auto [kind, microbatch, to_stage] = local.begin()->first;  // a copy: cleared below
      const int64_t n = static_cast<int64_t>(local.size());
      local.clear();
      throw Error(who() + ": " + std::to_string(n) + " message(s) between this rank's own stages were sent but "
                  "never received, e.g. " + describe(kind, microbatch, kind == Activation ? to_stage - 1 : to_stage + 1,
                                                      to_stage) +
                  ": every forward needs its backward, on every stage");
    }
  }
};

P2P::P2P(const PipelineShape& shape, int64_t rank, torch::TensorOptions options)
    : P2P(shape, rank, options, {}) {}

P2P::P2P(const PipelineShape& shape, int64_t rank, torch::TensorOptions options, std::vector<int> world_ranks)
    : impl_(new Impl) {
  if (shape.ranks < 1 || shape.microbatches < 1 || shape.virtual_chunks < 1)
    throw Error("P2P: the pipeline needs at least 1 rank, 1 micro-batch and 1 chunk per rank");
  if (rank < 0 || rank >= shape.ranks)
    throw Error("P2P: rank " + std::to_string(rank) + " is outside 0.." + std::to_string(shape.ranks - 1));
  if (world_ranks.empty()) {  // the pipeline is the world
    if (shape.ranks > 1 && (!dist::is_initialized() || dist::get_world_size() != shape.ranks))
      throw Error("P2P: a pipeline of " + std::to_string(shape.ranks) +
                  " ranks needs a process group of that size (dist::init_process_group first)");
    for (int r = 0; r < shape.ranks; ++r) world_ranks.push_back(r);
  } else if (static_cast<int64_t>(world_ranks.size()) != shape.ranks) {
    throw Error("P2P: " + std::to_string(world_ranks.size()) + " world ranks given for a pipeline of " +
                std::to_string(shape.ranks) + " ranks");
  } else if (shape.ranks > 1 && !dist::is_initialized()) {
    throw Error("P2P: a pipeline of " + std::to_string(shape.ranks) + " ranks needs dist::init_process_group first");
  }
  impl_->shape = shape;
  impl_->rank = rank;
  impl_->world = std::move(world_ranks);
  impl_->options = options;
  if (shape.ranks > 1) impl_->open_channels();  // collective: every rank builds its P2P at the same point
}

P2P::~P2P() {
  // Sends still in flight here mean the batch failed and the process is on its way out.
  // Their buffers may still be read by the backend's threads: leave them to the OS rather
  // than free them under a transfer.
  if (!impl_->sends.empty()) {
    static auto* abandoned = new std::vector<Impl::Pending>();
    for (auto& p : impl_->sends) abandoned->push_back(std::move(p));
  }
  delete impl_;
}

void P2P::send(int64_t kind, const torch::Tensor& t, int64_t to_stage, int64_t microbatch) {
  impl_->send(kind, t, to_stage, microbatch);
  ++sent_;
}

torch::Tensor P2P::recv(int64_t kind, int64_t from_stage, int64_t microbatch, const std::vector<int64_t>& shape) {
  const auto t0 = std::chrono::steady_clock::now();
  auto t = impl_->recv(kind, from_stage, microbatch, shape);
  const auto t1 = std::chrono::steady_clock::now();
  recv_seconds_ += std::chrono::duration<double>(t1 - t0).count();
  const auto since_epoch = [](auto t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); };
  recv_spans_.emplace_back(since_epoch(t0), since_epoch(t1));
  ++received_;
  return t;
}

std::vector<std::pair<double, double>> P2P::take_recv_spans() {
  std::vector<std::pair<double, double>> out;
  out.swap(recv_spans_);
  return out;
}

void P2P::send_activation(const torch::Tensor& t, int64_t to_stage, int64_t microbatch) {
  send(Activation, t, to_stage, microbatch);
}

torch::Tensor P2P::recv_activation(int64_t from_stage, int64_t microbatch, const std::vector<int64_t>& shape) {
  return recv(Activation, from_stage, microbatch, shape);
}

void P2P::send_gradient(const torch::Tensor& t, int64_t to_stage, int64_t microbatch) {
  send(Gradient, t, to_stage, microbatch);
}

torch::Tensor P2P::recv_gradient(int64_t from_stage, int64_t microbatch, const std::vector<int64_t>& shape) {
  return recv(Gradient, from_stage, microbatch, shape);
}

void P2P::finish() { impl_->finish(); }

// ---- NCCL's in-order matching, checked on the schedule -----------------------------

void check_in_order_delivery(const Schedules& schedules, const PipelineShape& shape) {
  using Message = std::tuple<int64_t, int64_t, int64_t>;  // kind, micro-batch, destination stage
  const int64_t p = shape.ranks, S = shape.stages();
  if (static_cast<int64_t>(schedules.size()) != p)
    throw Error("check_in_order_delivery: " + std::to_string(schedules.size()) + " rank schedules for " +
                std::to_string(p) + " ranks");
  // sent[a][b] / received[a][b]: messages from rank a to rank b, in issue order.
  std::vector<std::vector<std::vector<Message>>> sent(p, std::vector<std::vector<Message>>(p)), received = sent;
  for (int64_t r = 0; r < p; ++r) {
    for (const Action& a : schedules[static_cast<size_t>(r)]) {
      const int64_t s = virtual_stage(shape, r, a.chunk), i = a.microbatch;
      auto other = [&](int64_t stage) { return stage >= 0 && stage < S && rank_of_stage(shape, stage) != r; };
      if (a.op == Op::Forward) {
        if (other(s - 1)) received[rank_of_stage(shape, s - 1)][r].push_back({Activation, i, s});
        if (other(s + 1)) sent[r][rank_of_stage(shape, s + 1)].push_back({Activation, i, s + 1});
      } else {
        if (other(s + 1)) received[rank_of_stage(shape, s + 1)][r].push_back({Gradient, i, s});
        if (other(s - 1)) sent[r][rank_of_stage(shape, s - 1)].push_back({Gradient, i, s - 1});
      }
    }
  }
  auto name = [](const Message& m) {
    const auto& [kind, i, to] = m;
    return std::string(kind_name(kind)) + " of micro-batch " + std::to_string(i) + " for stage " + std::to_string(to);
  };
  for (int64_t a = 0; a < p; ++a)
    for (int64_t b = 0; b < p; ++b) {
      const auto& out = sent[a][b];
      const auto& in = received[a][b];
      for (size_t k = 0; k < std::min(out.size(), in.size()); ++k)
        if (out[k] != in[k])
          throw Error("NCCL matches messages in order, but rank " + std::to_string(a) + " sends the " + name(out[k]) +
                      " to rank " + std::to_string(b) + " where rank " + std::to_string(b) + " expects the " +
                      name(in[k]) + " (message " + std::to_string(k) +
                      " between them): reorder the schedule, or use --backend gloo, which matches by tag");
      if (out.size() != in.size())
        throw Error("rank " + std::to_string(a) + " sends " + std::to_string(out.size()) + " messages to rank " +
                    std::to_string(b) + " but rank " + std::to_string(b) + " receives " + std::to_string(in.size()));
    }
}

}  // namespace kit::pp
