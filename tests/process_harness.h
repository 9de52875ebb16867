// The tests' process harness, shared by every suite that starts processes: temporary
// directories, running a program with a deadline, free ports, and finding processes a test
// left behind. Every test helper of tests/ lives in namespace kit_test.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "dist/launch.h"
#include "temp_dir.h"

namespace kit_test {
namespace fs = std::filesystem;

struct RunResult {
  int exitcode = -1;      // -N: killed by signal N
  bool timed_out = false;
  double seconds = 0;
  std::string output;     // stdout and stderr together
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Runs argv with extra environment entries; kills it after `timeout_s` seconds.
inline RunResult run(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
                     const std::string& log_path, double timeout_s) {
  kit::Command cmd;
  cmd.argv = argv;
  cmd.env = env;
  cmd.output = log_path;
  kit::Process p(cmd);
  const auto t0 = std::chrono::steady_clock::now();
  p.start();
  RunResult r;
  if (!p.join_for(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)))) {
    r.timed_out = true;
    p.kill(SIGKILL);
    p.join();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.exitcode = p.exitcode().value_or(-1);
  r.output = read_file(log_path);
  return r;
}

// Runs one of the kit's programs under a deadline, with the launch variables cleared unless
// `env` sets them (a test may itself run under srun or torchrun), one thread, and a short
// communication timeout, so that a rank left waiting fails in seconds, not at ctest's deadline.
inline RunResult run_kit_program(const std::vector<std::string>& argv, const std::string& log,
                                 std::vector<std::pair<std::string, std::string>> env = {}, double timeout_s = 60,
                                 const std::string& dist_timeout = "10") {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "KIT_STORE_HOSTED",
                        "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_ID", "SLURM_STEPID"}) {
    bool given = false;
    for (const auto& e : env) given = given || e.first == v;
    if (!given && std::getenv(v)) env.push_back({v, ""});  // empty counts as unset
  }
  env.push_back({"KIT_DIST_TIMEOUT", dist_timeout});
  env.push_back({"OMP_NUM_THREADS", "1"});
  return run(argv, env, log, timeout_s);
}

// A run's exit, duration and output, for a failed expectation's message.
inline std::string describe_run(const RunResult& r) {
  std::ostringstream s;
  s << "exit code " << r.exitcode << (r.timed_out ? " (killed at the deadline)" : "") << " after " << r.seconds
    << " s; output:\n" << r.output;
  return s.str();
}

// A port nobody listens on right now (the kernel's choice for port 0).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Holds a port: a socket listening on it for as long as this object lives.
class BusyPort {
 public:
  BusyPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = 0;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 4);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~BusyPort() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Live (non-zombie) processes whose command line contains `marker`, e.g. a test's own
// temporary directory: what a test would have left behind.
inline std::vector<std::string> processes_mentioning(const std::string& marker) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(::getpid())) continue;
    std::string cmdline = read_file("/proc/" + pid + "/cmdline");
    for (auto& c : cmdline)
      if (c == '\0') c = ' ';
    if (cmdline.find(marker) == std::string::npos) continue;
    const std::string stat = read_file("/proc/" + pid + "/stat");
    const auto rp = stat.rfind(')');
    if (rp != std::string::npos && rp + 2 < stat.size() && stat[rp + 2] == 'Z') continue;  // exited, not reaped
    found.push_back(pid + ": " + cmdline);
  }
  return found;
}

// Waits up to `seconds` for every process mentioning `marker` to go away.
inline std::vector<std::string> leftovers_after(const std::string& marker, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  auto left = processes_mentioning(marker);
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    ::usleep(50'000);
    left = processes_mentioning(marker);
  }
  return left;
}

inline std::string join_lines(const std::vector<std::string>& v) {
  std::ostringstream s;
  for (const auto& x : v) s << "\n  " << x;
  return s.str();
}

// A rank's --save / --save-grads file (torch::pickle_save of a dict of tensors), by key;
// empty when the file is missing or empty.
inline std::map<std::string, torch::Tensor> load_rank_file(const std::string& path) {
  const std::string bytes = read_file(path);
  std::map<std::string, torch::Tensor> out;
  if (bytes.empty()) return out;
  auto dict = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
  for (const auto& item : dict) out[item.key().toStringRef()] = item.value().toTensor();
  return out;
}

}  // namespace kit_test
