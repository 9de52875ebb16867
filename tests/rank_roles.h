// Multi-process tests in one test program: each rank is a copy of the program running only
// RankRole.Run with a role (a function registered by name), meeting at a store the test's
// own process serves. A suite that uses it has one file with RANK_ROLE_MAIN (see the end).
//
// Ranks run student code, so a rank is a subject (tests/judge/judge.h): a role registered with
// RANK_SUBJECT(name) records what its rank's code produced into `out`, and decides nothing; the
// case runs the ranks inside its own subject part (subject_ranks) and judges every rank's
// record in its JUDGE part, computing the expected values there. Each rank writes its record to
// a file when its role ends (or threw), which the case's subject reads back.
// RANK_ROLE(name) is the older kind of role, which checks its own results with GoogleTest
// expectations inside the rank (its exit code says whether they held): only for given code's
// tests, never for a graded case.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "process_harness.h"
#include "dist/dist.h"
#include "dist/launch.h"
#include "judge/judge.h"
#include "kit/compat.h"
#include "kit/errors.h"

namespace kit_test {
namespace fs = std::filesystem;
namespace dist = kit::dist;

// A role runs on every rank after init_process_group; `group` is the whole world; `out` is the
// rank's record.
using Role = std::function<void(const dist::Group& group, kit::judge::Record& out)>;

inline std::map<std::string, Role>& roles() {
  static std::map<std::string, Role> r;
  return r;
}

// RANK_ROLE(name) { ...body using `group`... } registers a role at static-initialisation time.
struct RegisterRole {
  RegisterRole(const std::string& name, Role role) { roles()[name] = std::move(role); }
};
#define RANK_ROLE(name)                                                                             \
  static void rank_role_##name(const ::kit::dist::Group& group);                                    \
  static ::kit_test::RegisterRole rank_register_##name(                                            \
      #name, [](const ::kit::dist::Group& g, ::kit::judge::Record&) { rank_role_##name(g); });      \
  static void rank_role_##name(const ::kit::dist::Group& group)
// RANK_SUBJECT(name) { ...body using `group` and `out`... }: a role that records, for a judge.
#define RANK_SUBJECT(name)                                                                           \
  static void rank_role_##name(const ::kit::dist::Group& group, ::kit::judge::Record& out);          \
  static ::kit_test::RegisterRole rank_register_##name(#name, rank_role_##name);                    \
  static void rank_role_##name(const ::kit::dist::Group& group, ::kit::judge::Record& out)

struct RankRun {
  std::vector<int> exitcodes;
  std::vector<std::string> logs;
  std::vector<kit::judge::Record> records;  // what each rank's role recorded (RANK_SUBJECT)
  double seconds = 0;
  std::string describe() const {
    std::string s;
    for (size_t r = 0; r < logs.size(); ++r)
      s += "\n---- rank " + std::to_string(r) + " (exit " + std::to_string(exitcodes[r]) + ") ----\n" + logs[r];
    return s;
  }
};

// The variables every rank of run_ranks gets, beside the role's own.
inline std::vector<std::pair<std::string, std::string>> rank_env(int r, int n, int port, const std::string& role,
                                                                 const std::string& records) {
  return {{"RANK", std::to_string(r)},
          {"WORLD_SIZE", std::to_string(n)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"KIT_STORE_HOSTED", "1"},
          {"KIT_DIST_TIMEOUT", "10"},
          {"OMP_NUM_THREADS", "1"},
          {"KIT_TEST_RANK_ROLE", role},
          {"KIT_RANK_RECORDS", records}};
}

// The failed expectations of the running test so far (a forked rank counts its own).
inline int failed_parts() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (!info) return 0;
  int n = 0;
  for (int i = 0; i < info->result()->total_part_count(); ++i) n += info->result()->GetTestPartResult(i).failed();
  return n;
}

// One rank: init the world, run the role, write its record (RANK_SUBJECT). Returns the exit
// status: 1 when the role threw or an expectation of it failed (RANK_ROLE).
inline int run_role(const std::string& role, int rank, int n) {
  const int failed_before = failed_parts();
  const auto it = roles().find(role);
  kit::judge::Record out;
  out.set_label(role + ", rank " + std::to_string(rank));
  try {
    if (it == roles().end()) throw kit::Error("no role " + role);
    dist::init_process_group("gloo", rank, n);
    it->second(dist::world_group(), out);
  } catch (...) {
    const auto o = kit::judge::current_exception_outcome();
    out.mark("threw", o.describe());
    ADD_FAILURE() << "rank " << rank << " " << o.describe();
  }
  if (kit::judge::role() == kit::judge::Role::kRank) kit::judge::finish_rank(out);
  // A failed rank leaves at once: its peers then fail their next collective within
  // KIT_DIST_TIMEOUT instead of waiting in the goodbye barrier.
  if (failed_parts() > failed_before) return 1;
  dist::destroy_process_group();
  return 0;
}

// A rank forked from this process: it has LibTorch and the suite loaded already, so it runs
// its role at once (an exec of the test program would start it again: 0.6 s a rank). Its
// output goes to `log`, its record to `records`; it dies with this process and never returns here.
inline pid_t fork_rank(int r, int n, const std::string& role, const std::vector<std::pair<std::string, std::string>>& env,
                       const std::string& log, const std::string& records) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;  // this process (or -1)
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) std::_Exit(125);
  ::setpgid(0, 0);  // its own group, as kit::Process gives an exec'd rank
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(fd);
  }
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  kit::judge::become_rank(records);
  int code = 1;
  try {
    code = run_role(role, r, n);
  } catch (...) {
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);  // no destructors, no atexit: they belong to the process it was forked from
}

// Runs `role` on n ranks (processes) with a short communication timeout, so that a wrong
// submission that leaves a peer waiting fails in seconds; kills them all after timeout_s.
// `env`: more variables for every rank (a role's parameters). Each rank is a fork of this
// process (KIT_FORK_RANKS, kit/compat.h: LibTorch 1.13); one that already belongs to a process
// group, or on LibTorch 2.x, execs the test program instead.
inline RankRun run_ranks(int n, const std::string& role, double timeout_s = 60,
                         const std::vector<std::pair<std::string, std::string>>& env = {}) {
  kit_test::TempDir dir("ranks_" + role);
  kit::RendezvousServer server(0);
  const int port = server.rendezvous().master_port;
  const bool by_fork = KIT_FORK_RANKS && !dist::is_initialized();
  std::vector<kit::Process> procs;
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  std::vector<std::optional<int>> codes(static_cast<size_t>(n));
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    const std::string records = dir / ("rank" + std::to_string(r) + ".rec");
    auto vars = rank_env(r, n, port, role, records);
    for (const auto& kv : env) vars.push_back(kv);
    const std::string log = dir / ("rank" + std::to_string(r) + ".log");
    if (by_fork) {
      pids[static_cast<size_t>(r)] = fork_rank(r, n, role, vars, log, records);
      if (pids[static_cast<size_t>(r)] < 0) codes[static_cast<size_t>(r)] = -1;
      continue;
    }
    kit::Command cmd;
    cmd.argv = {fs::read_symlink("/proc/self/exe").string(), "--gtest_filter=RankRole.Run"};
    cmd.env = vars;
    cmd.output = log;
    procs.emplace_back(cmd, r);
  }
  const auto deadline = t0 + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  if (by_fork) {
    bool killed = false;
    for (bool waiting = true; waiting;) {
      waiting = false;
      for (int r = 0; r < n; ++r) {
        const pid_t pid = pids[static_cast<size_t>(r)];
        if (codes[static_cast<size_t>(r)] || pid <= 0) continue;
        int status = 0;
        const pid_t got = ::waitpid(pid, &status, killed ? 0 : WNOHANG);
        if (got == 0) {
          waiting = true;
          continue;
        }
        codes[static_cast<size_t>(r)] = got < 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
      if (waiting && !killed && std::chrono::steady_clock::now() >= deadline) {
        for (int r = 0; r < n; ++r) {
          const pid_t pid = pids[static_cast<size_t>(r)];
          if (codes[static_cast<size_t>(r)] || pid <= 0) continue;
          ::kill(-pid, SIGKILL);  // its group: what it started
          ::kill(pid, SIGKILL);   // and itself, before it made the group
        }
        killed = true;
      } else if (waiting && !killed) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  } else {
    for (auto& p : procs) p.start();
    for (auto& p : procs) {
      if (!p.join_for(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())))
        p.kill(SIGKILL);
      p.join();
      codes[static_cast<size_t>(p.rank())] = p.exitcode().value_or(-1);
    }
  }
  RankRun out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < n; ++r) {
    out.exitcodes.push_back(codes[static_cast<size_t>(r)].value_or(-1));
    std::string log = kit_test::read_file(dir / ("rank" + std::to_string(r) + ".log"));
    if (log.size() > 6000) log = "[... " + std::to_string(log.size() - 6000) + " bytes left out]\n" + log.substr(log.size() - 6000);
    out.logs.push_back(log);
    std::string why;
    auto record = kit::judge::read_rank_record(dir / ("rank" + std::to_string(r) + ".rec"), &why);
    if (!record) {
      record = kit::judge::Record();
      record->mark("threw", why + " (exit status " + std::to_string(out.exitcodes.back()) + ")");
    }
    out.records.push_back(*record);
  }
  return out;
}

// n ranks running `role` (a RANK_SUBJECT) inside a subject part of the case: the ranks run in
// the subject (and a plain run); the judge gets their exit codes, logs and records as data.
RankRun subject_ranks(int n, const std::string& role, double timeout_s = 60,
                      const std::vector<std::pair<std::string, std::string>>& env = {});

// In a JUDGE part: every one of the n ranks ran its role to the end (its record says so) and
// exited 0; otherwise a failure naming the rank, what it threw and its log. Returns whether
// they all did (read the records only then).
inline bool expect_ranks_ok(const RankRun& run, int n, const std::string& what) {
  if (run.records.size() != static_cast<size_t>(n) || run.exitcodes.size() != static_cast<size_t>(n)) {
    ADD_FAILURE() << what << ": " << run.records.size() << " ranks reported, not " << n;
    return false;
  }
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    const auto& rec = run.records[static_cast<size_t>(r)];
    if (!rec.ok()) {
      ADD_FAILURE() << what << ", n = " << n << ": rank " << r << " " << rec.error() << run.describe();
      ok = false;
    } else if (run.exitcodes[static_cast<size_t>(r)] != 0) {
      ADD_FAILURE() << what << ", n = " << n << ": rank " << r << " exited with status "
                    << run.exitcodes[static_cast<size_t>(r)] << run.describe();
      ok = false;
    }
  }
  return ok;
}

// Every rank exited 0 (its expectations held).
inline void expect_all_ranks_pass(const RankRun& run, int n, const std::string& what) {
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(run.exitcodes[static_cast<size_t>(r)], 0) << what << ", n = " << n << ": rank " << r << " failed"
                                                         << run.describe();
}

// The role on n = each of `sizes` processes in turn, stopping at the first size that fails: its
// message is the one to read (an unimplemented function fails every size alike, and each size
// costs its processes' start-up).
inline void expect_ranks_pass_for(const std::vector<int>& sizes, const std::string& role, const std::string& what,
                                  double timeout_s = 60) {
  for (const int n : sizes) {
    expect_all_ranks_pass(run_ranks(n, role, timeout_s), n, what);
    if (::testing::Test::HasFailure()) return;
  }
}

// Largest |actual - expected| - (atol + rtol |expected|) elementwise: <= 0 passes.
inline double excess(const torch::Tensor& actual, const torch::Tensor& expected, double atol = 1e-5,
                     double rtol = 1e-4) {
  if (actual.numel() == 0) return -1;  // nothing to differ (an empty chunk)
  return ((actual - expected).abs() - (atol + rtol * expected.abs())).max().item<double>();
}

// actual has expected's shape and is within excess's tolerance of it (NaN never is).
inline ::testing::AssertionResult close(const torch::Tensor& actual, const torch::Tensor& expected,
                                        double atol = 1e-5, double rtol = 1e-4) {
  if (!actual.defined()) return ::testing::AssertionFailure() << "is undefined (no gradient reached it?)";
  if (actual.sizes() != expected.sizes())
    return ::testing::AssertionFailure() << "has shape " << actual.sizes() << ", expected " << expected.sizes();
  const auto a = actual.detach().to(torch::kFloat64), e = expected.detach().to(torch::kFloat64);
  if (excess(a, e, atol, rtol) <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "differs by up to " << (a - e).abs().max().item<double>();
}

// fn() throws kit::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error_naming(Fn fn, const std::vector<std::string>& parts, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << what << ": no kit::Error";
  } catch (const kit::Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << what << ": \"" << p << "\" not in: " << msg;
  }
}

// The body of RankRole.Run (a rank exec'd by run_ranks): the role named by KIT_TEST_RANK_ROLE;
// exit 1 when it failed (skipped in a normal run of the suite).
inline void run_role_of_this_rank() {
  const char* role = std::getenv("KIT_TEST_RANK_ROLE");
  if (!role) GTEST_SKIP() << "runs only as a rank started by run_ranks";
  if (run_role(role, std::atoi(std::getenv("RANK")), std::atoi(std::getenv("WORLD_SIZE"))) != 0) std::_Exit(1);
}

}  // namespace kit_test

namespace kit::judge {
template <>
struct Codec<kit_test::RankRun> {
  static Value put(const kit_test::RankRun& r) {
    Value v;
    v.kind = Value::Kind::Map;
    v.map.emplace_back("exitcodes", Codec<std::vector<int>>::put(r.exitcodes));
    v.map.emplace_back("logs", Codec<std::vector<std::string>>::put(r.logs));
    v.map.emplace_back("records", Codec<std::vector<Record>>::put(r.records));
    v.map.emplace_back("seconds", Codec<double>::put(r.seconds));
    return v;
  }
  static bool get(const Value& v, kit_test::RankRun* out) {
    const Value *e = v.find("exitcodes"), *l = v.find("logs"), *rs = v.find("records"), *s = v.find("seconds");
    return v.kind == Value::Kind::Map && e && l && rs && s && Codec<std::vector<int>>::get(*e, &out->exitcodes) &&
           Codec<std::vector<std::string>>::get(*l, &out->logs) && Codec<std::vector<Record>>::get(*rs, &out->records) &&
           Codec<double>::get(*s, &out->seconds) && out->logs.size() == out->exitcodes.size() &&
           out->records.size() == out->exitcodes.size();
  }
};
}  // namespace kit::judge

namespace kit_test {
inline RankRun subject_ranks(int n, const std::string& role, double timeout_s,
                             const std::vector<std::pair<std::string, std::string>>& env) {
  return kit::judge::subject([&](kit::judge::Record& out) { out.put("ranks", run_ranks(n, role, timeout_s, env)); },
                             role + " on " + std::to_string(n) + " ranks")
      .get<RankRun>("ranks");
}

}  // namespace kit_test

// In one .cpp file of a suite that runs roles: the case each rank process runs.
#define RANK_ROLE_MAIN \
  TEST(RankRole, Run) { ::kit_test::run_role_of_this_rank(); }
