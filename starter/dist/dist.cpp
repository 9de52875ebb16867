// The process group behind kit::dist: a c10d TCP store for the rendezvous and a
// c10d Gloo or NCCL backend for the collectives. See dist.h for the contract.
#include "dist/dist.h"

#include <torch/torch.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if KIT_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if KIT_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "dist/detail.h"
#include "kit/compat.h"
#include "kit/errors.h"

namespace kit::dist {

// One counter set: the process's totals and each group's own. Not in the anonymous namespace:
// Group::State (declared in dist.h) holds one.
struct AtomicCounters {
  std::atomic<int64_t> all_reduce_calls{0}, all_reduce_bytes{0}, all_gather_calls{0}, all_gather_bytes{0},
      broadcast_calls{0}, broadcast_bytes{0}, send_bytes{0}, recv_bytes{0}, barrier_calls{0},
      comm_ns{0};
  Counters get() const {
    Counters c;
    c.all_reduce_calls = all_reduce_calls;
    c.all_reduce_bytes = all_reduce_bytes;
    c.all_gather_calls = all_gather_calls;
    c.all_gather_bytes = all_gather_bytes;
    c.broadcast_calls = broadcast_calls;
    c.broadcast_bytes = broadcast_bytes;
    c.send_bytes = send_bytes;
    c.recv_bytes = recv_bytes;
    c.barrier_calls = barrier_calls;
    c.comm_seconds = static_cast<double>(comm_ns.load()) * 1e-9;
    return c;
  }
  void reset() {
    for (auto* a : {&all_reduce_calls, &all_reduce_bytes, &all_gather_calls, &all_gather_bytes, &broadcast_calls,
                    &broadcast_bytes, &send_bytes, &recv_bytes, &barrier_calls, &comm_ns})
      *a = 0;
  }
};

namespace {

using Backend = c10::intrusive_ptr<compat::C10dBackend>;
// Makes one more backend of the world's kind for (group rank, group size) on a store.
using MakeBackend = std::function<Backend(const c10::intrusive_ptr<c10d::Store>&, int rank, int size)>;

}  // namespace

struct Group::State {
  std::string name;
  std::vector<int> ranks;  // the world rank of each group rank
  int rank = -1;           // this process's group rank; -1: not a member
  Backend backend;         // null for a non-member, and after destroy_process_group
  AtomicCounters counters;
};

namespace {

using State = Group::State;

struct World {
  c10::intrusive_ptr<c10d::Store> store;
  MakeBackend make_backend;
  std::shared_ptr<State> world;
  std::vector<std::shared_ptr<State>> channels;  // channel k is channels[k - 1]
  std::map<std::string, int> channel_ids;
  std::map<std::string, std::shared_ptr<State>> groups;  // new_group's, by name
  std::string backend_name;
  int rank = 0;
  int world_size = 1;
  torch::Device device = torch::kCPU;
  std::chrono::milliseconds timeout{0};
};

// One world per process, as torch.distributed's default group. It lives on the heap and
// is only freed by destroy_process_group: a group still alive at exit is left to the OS
// rather than torn down while LibTorch's own statics are being destroyed.
World* g_world = nullptr;
std::mutex g_mutex;
AtomicCounters g_total;  // every group's traffic

bool staged_through_host() { return g_world && g_world->backend_name == "gloo" && g_world->device.is_cuda(); }

// Counts on the group and in the process's totals.
void count(State& s, std::atomic<int64_t> AtomicCounters::*field, int64_t n) {
  s.counters.*field += n;
  g_total.*field += n;
}

// Adds the time since t0 to comm_seconds, on scope exit (failed waits count too).
struct CommTimer {
  State& s;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~CommTimer() {
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    count(s, &AtomicCounters::comm_ns, ns);
  }
};

int64_t nbytes(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

World& world(const char* what) {
  if (!g_world)
    throw Error(std::string("dist::") + what +
                " called before dist::init_process_group: set up the process group first "
                "(Problem 1.2 setup)");
  return *g_world;
}

std::string list(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

bool is_loopback(const std::string& addr) {
  return addr == "127.0.0.1" || addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return c10d::ReduceOp::SUM;
    case ReduceOp::MAX: return c10d::ReduceOp::MAX;
    case ReduceOp::MIN: return c10d::ReduceOp::MIN;
    case ReduceOp::PRODUCT: return c10d::ReduceOp::PRODUCT;
  }
  return c10d::ReduceOp::SUM;
}

std::string seconds(std::chrono::milliseconds t) {
  std::ostringstream s;
  s << static_cast<double>(t.count()) / 1000.0 << " s";
  return s.str();
}

// "rank 3" for the world, "rank 3 (rank 1 of group tp0 = ranks 2,3)" for a subgroup.
std::string who(const State& s) {
  std::string out = "rank " + std::to_string(g_world ? g_world->rank : -1);
  if (s.name != "world")
    out += " (rank " + std::to_string(s.rank) + " of group " + s.name + " = ranks " + list(s.ranks) + ")";
  return out;
}

std::string failure_message(const State& s, const char* what, const std::exception& e) {
  return who(s) + ": dist::" + what + " failed: " + first_line(e.what()) +
         "\n  Another rank probably exited, crashed, or stopped making the same collective calls "
         "(every member must call the same collectives in the same order). Collectives give up after " +
         seconds(g_world ? g_world->timeout : std::chrono::milliseconds(0)) + " (KIT_DIST_TIMEOUT).";
}

// Runs one c10d operation on a group to completion. A failure here almost always means
// another rank died or stopped calling the same collectives, so the message says so.
template <class Start>
void run(State& s, const char* what, Start&& start) {
  CommTimer timer{s};
  try {
    auto work = start(*s.backend);  // c10d::Work (2.x) or c10d::ProcessGroup::Work (1.13)
    work->wait();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(failure_message(s, what, e));
  }
}

// Writes a reduced buffer back into a non-contiguous tensor, without autograd seeing it
// (the tensor may be a parameter).
void copy_back(const torch::Tensor& dst, const torch::Tensor& src) {
  torch::NoGradGuard no_grad;
  dst.copy_(src);
}

// The buffer c10d is given for `t`: `t` itself, or on a Gloo rank on a GPU its host copy
// (c10d's Gloo sends and receives host memory only; the result is copied back).
torch::Tensor on_host_if_staged(const torch::Tensor& t) {
  return t.is_cuda() && staged_through_host() ? t.to(torch::kCPU) : t;
}

void check_tensor(const torch::Tensor& t, const char* what) {
  if (!t.defined())
    throw Error(std::string("dist::") + what + ": the tensor is undefined (e.g. a parameter without a gradient)");
}

c10::intrusive_ptr<c10d::Store> connect_store(const std::string& addr, int port, int rank, int world_size,
                                              std::chrono::milliseconds timeout) {
  // KIT_STORE_HOSTED=1: the kit's launcher serves the store (dist/launch.h), every rank is
  // a client. Otherwise (srun, torchrun-style) rank 0 serves it, as torch.distributed does.
  const bool hosted = env_or("KIT_STORE_HOSTED", "0") == "1";
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = !hosted && rank == 0;
  if (!hosted) o.numWorkers = static_cast<std::size_t>(world_size);
  o.waitWorkers = !hosted;
  o.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(addr, o);
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    if (o.isServer && is_address_in_use(msg)) throw Error(port_in_use_message(port, "rank 0"));
    throw Error("rank " + std::to_string(rank) + " of " + std::to_string(world_size) + ": no rendezvous at " +
                addr + ":" + std::to_string(port) + " within " + seconds(timeout) + ": " + first_line(msg) +
                "\n  Fix: start all " + std::to_string(world_size) +
                " ranks with the same MASTER_ADDR/MASTER_PORT, make sure MASTER_ADDR is reachable from every "
                "node, or raise KIT_DIST_TIMEOUT (seconds) if startup is slow.");
  }
}

// A group over `ranks` on the world's store under `prefix`: its own c10d backend when this
// process is a member (the members meet there; others do not wait).
std::shared_ptr<State> make_group(World& w, const std::string& name, const std::vector<int>& ranks,
                                  const std::string& prefix, const char* what) {
  auto s = std::make_shared<State>();
  s->name = name;
  s->ranks = ranks;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == w.rank) s->rank = static_cast<int>(i);
  if (s->rank < 0) return s;
  auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, w.store);
  try {
    s->backend = w.make_backend(store, s->rank, static_cast<int>(ranks.size()));
  } catch (const std::exception& e) {
    throw CommError("rank " + std::to_string(w.rank) + ": dist::" + what + "(\"" + name + "\") failed: " +
                    first_line(e.what()) + "\n  Every member (ranks " + list(ranks) +
                    ") must create the same groups in the same order; they did not all within " +
                    seconds(w.timeout) + " (KIT_DIST_TIMEOUT).");
  }
  return s;
}

}  // namespace

// ---------------------------------------------------------------- groups

State& Group::state(const char* what) const {
  if (!s_)
    throw Error(std::string("dist::") + what +
                ": this Group is empty (Group() is no group): make one with dist::new_group or dist::world_group()");
  if (s_->rank < 0)
    throw Error(std::string("dist::") + what + ": rank " + std::to_string(g_world ? g_world->rank : -1) +
                " is not a member of group " + s_->name + " (ranks " + list(s_->ranks) +
                "): only its members may use it (check group.is_member() first)");
  if (!s_->backend || !g_world)
    throw Error(std::string("dist::") + what + ": group " + s_->name +
                " was released by dist::destroy_process_group: create groups after init_process_group");
  return *s_;
}

bool Group::is_member() const { return s_ && s_->rank >= 0; }
int Group::rank() const { return state("Group::rank").rank; }
int Group::size() const {
  if (!s_) throw Error("dist::Group::size: this Group is empty (Group() is no group)");
  return static_cast<int>(s_->ranks.size());
}
const std::vector<int>& Group::ranks() const {
  if (!s_) throw Error("dist::Group::ranks: this Group is empty (Group() is no group)");
  return s_->ranks;
}
const std::string& Group::name() const {
  if (!s_) throw Error("dist::Group::name: this Group is empty (Group() is no group)");
  return s_->name;
}
Counters Group::counters() const {
  if (!s_) throw Error("dist::Group::counters: this Group is empty (Group() is no group)");
  return s_->counters.get();
}
void Group::reset_counters() const {
  if (!s_) throw Error("dist::Group::reset_counters: this Group is empty (Group() is no group)");
  s_->counters.reset();
}

Group world_group() { return Group(world("world_group").world); }

Group new_group(const std::vector<int>& ranks, const std::string& name_given) {
  std::lock_guard<std::mutex> lock(g_mutex);
  World& w = world("new_group");
  if (ranks.empty()) throw Error("dist::new_group: the list of ranks is empty: a group needs at least one rank");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= w.world_size)
      throw Error("dist::new_group: rank " + std::to_string(sorted[i]) + " is not in the world of " +
                  std::to_string(w.world_size) + " ranks (0.." + std::to_string(w.world_size - 1) + ")");
    if (i > 0 && sorted[i] == sorted[i - 1])
      throw Error("dist::new_group: rank " + std::to_string(sorted[i]) + " is listed twice in {" + list(ranks) + "}");
  }
  const std::string name = name_given.empty() ? list(ranks) : name_given;
  if (name == "world") throw Error("dist::new_group: \"world\" is the world's name: give the group another");
  const auto it = w.groups.find(name);
  if (it != w.groups.end()) {
    if (it->second->ranks != ranks)
      throw Error("dist::new_group: the name \"" + name + "\" is already the group of ranks " +
                  list(it->second->ranks) + ", not " + list(ranks) + ": give this group another name");
    return Group(it->second);
  }
  auto s = make_group(w, name, ranks, "kit-group/" + name + "/", "new_group");
  w.groups[name] = s;
  return Group(s);
}

std::chrono::milliseconds timeout_from_env() {
  const char* v = std::getenv("KIT_DIST_TIMEOUT");
  if (!v || !*v) return std::chrono::milliseconds(60'000);
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s > 0) || s > 86400)
    throw Error(std::string("KIT_DIST_TIMEOUT='") + v +
                "' is not a number of seconds in (0, 86400]: set it to e.g. 60, or unset it");
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
}

std::vector<std::string> available_backends() {
  std::vector<std::string> b;
#if KIT_HAVE_GLOO
  b.push_back("gloo");
#endif
#if KIT_HAVE_NCCL
  b.push_back("nccl");
#endif
  return b;
}

int cuda_device_for(int rank, int local_rank, int visible_gpus) {
  const std::string who = "rank " + std::to_string(rank) + " (local rank " + std::to_string(local_rank) + ")";
  const std::string seen = env_or("CUDA_VISIBLE_DEVICES", "");
  const std::string sees = seen.empty() ? "" : " (CUDA_VISIBLE_DEVICES=" + seen + ")";
  if (visible_gpus <= 0)
    throw Error(who + ": --backend nccl needs a CUDA GPU and this process sees none" + sees +
                ".\n  Fix: run it on a GPU node (sbatch --gres=gpu:N, or --gpus-per-task=1), or use --backend gloo.");
  if (visible_gpus == 1) return 0;  // bound to its own GPU, or the only one
  if (local_rank < visible_gpus) return local_rank;
  throw Error(who + " sees " + std::to_string(visible_gpus) + " GPUs" + sees + ", fewer than its local rank needs: " +
              "more ranks were started on this node than it has GPUs.\n  Fix: start at most " +
              std::to_string(visible_gpus) + " ranks per node (--ntasks-per-node), or bind one GPU to each task " +
              "(srun --gpus-per-task=1).");
}

// This process's rank on its node: LOCAL_RANK (torchrun, the kit's launcher), SLURM_LOCALID
// (srun), else its rank (one node).
namespace {
[[maybe_unused]] int local_rank_of(int rank) {
  return std::stoi(env_or("LOCAL_RANK", env_or("SLURM_LOCALID", std::to_string(rank))));
}
}  // namespace

torch::Device gloo_device(const char* value, int local_rank, int visible_gpus) {
  const std::string v = value ? value : "";
  if (v.empty() || v == "cpu") return torch::kCPU;
  if (v != "cuda")
    throw Error("KIT_GLOO_DEVICE='" + v + "' is neither cpu nor cuda: unset it (Gloo ranks compute on the CPU) or "
                "set it to cuda (Gloo ranks on a GPU, several may share one)");
  if (visible_gpus <= 0)
    throw Error("KIT_GLOO_DEVICE=cuda but this process sees no CUDA GPU (a CPU-only LibTorch, or no GPU "
                "visible): unset it, or run on a GPU node with a CUDA LibTorch");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % visible_gpus));
}

void init_process_group(const std::string& backend, int rank, int world_size) {
  const std::string addr = env_or("MASTER_ADDR", "127.0.0.1");
  const std::string port = env_or("MASTER_PORT", "");
  if (port.empty())
    throw Error("MASTER_PORT is not set: the ranks cannot find each other. Launch the workers with the kit's "
                "launcher (it sets it), torchrun, or srun; or export MASTER_PORT=<free port> on every rank");
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || p < 1 || p > 65535)
    throw Error("MASTER_PORT='" + port + "' is not a port number in 1..65535");
  init_process_group(backend, rank, world_size, addr, static_cast<int>(p));
}

void init_process_group(const std::string& backend, int rank, int world_size, const std::string& master_addr,
                        int master_port) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_world) throw Error("dist::init_process_group called twice: one process group per process");
  if (world_size < 1) throw Error("world_size must be >= 1 (got " + std::to_string(world_size) + ")");
  if (rank < 0 || rank >= world_size)
    throw Error("rank " + std::to_string(rank) + " is outside 0.." + std::to_string(world_size - 1));
  if (master_port < 1 || master_port > 65535)
    throw Error("master port " + std::to_string(master_port) + " is not in 1..65535");

  // A peer that dies leaves its sockets closed: the next write to one raises SIGPIPE, whose
  // default action kills this process without a word. Ignored (as Python does at startup, so
  // PyTorch never sees it), the write fails with EPIPE and the collective throws CommError.
  std::signal(SIGPIPE, SIG_IGN);

  auto g = std::make_unique<World>();
  g->rank = rank;
  g->world_size = world_size;
  g->backend_name = backend;
  g->timeout = timeout_from_env();

  std::string known;
  for (const auto& b : available_backends()) known += (known.empty() ? "" : ", ") + b;
  if (backend == "gloo") {
#if KIT_HAVE_GLOO
    g->device = gloo_device(std::getenv("KIT_GLOO_DEVICE"), local_rank_of(rank),
                            static_cast<int>(torch::cuda::device_count()));
    g->store = connect_store(master_addr, master_port, rank, world_size, g->timeout);
    auto opts = c10d::ProcessGroupGloo::Options::create(g->timeout);
    // Which network interface Gloo talks on: GLOO_SOCKET_IFNAME when set (as in PyTorch),
    // loopback when the whole world is on this machine, else this host's own address.
    const std::string ifname = env_or("GLOO_SOCKET_IFNAME", "");
    if (!ifname.empty())
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname.substr(0, ifname.find(','))));
    else if (is_loopback(master_addr))
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    g->make_backend = [opts](const c10::intrusive_ptr<c10d::Store>& store, int r, int n) {
      return Backend(c10::make_intrusive<c10d::ProcessGroupGloo>(store, r, n, opts));
    };
    try {
      g->world = std::make_shared<State>();
      g->world->backend = g->make_backend(g->store, rank, world_size);
    } catch (const std::exception& e) {
      throw Error("rank " + std::to_string(rank) + ": the Gloo backend could not connect to the other ranks: " +
                  first_line(e.what()) + "\n  Fix: make sure all " + std::to_string(world_size) +
                  " ranks are running; on several nodes set GLOO_SOCKET_IFNAME to the interface they share.");
    }
#else
    throw Error("this build of the kit has no Gloo backend (LibTorch was found without Gloo's headers): use "
                "--backend nccl on a GPU node, or rebuild with libgloo-dev installed. Available: " + known);
#endif
  } else if (backend == "nccl") {
#if KIT_HAVE_NCCL
    const int index = cuda_device_for(rank, local_rank_of(rank), static_cast<int>(torch::cuda::device_count()));
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
    g->device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
    // Blocking wait makes Work::wait() honour the timeout instead of waiting forever.
    setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
#if !KIT_NCCL_BLOCKING_WAIT_NEW_ONLY
    setenv("NCCL_BLOCKING_WAIT", "1", 0);
#endif
    g->store = connect_store(master_addr, master_port, rank, world_size, g->timeout);
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = g->timeout;
    g->make_backend = [opts](const c10::intrusive_ptr<c10d::Store>& store, int r, int n) {
      return Backend(c10::make_intrusive<c10d::ProcessGroupNCCL>(store, r, n, opts));
    };
    g->world = std::make_shared<State>();
    g->world->backend = g->make_backend(g->store, rank, world_size);
#else
    throw Error("this build of the kit has no NCCL backend (LibTorch without CUDA, or nccl.h not found at "
                "configure time): use --backend gloo. Available: " + known);
#endif
  } else {
    throw Error("unknown backend '" + backend + "': use gloo (CPU) or nccl (GPU). Available in this build: " +
                known);
  }
  g->world->name = "world";
  g->world->rank = rank;
  for (int r = 0; r < world_size; ++r) g->world->ranks.push_back(r);
  g_world = g.release();
}

bool is_initialized() { return g_world != nullptr; }
int get_rank() { return world("get_rank").rank; }
int get_world_size() { return world("get_world_size").world_size; }
std::string get_backend() { return world("get_backend").backend_name; }
torch::Device device() { return world("device").device; }

// The handle c10d returns: c10d::Work in 2.x, c10d::ProcessGroup::Work in 1.13.
using C10dWork = decltype(std::declval<compat::C10dBackend&>().allreduce(std::declval<std::vector<at::Tensor>&>()));

struct Work::Impl {
  C10dWork work;
  std::vector<torch::Tensor> tensors;  // kept alive until the operation is done
  Group group;                         // keeps the group (and `state`) alive while this runs
  State* state = nullptr;              // for the failure message
  const char* what = "";
  torch::Tensor write_back;            // staged through host: the caller's tensor, written at wait()

  // Issues one c10d operation on `contiguous` in group `s` and wraps its handle (c10d
  // returns the same Work type for all-reduce, send and recv). A failure to even start is
  // a CommError.
  // `writes`: the operation writes into the tensor (all-reduce, receive).
  template <class Issue>
  static Work start(const torch::Tensor& contiguous, const char* what, Issue&& issue, const Group& g,
                    bool writes) {
    State& s = g.state(what);
    auto impl = std::make_shared<Impl>();
    impl->tensors = {on_host_if_staged(contiguous)};
    if (writes && !impl->tensors[0].is_same(contiguous)) impl->write_back = contiguous;
    impl->what = what;
    try {
      impl->work = issue(*s.backend, impl->tensors);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw CommError(failure_message(s, what, e));
    }
    impl->group = g;
    impl->state = &s;
    Work w;
    w.impl_ = std::move(impl);  // a nested class may set its enclosing class's members
    return w;
  }

  // The one place all-reduces are counted and issued (all_reduce waits at once,
  // all_reduce_async hands the Work to its caller). counted_bytes: the caller's tensor's
  // bytes when `contiguous` is a wider copy of it (-1: contiguous's own).
  static Work start_all_reduce(const torch::Tensor& contiguous, ReduceOp op, const char* what, const Group& g,
                               int64_t counted_bytes = -1) {
    count(g.state(what), &AtomicCounters::all_reduce_calls, 1);
    count(g.state(what), &AtomicCounters::all_reduce_bytes, counted_bytes >= 0 ? counted_bytes : nbytes(contiguous));
    c10d::AllreduceOptions o;
    o.reduceOp = to_c10d(op);
    return start(contiguous, what, [&](compat::C10dBackend& b, std::vector<torch::Tensor>& v) {
      return b.allreduce(v, o);
    }, g, /*writes=*/true);
  }
};

bool Work::completed() const {
  if (!impl_) throw Error("dist::Work::completed on a Work that was never started (or already waited for)");
  return impl_->work->isCompleted();
}

void Work::wait() {
  if (!impl_) throw Error("dist::Work::wait on a Work that was never started (or already waited for)");
  auto impl = std::move(impl_);  // waited for once
  CommTimer timer{*impl->state};
  try {
    impl->work->wait();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(failure_message(*impl->state, impl->what, e));
  }
  if (impl->write_back.defined()) copy_back(impl->write_back, impl->tensors[0]);
}

namespace {
// Channel 0 is the world; channel k >= 1 the k-th open_channel.
Group channel_group(int channel, const char* what) {
  World& w = world(what);
  if (channel == 0) return Group(w.world);
  if (channel < 0 || channel > static_cast<int>(w.channels.size()))
    throw Error(std::string("dist::") + what + ": channel " + std::to_string(channel) +
                " was never opened (dist::open_channel returns the numbers that exist)");
  return Group(w.channels[static_cast<size_t>(channel - 1)]);
}

void check_peer(const State& s, int peer, const char* what, const char* role) {
  const int n = static_cast<int>(s.ranks.size());
  if (peer < 0 || peer >= n || peer == s.rank)
    throw Error(std::string("dist::") + what + ": " + role + " rank " + std::to_string(peer) +
                " is not another existing rank (this is " + who(s) + (s.name == "world" ? " of " : ", size ") +
                std::to_string(n) + ")");
}

// Gloo has no bfloat16 reduction ("Invalid scalar type"; --precision bf16 reduces a
// tensor-parallel layer's bf16 output): such a tensor is reduced as an fp32 copy.
bool gloo_cannot_reduce(const torch::Tensor& t) { return t.scalar_type() == torch::kBFloat16 && get_backend() == "gloo"; }

void check_contiguous(const torch::Tensor& t, const char* what) {
  if (!t.is_contiguous())
    throw Error(std::string("dist::") + what +
                " needs a contiguous tensor (it is read or written while you go on): pass t.contiguous()");
}
}  // namespace

void all_reduce(const torch::Tensor& tensor, ReduceOp op) { all_reduce(tensor, op, world_group()); }

void all_reduce(const torch::Tensor& tensor, ReduceOp op, const Group& group) {
  check_tensor(tensor, "all_reduce");
  if (group.is_member() && group.size() == 1) {  // a group of one has nothing to exchange:
    State& s = group.state("all_reduce");           // counted as a call, as on any group
    count(s, &AtomicCounters::all_reduce_calls, 1);
    count(s, &AtomicCounters::all_reduce_bytes, nbytes(tensor));
    return;
  }
  // Gloo and NCCL reduce dense buffers: reduce a contiguous copy and write it back; on Gloo a
  // bf16 tensor's copy is fp32, counted at the tensor's own bytes (what NCCL sends).
  const torch::Tensor buffer = on_host_if_staged(gloo_cannot_reduce(tensor) ? tensor.to(torch::kFloat32).contiguous()
                                                 : tensor.is_contiguous()   ? tensor
                                                                            : tensor.contiguous());
  Work::Impl::start_all_reduce(buffer, op, "all_reduce", group, nbytes(tensor)).wait();
  if (!buffer.is_same(tensor)) copy_back(tensor, buffer);
}

Work all_reduce_async(const torch::Tensor& tensor, ReduceOp op) { return all_reduce_async(tensor, op, world_group()); }

Work all_reduce_async(const torch::Tensor& tensor, ReduceOp op, const Group& group) {
  check_tensor(tensor, "all_reduce_async");
  if (gloo_cannot_reduce(tensor))
    throw Error("dist::all_reduce_async: Gloo reduces no bfloat16 tensor in place; reduce an fp32 copy "
                "(t.to(torch::kFloat32)), or use dist::all_reduce, which does that for you");
  if (!tensor.is_contiguous())
    throw Error("dist::all_reduce_async needs a contiguous tensor (it reduces the buffer in place while you "
                "go on): pass t.contiguous() and read the result from that");
  return Work::Impl::start_all_reduce(tensor, op, "all_reduce_async", group);
}

std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor, const Group& group) {
  check_tensor(tensor, "all_gather");
  State& s = group.state("all_gather");
  count(s, &AtomicCounters::all_gather_calls, 1);
  count(s, &AtomicCounters::all_gather_bytes, nbytes(tensor));
  std::vector<torch::Tensor> input{on_host_if_staged(tensor.contiguous())};
  std::vector<std::vector<torch::Tensor>> output(1);
  for (size_t i = 0; i < s.ranks.size(); ++i) output[0].push_back(torch::empty_like(input[0]));
  run(s, "all_gather", [&](compat::C10dBackend& b) { return b.allgather(output, input); });
  if (input[0].device() != tensor.device())
    for (auto& t : output[0]) t = t.to(tensor.device());
  return output[0];
}

void broadcast(const torch::Tensor& tensor, int src) { broadcast(tensor, src, world_group()); }

void broadcast(const torch::Tensor& tensor, int src, const Group& group) {
  check_tensor(tensor, "broadcast");
  State& s = group.state("broadcast");
  if (src < 0 || src >= static_cast<int>(s.ranks.size()))
    throw Error("dist::broadcast: src rank " + std::to_string(src) + " does not exist in " +
                (s.name == "world" ? std::string("the world") : "group " + s.name) + " of " +
                std::to_string(s.ranks.size()) + " ranks");
  count(s, &AtomicCounters::broadcast_calls, 1);
  count(s, &AtomicCounters::broadcast_bytes, nbytes(tensor));
  std::vector<torch::Tensor> v{on_host_if_staged(tensor.is_contiguous() ? tensor : tensor.contiguous())};
  c10d::BroadcastOptions o;
  o.rootRank = src;
  run(s, "broadcast", [&](compat::C10dBackend& b) { return b.broadcast(v, o); });
  if (!v[0].is_same(tensor)) copy_back(tensor, v[0]);
}

void barrier() { barrier(world_group()); }

void barrier(const Group& group) {
  State& s = group.state("barrier");
  count(s, &AtomicCounters::barrier_calls, 1);
  if (g_world->backend_name == "nccl") {
    // NCCL's barrier guesses a GPU from the rank; a one-element all-reduce on ours is exact.
    std::vector<torch::Tensor> v{torch::zeros({1}, torch::TensorOptions().device(g_world->device))};
    c10d::AllreduceOptions o;
    run(s, "barrier", [&](compat::C10dBackend& b) { return b.allreduce(v, o); });
    return;
  }
  run(s, "barrier", [&](compat::C10dBackend& b) { return b.barrier(c10d::BarrierOptions()); });
}

void send(const torch::Tensor& tensor, int dst, int tag) { send(tensor, dst, tag, world_group()); }
void recv(const torch::Tensor& tensor, int src, int tag) { recv(tensor, src, tag, world_group()); }

void send(const torch::Tensor& tensor, int dst, int tag, const Group& group) {
  check_tensor(tensor, "send");
  State& s = group.state("send");
  check_peer(s, dst, "send", "destination");
  count(s, &AtomicCounters::send_bytes, nbytes(tensor));
  std::vector<torch::Tensor> v{on_host_if_staged(tensor.contiguous())};
  run(s, "send", [&](compat::C10dBackend& b) { return b.send(v, dst, tag); });
}

void recv(const torch::Tensor& tensor, int src, int tag, const Group& group) {
  check_tensor(tensor, "recv");
  State& s = group.state("recv");
  check_peer(s, src, "recv", "source");
  count(s, &AtomicCounters::recv_bytes, nbytes(tensor));
  std::vector<torch::Tensor> v{on_host_if_staged(tensor.is_contiguous() ? tensor : tensor.contiguous())};
  run(s, "recv", [&](compat::C10dBackend& b) { return b.recv(v, src, tag); });
  if (!v[0].is_same(tensor)) copy_back(tensor, v[0]);
}

Work send_async(const torch::Tensor& tensor, int dst, int tag, int channel) {
  return send_async(tensor, dst, tag, channel_group(channel, "send_async"));
}

Work recv_async(const torch::Tensor& tensor, int src, int tag, int channel) {
  return recv_async(tensor, src, tag, channel_group(channel, "recv_async"));
}

Work send_async(const torch::Tensor& tensor, int dst, int tag, const Group& group) {
  check_tensor(tensor, "send_async");
  check_contiguous(tensor, "send_async");
  State& s = group.state("send_async");
  check_peer(s, dst, "send_async", "destination");
  count(s, &AtomicCounters::send_bytes, nbytes(tensor));
  return Work::Impl::start(tensor, "send_async", [&](compat::C10dBackend& b, std::vector<torch::Tensor>& v) {
    return b.send(v, dst, tag);
  }, group, /*writes=*/false);
}

Work recv_async(const torch::Tensor& tensor, int src, int tag, const Group& group) {
  check_tensor(tensor, "recv_async");
  check_contiguous(tensor, "recv_async");
  State& s = group.state("recv_async");
  check_peer(s, src, "recv_async", "source");
  count(s, &AtomicCounters::recv_bytes, nbytes(tensor));
  return Work::Impl::start(tensor, "recv_async", [&](compat::C10dBackend& b, std::vector<torch::Tensor>& v) {
    return b.recv(v, src, tag);
  }, group, /*writes=*/true);
}

int open_channel(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  World& w = world("open_channel");
  if (name.empty()) throw Error("dist::open_channel: give the channel a name (every rank the same)");
  const auto it = w.channel_ids.find(name);
  if (it != w.channel_ids.end()) return it->second;
  // Its own key space on the same store, so its rendezvous keys never meet the world's.
  w.channels.push_back(make_group(w, "channel " + name, w.world->ranks, "kit-channel/" + name + "/", "open_channel"));
  const int id = static_cast<int>(w.channels.size());
  w.channel_ids[name] = id;
  return id;
}

namespace {
// Drops one backend, shutting an NCCL one down first where LibTorch wants it (kit/compat.h).
void release(Backend& b) {
#if KIT_NCCL_SHUTDOWN
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(b.get())) nccl->shutdown();
#endif
  b.reset();
}
}  // namespace

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_world) return;
  std::unique_ptr<World> w(g_world);
  // Wait for the others first: with srun or torchrun rank 0 serves the store, and a rank
  // that leaves early must not pull it away from ranks still talking.
  try {
    const torch::Device on = w->backend_name == "nccl" ? w->device : torch::Device(torch::kCPU);
    std::vector<torch::Tensor> v{torch::zeros({1}, torch::TensorOptions().device(on))};
    w->world->backend->allreduce(v)->wait();
  } catch (const std::exception&) {
    // A peer is already gone: nothing left to wait for.
  }
  g_world = nullptr;
  // Handles to groups may outlive this: they see a released group (Group::state says so).
  for (auto& [name, s] : w->groups) release(s->backend);
  for (auto& s : w->channels) release(s->backend);
  release(w->world->backend);
  w->store.reset();
}

void broadcast_parameters(torch::nn::Module& model, int src) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) broadcast(p, src);
  for (auto& b : model.buffers()) broadcast(b, src);
}

Counters counters() { return g_total.get(); }

void reset_counters() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_total.reset();
  if (!g_world) return;
  g_world->world->counters.reset();
  for (auto& s : g_world->channels) s->counters.reset();
  for (auto& [name, s] : g_world->groups) s->counters.reset();
}

}  // namespace kit::dist
