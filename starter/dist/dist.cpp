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

#include <atomic>
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

namespace {

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<compat::C10dBackend> backend;
  // Makes one more backend of the same kind over the same ranks, on a store (channels).
  std::function<c10::intrusive_ptr<compat::C10dBackend>(const c10::intrusive_ptr<c10d::Store>&)> make_backend;
  std::vector<c10::intrusive_ptr<compat::C10dBackend>> channels;  // channel k is channels[k - 1]
  std::map<std::string, int> channel_ids;
  std::string backend_name;
  int rank = 0;
  int world_size = 1;
  torch::Device device = torch::kCPU;
  std::chrono::milliseconds timeout{0};
};

// One group per process, as torch.distributed's default group. It lives on the heap and
// is only freed by destroy_process_group: a group still alive at exit is left to the OS
// rather than torn down while LibTorch's own statics are being destroyed.
Group* g_group = nullptr;
std::mutex g_mutex;

std::atomic<int64_t> c_allreduce_calls{0}, c_allreduce_bytes{0}, c_bcast_calls{0}, c_bcast_bytes{0},
    c_send_bytes{0}, c_recv_bytes{0}, c_barrier_calls{0};

int64_t nbytes(const torch::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

Group& group(const char* what) {
  if (!g_group)
    throw Error(std::string("dist::") + what +
                " called before dist::init_process_group: set up the process group first "
                "(Problem 1.2 setup)");
  return *g_group;
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

std::string failure_message(const Group& g, const char* what, const std::exception& e);

// Runs one c10d operation to completion. A failure here almost always means another
// rank died or stopped calling the same collectives, so the message says so.
template <class Start>
void run(const char* what, Start&& start) {
  Group& g = group(what);
  try {
    auto work = start(*g.backend);  // c10d::Work (2.x) or c10d::ProcessGroup::Work (1.13)
    work->wait();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(failure_message(g, what, e));
  }
}

std::string failure_message(const Group& g, const char* what, const std::exception& e) {
  return "rank " + std::to_string(g.rank) + ": dist::" + what + " failed: " + first_line(e.what()) +
         "\n  Another rank probably exited, crashed, or stopped making the same collective calls "
         "(every rank must call the same collectives in the same order). Collectives give up after " +
         seconds(g.timeout) + " (KIT_DIST_TIMEOUT).";
}

// Writes a reduced buffer back into a non-contiguous tensor, without autograd seeing it
// (the tensor may be a parameter).
void copy_back(const torch::Tensor& dst, const torch::Tensor& src) {
  torch::NoGradGuard no_grad;
  dst.copy_(src);
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

}  // namespace

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
  if (g_group) throw Error("dist::init_process_group called twice: one process group per process");
  if (world_size < 1) throw Error("world_size must be >= 1 (got " + std::to_string(world_size) + ")");
  if (rank < 0 || rank >= world_size)
    throw Error("rank " + std::to_string(rank) + " is outside 0.." + std::to_string(world_size - 1));
  if (master_port < 1 || master_port > 65535)
    throw Error("master port " + std::to_string(master_port) + " is not in 1..65535");

  auto g = std::make_unique<Group>();
  g->rank = rank;
  g->world_size = world_size;
  g->backend_name = backend;
  g->timeout = timeout_from_env();

  std::string known;
  for (const auto& b : available_backends()) known += (known.empty() ? "" : ", ") + b;
  if (backend == "gloo") {
#if KIT_HAVE_GLOO
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
    g->make_backend = [rank, world_size, opts](const c10::intrusive_ptr<c10d::Store>& store) {
      return c10::intrusive_ptr<compat::C10dBackend>(
          c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, opts));
    };
    try {
      g->backend = g->make_backend(g->store);
    } catch (const std::exception& e) {
      throw Error("rank " + std::to_string(rank) + ": the Gloo backend could not connect to the other ranks: " +
                  first_line(e.what()) + "\n  Fix: make sure all " + std::to_string(world_size) +
                  " ranks are running; on several nodes set GLOO_SOCKET_IFNAME to the interface they share.");
    }
    g->device = torch::kCPU;
#else
    throw Error("this build of the kit has no Gloo backend (LibTorch was found without Gloo's headers): use "
                "--backend nccl on a GPU node, or rebuild with libgloo-dev installed. Available: " + known);
#endif
  } else if (backend == "nccl") {
#if KIT_HAVE_NCCL
    const int ndev = static_cast<int>(torch::cuda::device_count());
    const int local = std::stoi(env_or("LOCAL_RANK", env_or("SLURM_LOCALID", std::to_string(rank))));
    if (ndev == 0) throw Error("--backend nccl needs a CUDA GPU and none is visible: use --backend gloo");
    if (local >= ndev)
      throw Error("rank " + std::to_string(rank) + " has local rank " + std::to_string(local) + " but only " +
                  std::to_string(ndev) + " GPU(s) are visible: start at most one rank per GPU");
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(local));
    g->device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local));
    // Blocking wait makes Work::wait() honour the timeout instead of waiting forever.
    setenv("NCCL_BLOCKING_WAIT", "1", 0);
    setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
    g->store = connect_store(master_addr, master_port, rank, world_size, g->timeout);
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = g->timeout;
    g->make_backend = [rank, world_size, opts](const c10::intrusive_ptr<c10d::Store>& store) {
      return c10::intrusive_ptr<compat::C10dBackend>(
          c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, opts));
    };
    g->backend = g->make_backend(g->store);
#else
    throw Error("this build of the kit has no NCCL backend (LibTorch without CUDA, or nccl.h not found at "
                "configure time): use --backend gloo. Available: " + known);
#endif
  } else {
    throw Error("unknown backend '" + backend + "': use gloo (CPU) or nccl (GPU). Available in this build: " +
                known);
  }
  g_group = g.release();
}

bool is_initialized() { return g_group != nullptr; }
int get_rank() { return group("get_rank").rank; }
int get_world_size() { return group("get_world_size").world_size; }
std::string get_backend() { return group("get_backend").backend_name; }
torch::Device device() { return group("device").device; }

// The handle c10d returns: c10d::Work in 2.x, c10d::ProcessGroup::Work in 1.13.
using C10dWork = decltype(std::declval<compat::C10dBackend&>().allreduce(std::declval<std::vector<at::Tensor>&>()));

struct Work::Impl {
  C10dWork work;
  std::vector<torch::Tensor> tensors;  // kept alive until the operation is done
  const char* what = "";

  // Issues one c10d operation on `contiguous` and wraps its handle (c10d returns the same
  // Work type for all-reduce, send and recv). A failure to even start is a CommError.
  template <class Issue>
  static Work start(const torch::Tensor& contiguous, const char* what, Issue&& issue, int channel = 0) {
    Group& g = group(what);
    if (channel < 0 || channel > static_cast<int>(g.channels.size()))
      throw Error(std::string("dist::") + what + ": channel " + std::to_string(channel) +
                  " was never opened (dist::open_channel returns the numbers that exist)");
    compat::C10dBackend& backend = channel == 0 ? *g.backend : *g.channels[static_cast<size_t>(channel - 1)];
    auto impl = std::make_shared<Impl>();
    impl->tensors = {contiguous};
    impl->what = what;
    try {
      impl->work = issue(backend, impl->tensors);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw CommError(failure_message(g, what, e));
    }
    Work w;
    w.impl_ = std::move(impl);  // a nested class may set its enclosing class's members
    return w;
  }

  // The one place all-reduces are counted and issued (all_reduce waits at once,
  // all_reduce_async hands the Work to its caller).
  static Work start_all_reduce(const torch::Tensor& contiguous, ReduceOp op, const char* what) {
    c_allreduce_calls += 1;
    c_allreduce_bytes += nbytes(contiguous);
    c10d::AllreduceOptions o;
    o.reduceOp = to_c10d(op);
    return start(contiguous, what, [&](compat::C10dBackend& b, std::vector<torch::Tensor>& v) {
      return b.allreduce(v, o);
    });
  }
};

bool Work::completed() const {
  if (!impl_) throw Error("dist::Work::completed on a Work that was never started (or already waited for)");
  return impl_->work->isCompleted();
}

void Work::wait() {
  if (!impl_) throw Error("dist::Work::wait on a Work that was never started (or already waited for)");
  auto impl = std::move(impl_);  // waited for once
  try {
    impl->work->wait();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(failure_message(group(impl->what), impl->what, e));
  }
}

void all_reduce(const torch::Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce");
  // Gloo and NCCL reduce dense buffers: reduce a contiguous copy and write it back.
  const torch::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
  Work::Impl::start_all_reduce(buffer, op, "all_reduce").wait();
  if (!buffer.is_same(tensor)) copy_back(tensor, buffer);
}

Work all_reduce_async(const torch::Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce_async");
  if (!tensor.is_contiguous())
    throw Error("dist::all_reduce_async needs a contiguous tensor (it reduces the buffer in place while you "
                "go on): pass t.contiguous() and read the result from that");
  return Work::Impl::start_all_reduce(tensor, op, "all_reduce_async");
}

void broadcast(const torch::Tensor& tensor, int src) {
  check_tensor(tensor, "broadcast");
  if (src < 0 || src >= get_world_size()) throw Error("dist::broadcast: src rank " + std::to_string(src) + " does not exist");
  c_bcast_calls += 1;
  c_bcast_bytes += nbytes(tensor);
  std::vector<torch::Tensor> v{tensor.is_contiguous() ? tensor : tensor.contiguous()};
  c10d::BroadcastOptions o;
  o.rootRank = src;
  run("broadcast", [&](compat::C10dBackend& b) { return b.broadcast(v, o); });
  if (!v[0].is_same(tensor)) copy_back(tensor, v[0]);
}

void barrier() {
  Group& g = group("barrier");
  c_barrier_calls += 1;
  if (g.backend_name == "nccl") {
    // NCCL's barrier guesses a GPU from the rank; a one-element all-reduce on ours is exact.
    std::vector<torch::Tensor> v{torch::zeros({1}, torch::TensorOptions().device(g.device))};
    c10d::AllreduceOptions o;
    run("barrier", [&](compat::C10dBackend& b) { return b.allreduce(v, o); });
    return;
  }
  run("barrier", [&](compat::C10dBackend& b) { return b.barrier(c10d::BarrierOptions()); });
}

void send(const torch::Tensor& tensor, int dst, int tag) {
  check_tensor(tensor, "send");
  if (dst < 0 || dst >= get_world_size() || dst == get_rank())
    throw Error("dist::send: destination rank " + std::to_string(dst) + " is not another existing rank");
  c_send_bytes += nbytes(tensor);
  std::vector<torch::Tensor> v{tensor.contiguous()};
  run("send", [&](compat::C10dBackend& b) { return b.send(v, dst, tag); });
}

void recv(const torch::Tensor& tensor, int src, int tag) {
  check_tensor(tensor, "recv");
  if (src < 0 || src >= get_world_size() || src == get_rank())
    throw Error("dist::recv: source rank " + std::to_string(src) + " is not another existing rank");
  c_recv_bytes += nbytes(tensor);
  std::vector<torch::Tensor> v{tensor.is_contiguous() ? tensor : tensor.contiguous()};
  run("recv", [&](compat::C10dBackend& b) { return b.recv(v, src, tag); });
  if (!v[0].is_same(tensor)) copy_back(tensor, v[0]);
}

namespace {
void check_peer(int peer, const char* what, const char* role) {
  if (peer < 0 || peer >= get_world_size() || peer == get_rank())
    throw Error(std::string("dist::") + what + ": " + role + " rank " + std::to_string(peer) +
                " is not another existing rank (this is rank " + std::to_string(get_rank()) + " of " +
                std::to_string(get_world_size()) + ")");
}
void check_contiguous(const torch::Tensor& t, const char* what) {
  if (!t.is_contiguous())
    throw Error(std::string("dist::") + what +
                " needs a contiguous tensor (it is read or written while you go on): pass t.contiguous()");
}
}  // namespace

Work send_async(const torch::Tensor& tensor, int dst, int tag, int channel) {
  check_tensor(tensor, "send_async");
  check_contiguous(tensor, "send_async");
  check_peer(dst, "send_async", "destination");
  c_send_bytes += nbytes(tensor);
  return Work::Impl::start(tensor, "send_async", [&](compat::C10dBackend& b, std::vector<torch::Tensor>& v) {
    return b.send(v, dst, tag);
  }, channel);
}

Work recv_async(const torch::Tensor& tensor, int src, int tag, int channel) {
  check_tensor(tensor, "recv_async");
  check_contiguous(tensor, "recv_async");
  check_peer(src, "recv_async", "source");
  c_recv_bytes += nbytes(tensor);
  return Work::Impl::start(tensor, "recv_async", [&](compat::C10dBackend& b, std::vector<torch::Tensor>& v) {
    return b.recv(v, src, tag);
  }, channel);
}

int open_channel(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Group& g = group("open_channel");
  if (name.empty()) throw Error("dist::open_channel: give the channel a name (every rank the same)");
  const auto it = g.channel_ids.find(name);
  if (it != g.channel_ids.end()) return it->second;
  // Its own key space on the same store, so its rendezvous keys never meet the world's.
  auto store = c10::make_intrusive<c10d::PrefixStore>("kit-channel/" + name + "/", g.store);
  try {
    g.channels.push_back(g.make_backend(store));
  } catch (const std::exception& e) {
    throw CommError("rank " + std::to_string(g.rank) + ": dist::open_channel(\"" + name +
                    "\") failed: " + first_line(e.what()) +
                    "\n  Every rank must open the same channels in the same order; the others did not within " +
                    seconds(g.timeout) + " (KIT_DIST_TIMEOUT).");
  }
  const int id = static_cast<int>(g.channels.size());
  g.channel_ids[name] = id;
  return id;
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_group) return;
  std::unique_ptr<Group> g(g_group);
  // Wait for the others first: with srun or torchrun rank 0 serves the store, and a rank
  // that leaves early must not pull it away from ranks still talking.
  try {
    std::vector<torch::Tensor> v{torch::zeros({1}, torch::TensorOptions().device(g->device))};
    g->backend->allreduce(v)->wait();
  } catch (const std::exception&) {
    // A peer is already gone: nothing left to wait for.
  }
  g_group = nullptr;
  g->channels.clear();
  g->backend.reset();
  g->store.reset();
}

void broadcast_parameters(torch::nn::Module& model, int src) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) broadcast(p, src);
  for (auto& b : model.buffers()) broadcast(b, src);
}

Counters counters() {
  Counters c;
  c.all_reduce_calls = c_allreduce_calls;
  c.all_reduce_bytes = c_allreduce_bytes;
  c.broadcast_calls = c_bcast_calls;
  c.broadcast_bytes = c_bcast_bytes;
  c.send_bytes = c_send_bytes;
  c.recv_bytes = c_recv_bytes;
  c.barrier_calls = c_barrier_calls;
  return c;
}

void reset_counters() {
  c_allreduce_calls = 0;
  c_allreduce_bytes = 0;
  c_bcast_calls = 0;
  c_bcast_bytes = 0;
  c_send_bytes = 0;
  c_recv_bytes = 0;
  c_barrier_calls = 0;
}

}  // namespace kit::dist
