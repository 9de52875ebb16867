// Worker processes and the rendezvous they meet at. See launch.h.
#include "dist/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "dist/detail.h"
#include "dist/dist.h"
#include "kit/errors.h"

extern char** environ;

namespace kit {

// ---------------------------------------------------------------- detect_world

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

int env_int(const char* name, const std::string& value, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0' || errno != 0 || v < lo || v > hi)
    throw Error(std::string(name) + "='" + value + "' is not a whole number in " + std::to_string(lo) + ".." +
                std::to_string(hi));
  return static_cast<int>(v);
}

int port_from_env(const char* name, const std::string& value) { return env_int(name, value, 1, 65535); }

}  // namespace

std::string WorldInfo::launcher_name() const {
  switch (launcher) {
    case Launcher::Kit: return "kit";
    case Launcher::Torchrun: return "torchrun";
    case Launcher::Slurm: return "srun";
    case Launcher::None: break;
  }
  return "none";
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at the first comma outside brackets.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    first += c;
  }
  const auto lb = first.find('[');
  if (lb == std::string::npos) return first;
  // prefix[003-004,007]suffix -> prefix003suffix (the first number of the first range)
  const auto rb = first.find(']', lb);
  std::string inside = first.substr(lb + 1, rb == std::string::npos ? std::string::npos : rb - lb - 1);
  const auto stop = inside.find_first_of("-,");
  std::string suffix = rb == std::string::npos ? "" : first.substr(rb + 1);
  return first.substr(0, lb) + inside.substr(0, stop) + suffix;
}

WorldInfo detect_world() {
  WorldInfo w;
  if (auto rank = env("RANK")) {
    auto world = env("WORLD_SIZE");
    if (!world)
      throw Error("RANK is set but WORLD_SIZE is not: set both (as torchrun does) or neither to let the kit "
                  "start the workers");
    w.world_size = env_int("WORLD_SIZE", *world, 1, 1 << 20);
    w.rank = env_int("RANK", *rank, 0, w.world_size - 1);
    w.local_rank = env("LOCAL_RANK") ? env_int("LOCAL_RANK", *env("LOCAL_RANK"), 0, 1 << 20) : w.rank;
    w.launcher = env("KIT_STORE_HOSTED") == std::optional<std::string>("1") ? WorldInfo::Launcher::Kit
                                                                             : WorldInfo::Launcher::Torchrun;
    w.rendezvous.master_addr = env("MASTER_ADDR").value_or("127.0.0.1");
    auto port = env("MASTER_PORT");
    if (!port)
      throw Error("RANK and WORLD_SIZE are set but MASTER_PORT is not: export MASTER_PORT=<port> on every rank "
                  "(torchrun sets it for you)");
    w.rendezvous.master_port = port_from_env("MASTER_PORT", *port);
    return w;
  }
  // Inside an srun step (SLURM_STEP_ID is set there, not in a batch script itself, whose
  // SLURM_NTASKS describes the allocation, not a running step).
  auto procid = env("SLURM_PROCID"), ntasks = env("SLURM_NTASKS");
  if (procid && ntasks && (env("SLURM_STEP_ID") || env("SLURM_STEPID"))) {
    w.launcher = WorldInfo::Launcher::Slurm;
    w.world_size = env_int("SLURM_NTASKS", *ntasks, 1, 1 << 20);
    if (w.world_size == 1) return WorldInfo{};  // srun -n 1: this one task starts the workers itself
    w.rank = env_int("SLURM_PROCID", *procid, 0, w.world_size - 1);
    w.local_rank = env("SLURM_LOCALID") ? env_int("SLURM_LOCALID", *env("SLURM_LOCALID"), 0, 1 << 20) : 0;
    if (auto addr = env("MASTER_ADDR")) {
      w.rendezvous.master_addr = *addr;
    } else {
      // Rank 0 runs on the first node of the step and serves the store there. (Not
      // SLURM_LAUNCH_NODE_IPADDR: from a login node that is where srun runs, not rank 0.)
      auto nodes = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST") : env("SLURM_NODELIST");
      auto nnodes = env("SLURM_STEP_NUM_NODES") ? env("SLURM_STEP_NUM_NODES") : env("SLURM_NNODES");
      if (nnodes == std::optional<std::string>("1"))
        w.rendezvous.master_addr = "127.0.0.1";
      else if (nodes)
        w.rendezvous.master_addr = first_slurm_host(*nodes);
      else if (auto ip = env("SLURM_LAUNCH_NODE_IPADDR"))
        w.rendezvous.master_addr = *ip;
      else
        throw Error("under srun but neither MASTER_ADDR nor SLURM_NODELIST is set: export MASTER_ADDR=<rank 0's host>");
    }
    if (auto port = env("MASTER_PORT")) {
      w.rendezvous.master_port = port_from_env("MASTER_PORT", *port);
    } else if (auto job = env("SLURM_JOB_ID")) {
      w.rendezvous.master_port = 20000 + static_cast<int>(std::strtoul(job->c_str(), nullptr, 10) % 20000);
    } else {
      throw Error("under srun but neither MASTER_PORT nor SLURM_JOB_ID is set: export MASTER_PORT=<free port>");
    }
    return w;
  }
  return w;
}

int choose_port(int flag_port) {
  if (flag_port < 0 || flag_port > 65535)
    throw Error("--port " + std::to_string(flag_port) + " is not in 0..65535 (0 picks a free port)");
  if (flag_port > 0) return flag_port;
  if (auto p = env("MASTER_PORT")) return env_int("MASTER_PORT", *p, 0, 65535);
  return 0;
}

// ------------------------------------------------------------ RendezvousServer

struct RendezvousServer::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

RendezvousServer::RendezvousServer(int port, std::string addr) : impl_(std::make_unique<Impl>()) {
  if (port < 0 || port > 65535) throw Error("port " + std::to_string(port) + " is not in 0..65535");
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = true;
  o.waitWorkers = false;  // the workers only talk to each other through it
  o.timeout = dist::timeout_from_env();
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(addr, o);
  } catch (const std::exception& e) {
    if (dist::is_address_in_use(e.what())) throw Error(dist::port_in_use_message(port, "the launcher"));
    throw Error("the launcher could not serve the rendezvous on port " + std::to_string(port) + ": " +
                dist::first_line(e.what()));
  }
  rdzv_.master_addr = std::move(addr);
  rdzv_.master_port = impl_->store->getPort();
}

RendezvousServer::~RendezvousServer() = default;

// --------------------------------------------------------------------- Process

Command this_program() {
  // /proc/self/cmdline holds the arguments NUL-separated; /proc/self/exe is this binary
  // even when argv[0] is a relative path or the program was started through $PATH.
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Command c;
  std::string cur;
  for (char ch : all) {
    if (ch == '\0') {
      c.argv.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) c.argv.push_back(cur);
  if (c.argv.empty()) throw Error("cannot read this program's command line from /proc/self/cmdline");
  return c;
}

Process::Process(int rank, int world_size, const Rendezvous& rdzv)
    : cmd_(this_program()), self_(true), rank_(rank) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw Error("Process: rank " + std::to_string(rank) + " is not in 0.." + std::to_string(world_size - 1));
  if (rdzv.master_port < 1 || rdzv.master_port > 65535)
    throw Error("Process: the rendezvous has no port yet (got " + std::to_string(rdzv.master_port) +
                "): start a RendezvousServer first and pass its rendezvous()");
  cmd_.env = {{"RANK", std::to_string(rank)},
              {"WORLD_SIZE", std::to_string(world_size)},
              {"LOCAL_RANK", std::to_string(rank)},
              {"LOCAL_WORLD_SIZE", std::to_string(world_size)},
              {"MASTER_ADDR", rdzv.master_addr},
              {"MASTER_PORT", std::to_string(rdzv.master_port)},
              {"KIT_STORE_HOSTED", "1"}};
}

Process::Process(Command cmd, int rank) : cmd_(std::move(cmd)), self_(cmd_.argv.empty()), rank_(rank) {
  if (self_) cmd_.argv = this_program().argv;
}

Process::Process(Process&& o) noexcept
    : cmd_(std::move(o.cmd_)), self_(o.self_), rank_(o.rank_), pid_(o.pid_), exitcode_(o.exitcode_) {
  o.pid_ = -1;
}

Process& Process::operator=(Process&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0 && !exitcode_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
    }
    cmd_ = std::move(o.cmd_);
    self_ = o.self_;
    rank_ = o.rank_;
    pid_ = o.pid_;
    exitcode_ = o.exitcode_;
    o.pid_ = -1;
  }
  return *this;
}

Process::~Process() {
  if (pid_ > 0 && !exitcode_) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

void Process::start() {
  if (pid_ > 0) throw Error("Process for rank " + std::to_string(rank_) + " was started twice");
  // Everything the child needs is built here: between fork and exec a child of a
  // multi-threaded parent may only make async-signal-safe calls (no malloc, no setenv).
  std::vector<std::string> envs;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    const std::string key = kv.substr(0, kv.find('='));
    const bool replaced = std::any_of(cmd_.env.begin(), cmd_.env.end(), [&](const auto& p) { return p.first == key; });
    if (!replaced) envs.push_back(kv);
  }
  for (const auto& [k, v] : cmd_.env) envs.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : envs) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& s : cmd_.argv) argv.push_back(s.data());
  argv.push_back(nullptr);
  // Our own program is exec'ed through /proc/self/exe; other commands by path or $PATH.
  const std::string exe = self_ ? "/proc/self/exe" : cmd_.argv[0];
  int out_fd = -1;
  if (!cmd_.output.empty()) {
    out_fd = ::open(cmd_.output.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0) throw Error("cannot open " + cmd_.output + " for a child's output: " + std::strerror(errno));
  }
  const pid_t parent = ::getpid();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    if (out_fd >= 0) ::close(out_fd);
    throw Error(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // Die with the parent. PDEATHSIG would be missed if the parent died before prctl,
    // hence the getppid check right after it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(128 + SIGKILL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (out_fd >= 0) {
      ::dup2(out_fd, 1);
      ::dup2(out_fd, 2);
    }
    if (exe.find('/') != std::string::npos)
      ::execve(exe.c_str(), argv.data(), envp.data());
    else
      ::execvpe(exe.c_str(), argv.data(), envp.data());
    const char msg[] = "error: could not exec the worker program\n";
    ssize_t ignored = ::write(2, msg, sizeof msg - 1);
    (void)ignored;
    ::_exit(127);
  }
  if (out_fd >= 0) ::close(out_fd);
  pid_ = pid;
}

void Process::reap(int status) {
  if (WIFEXITED(status))
    exitcode_ = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    exitcode_ = -WTERMSIG(status);
  else
    exitcode_ = -1;
}

bool Process::poll() {
  if (pid_ <= 0) return false;
  if (exitcode_) return true;
  int st = 0;
  pid_t r;
  while ((r = ::waitpid(pid_, &st, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r == pid_) {
    reap(st);
    return true;
  }
  if (r < 0) {  // not our child any more (someone else reaped it)
    exitcode_ = -1;
    return true;
  }
  return false;
}

void Process::join() {
  if (pid_ <= 0) throw Error("Process for rank " + std::to_string(rank_) + " joined before start()");
  if (exitcode_) return;
  int st = 0;
  pid_t r;
  while ((r = ::waitpid(pid_, &st, 0)) < 0 && errno == EINTR) {
  }
  if (r == pid_)
    reap(st);
  else
    exitcode_ = -1;
}

bool Process::join_for(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) throw Error("Process for rank " + std::to_string(rank_) + " joined before start()");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!poll()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

bool Process::running() { return pid_ > 0 && !poll(); }

void Process::kill(int signal) {
  if (pid_ > 0 && !exitcode_) ::kill(pid_, signal);
}

std::string Process::describe_exit() const {
  if (pid_ <= 0) return "was never started";
  if (!exitcode_) return "is still running";
  const int c = *exitcode_;
  if (c == 0) return "exited normally";
  if (c == 127) return "exited with status 127 (the program could not be started)";
  if (c == dist::kExitPeerLost) return "stopped after losing contact with another rank (status " + std::to_string(c) + ")";
  if (c > 0) return "exited with status " + std::to_string(c);
  const char* name = ::strsignal(-c);
  return "was killed by signal " + std::to_string(-c) + (name ? std::string(" (") + name + ")" : "");
}

void join_all(std::vector<Process>& procs) {
  auto failed = [](const Process& p) { return p.exitcode() && *p.exitcode() != 0; };
  for (;;) {
    bool all_done = true, any_failed = false;
    for (auto& p : procs) {
      if (!p.poll()) all_done = false;
      if (failed(p)) any_failed = true;
    }
    if (any_failed) break;
    if (all_done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // A failing rank usually takes its peers down with it within milliseconds. Give them
  // a moment to exit on their own, so the report can tell the rank that failed first
  // (any status but kExitPeerLost) from the ranks that only lost it; then stop the rest.
  const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < grace) {
    bool all_done = true;
    for (auto& p : procs) all_done = p.poll() && all_done;
    if (all_done) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<const Process*> primary, secondary;
  for (auto& p : procs) {
    if (!p.poll()) continue;
    if (failed(p)) (*p.exitcode() == dist::kExitPeerLost ? secondary : primary).push_back(&p);
  }
  std::vector<int> stopped;
  for (auto& p : procs) {
    if (!p.poll()) {
      p.kill(SIGKILL);
      p.join();
      stopped.push_back(p.rank());
    }
  }
  if (primary.empty()) primary.swap(secondary);
  std::string msg = "worker rank " + std::to_string(primary.front()->rank()) + " " + primary.front()->describe_exit();
  for (size_t i = 1; i < primary.size(); ++i)
    msg += "; rank " + std::to_string(primary[i]->rank()) + " " + primary[i]->describe_exit();
  for (const auto* p : secondary) msg += "; rank " + std::to_string(p->rank()) + " " + p->describe_exit();
  if (!stopped.empty()) {
    msg += "; stopped rank";
    msg += stopped.size() > 1 ? "s" : "";
    for (size_t i = 0; i < stopped.size(); ++i) msg += (i ? ", " : " ") + std::to_string(stopped[i]);
  }
  msg += ". The failing rank's own error is printed above.";
  throw Error(msg);
}

}  // namespace kit
