// Multi-process tests in one test program: each rank is a copy of the program running only
// RankRole.Run with a role (a function registered by name), meeting at a store the test's
// own process serves. A role checks its rank's results with GoogleTest expectations, so a
// mismatch is a failed expectation inside the rank: its exit code and log come back here.
// A suite that uses it has one file with RANK_ROLE_MAIN (see the end of this file).
#pragma once
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "data_parallel/dp_test_util.h"
#include "dist/dist.h"
#include "dist/launch.h"
#include "kit/errors.h"

namespace rank_test {
namespace fs = std::filesystem;
namespace dist = kit::dist;

// A role runs on every rank after init_process_group; `group` is the whole world.
using Role = std::function<void(const dist::Group& group)>;

inline std::map<std::string, Role>& roles() {
  static std::map<std::string, Role> r;
  return r;
}

// RANK_ROLE(name) { ...body using `group`... } registers a role at static-initialisation time.
struct RegisterRole {
  RegisterRole(const std::string& name, Role role) { roles()[name] = std::move(role); }
};
#define RANK_ROLE(name)                                                          \
  static void rank_role_##name(const ::kit::dist::Group& group);                 \
  static ::rank_test::RegisterRole rank_register_##name(#name, rank_role_##name); \
  static void rank_role_##name(const ::kit::dist::Group& group)

struct RankRun {
  std::vector<int> exitcodes;
  std::vector<std::string> logs;
  double seconds = 0;
  std::string describe() const {
    std::string s;
    for (size_t r = 0; r < logs.size(); ++r)
      s += "\n---- rank " + std::to_string(r) + " (exit " + std::to_string(exitcodes[r]) + ") ----\n" + logs[r];
    return s;
  }
};

// Runs `role` on n ranks (processes) with a short communication timeout, so that a wrong
// submission that leaves a peer waiting fails in seconds; kills them all after timeout_s.
// `env`: more variables for every rank (a role's parameters).
inline RankRun run_ranks(int n, const std::string& role, double timeout_s = 60,
                         const std::vector<std::pair<std::string, std::string>>& env = {}) {
  dp_test::TempDir dir("ranks_" + role);
  kit::RendezvousServer server(0);
  std::vector<kit::Process> procs;
  for (int r = 0; r < n; ++r) {
    kit::Command cmd;
    cmd.argv = {fs::read_symlink("/proc/self/exe").string(), "--gtest_filter=RankRole.Run"};
    cmd.env = {{"RANK", std::to_string(r)},
               {"WORLD_SIZE", std::to_string(n)},
               {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", std::to_string(server.rendezvous().master_port)},
               {"KIT_STORE_HOSTED", "1"},
               {"KIT_DIST_TIMEOUT", "10"},
               {"OMP_NUM_THREADS", "1"},
               {"KIT_TEST_RANK_ROLE", role}};
    for (const auto& kv : env) cmd.env.push_back(kv);
    cmd.output = dir / ("rank" + std::to_string(r) + ".log");
    procs.emplace_back(cmd, r);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& p : procs) p.start();
  const auto deadline = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  for (auto& p : procs) {
    if (!p.join_for(deadline)) p.kill(SIGKILL);
    p.join();
  }
  RankRun out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int r = 0; r < n; ++r) {
    out.exitcodes.push_back(procs[static_cast<size_t>(r)].exitcode().value_or(-1));
    out.logs.push_back(dp_test::read_file(dir / ("rank" + std::to_string(r) + ".log")));
  }
  return out;
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

// The body of RankRole.Run: init the world, run the role named by KIT_TEST_RANK_ROLE, and
// exit 1 when any of its expectations failed (skipped in a normal run of the suite).
inline void run_role_of_this_rank() {
  const char* role = std::getenv("KIT_TEST_RANK_ROLE");
  if (!role) GTEST_SKIP() << "runs only as a rank started by run_ranks";
  const int rank = std::atoi(std::getenv("RANK")), n = std::atoi(std::getenv("WORLD_SIZE"));
  const auto it = roles().find(role);
  ASSERT_NE(it, roles().end()) << "no role " << role;
  dist::init_process_group("gloo", rank, n);
  try {
    it->second(dist::world_group());
  } catch (const kit::NotImplemented& e) {
    ADD_FAILURE() << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank " << rank << " threw: " << e.what();
  }
  // A failed rank leaves at once: its peers then fail their next collective within
  // KIT_DIST_TIMEOUT instead of waiting in the goodbye barrier.
  if (::testing::Test::HasFailure()) std::_Exit(1);
  dist::destroy_process_group();
}

}  // namespace rank_test

// In one .cpp file of a suite that runs roles: the case each rank process runs.
#define RANK_ROLE_MAIN \
  TEST(RankRole, Run) { ::rank_test::run_role_of_this_rank(); }
