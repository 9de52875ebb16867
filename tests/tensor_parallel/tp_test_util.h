// Helpers for the tensor-parallel tests: t ranks as processes, each a copy of this test
// program running only TPRank.Run with a role (a function registered by name), meeting at
// a store this process serves. A role compares its rank's results with the single-device
// layer it builds itself (every rank can afford the whole tiny layer), so a mismatch is a
// failed GoogleTest expectation inside the rank: its exit code and log come back here.
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
#include <vector>

#include "data_parallel/dp_test_util.h"
#include "dist/dist.h"
#include "dist/launch.h"
#include "kit/config.h"
#include "kit/errors.h"

namespace tp_test {
namespace fs = std::filesystem;
namespace dist = kit::dist;

// A role runs on every rank after init_process_group; `group` is the whole world as the
// tensor-parallel group.
using Role = std::function<void(const dist::Group& group)>;

inline std::map<std::string, Role>& roles() {
  static std::map<std::string, Role> r;
  return r;
}

// TP_ROLE(name) { ...body using `group`... } registers a role at static-initialisation time.
struct RegisterRole {
  RegisterRole(const std::string& name, Role role) { roles()[name] = std::move(role); }
};
#define TP_ROLE(name)                                                   \
  static void tp_role_##name(const ::kit::dist::Group& group);          \
  static ::tp_test::RegisterRole tp_register_##name(#name, tp_role_##name); \
  static void tp_role_##name(const ::kit::dist::Group& group)

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

// Runs `role` on t ranks (processes) with a short communication timeout, so that a wrong
// submission that leaves a peer waiting fails in seconds; kills them all after timeout_s.
inline RankRun run_ranks(int t, const std::string& role, double timeout_s = 60) {
  dp_test::TempDir dir("tp_" + role);
  kit::RendezvousServer server(0);
  std::vector<kit::Process> procs;
  for (int r = 0; r < t; ++r) {
    kit::Command cmd;
    cmd.argv = {fs::read_symlink("/proc/self/exe").string(), "--gtest_filter=TPRank.Run"};
    cmd.env = {{"RANK", std::to_string(r)},
               {"WORLD_SIZE", std::to_string(t)},
               {"MASTER_ADDR", "127.0.0.1"},
               {"MASTER_PORT", std::to_string(server.rendezvous().master_port)},
               {"KIT_STORE_HOSTED", "1"},
               {"KIT_DIST_TIMEOUT", "10"},
               {"OMP_NUM_THREADS", "1"},
               {"KIT_TEST_TP_ROLE", role}};
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
  for (int r = 0; r < t; ++r) {
    out.exitcodes.push_back(procs[static_cast<size_t>(r)].exitcode().value_or(-1));
    out.logs.push_back(dp_test::read_file(dir / ("rank" + std::to_string(r) + ".log")));
  }
  return out;
}

// Every rank exited 0 (its expectations held).
inline void expect_all_ranks_pass(const RankRun& run, int t, const std::string& what) {
  for (int r = 0; r < t; ++r)
    EXPECT_EQ(run.exitcodes[static_cast<size_t>(r)], 0) << what << ", t = " << t << ": rank " << r << " failed"
                                                         << run.describe();
}

// Largest |actual - expected| - (atol + rtol |expected|) elementwise: <= 0 passes.
inline double excess(const torch::Tensor& actual, const torch::Tensor& expected, double atol = 1e-5,
                     double rtol = 1e-4) {
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

// The tiny GPT-2 configuration of these tests: 4 heads (the preset's 2 cannot be split 4 ways),
// n_embd 32, no dropout (every rank and the single-device layer must compute the same thing).
inline kit::GPT2Config tiny_config(int64_t vocab = 64) {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.dropout = 0;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.vocab_size = vocab;
  return cfg;
}

// Rank r's rows of a fused q|k|v tensor (3C rows), written out independently of shard_qkv:
// the rows of q, k and v that rank r's heads own.
inline torch::Tensor qkv_rows(const torch::Tensor& full, int64_t r, int64_t t) {
  const int64_t C = full.size(0) / 3, part = C / t;
  return torch::cat({full.narrow(0, r * part, part), full.narrow(0, C + r * part, part),
                     full.narrow(0, 2 * C + r * part, part)});
}

// Rank r's share of a full layer's tensor `name` (a parameter or its gradient), by the
// Megatron split: c_attn q|k|v rows, c_fc rows, c_proj weight columns, the rest whole.
inline torch::Tensor expected_share(const std::string& name, const torch::Tensor& full, int64_t r, int64_t t) {
  const auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("c_attn.")) return qkv_rows(full, r, t);
  if (has("c_fc.")) return full.narrow(0, r * full.size(0) / t, full.size(0) / t);
  if (has("c_proj.weight")) return full.narrow(1, r * full.size(1) / t, full.size(1) / t);
  return full;
}

// Every parameter of the parallel module has the gradient of the full module's parameter of
// the same name, this rank's share of it.
inline void expect_grads_are_shares(const torch::nn::Module& par, const torch::nn::Module& full,
                                    const dist::Group& group) {
  const auto want = full.named_parameters();
  for (const auto& p : par.named_parameters()) {
    ASSERT_TRUE(want.contains(p.key())) << p.key() << " is not a parameter of the full layer";
    const auto& w = want[p.key()];
    ASSERT_TRUE(w.grad().defined()) << p.key();
    EXPECT_TRUE(close(p.value().grad(), expected_share(p.key(), w.grad(), group.rank(), group.size())))
        << p.key() << "'s gradient, rank " << group.rank() << " of " << group.size();
  }
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

}  // namespace tp_test
