// Helpers for the real-run tests of train_parallel (Problem 3: --pp ranks): the tiny setup shared by the
// runs and the single-process reference, running the program under a deadline, schedule
// files, and reading the ranks' saved dicts. A run is student code (the program links the
// student's executor and schedules): it runs in a subject part, which records the run as data
// (put_run / get_run); the reference and the checks are the judge's (tests/judge/judge.h).
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "process_harness.h"
#include "app/run.h"
#include "judge/judge.h"
#include "judge/run_result.h"
#include "judge/tensor.h"
#include "kit/config.h"
#include "model/gpt2.h"
#include "pipeline_training/action.h"
#include "train/loss.h"
#include "build_programs.h"


namespace pp_run {
using Env = std::vector<std::pair<std::string, std::string>>;

// The tiny setup: small enough that 4 processes take a few seconds, big enough that every
// wrong executor moves some gradient far outside the tolerance.
constexpr int64_t kBatch = 8, kSeqLen = 16, kVocab = 64, kSteps = 3;
constexpr double kLr = 1e-3;
constexpr uint64_t kSeed = 7;

struct RunSpec {
  int ranks = 2;
  std::string schedule = "1f1b";
  int64_t microbatches = 4;
  int64_t virtual_chunks = 1;
  int64_t n_layer = 2;
};

inline std::vector<std::string> program_args(const RunSpec& s, const std::string& dir) {
  return {kit_test::build_program("train_parallel"), "--pp", std::to_string(s.ranks), "--schedule", s.schedule,
          "--chunks", std::to_string(s.microbatches), "--virtual", std::to_string(s.virtual_chunks),
          "--preset", "tiny", "--n-layer", std::to_string(s.n_layer), "--dropout", "0",
          "--batch-size", std::to_string(kBatch), "--seq-len", std::to_string(kSeqLen),
          "--vocab-size", std::to_string(kVocab), "--steps", std::to_string(kSteps), "--lr", "0.001",
          "--seed", std::to_string(kSeed), "--threads", "1", "--no-progress", "--out", dir + "/metrics/{rank}.json"};
}

// Runs the program under a deadline (kit_test::run_kit_program), so that an executor that
// leaves a peer waiting fails in seconds rather than at ctest's deadline.
inline kit_test::RunResult run_program(const std::vector<std::string>& argv, Env env, const std::string& log,
                                      double timeout_s = 50, const std::string& dist_timeout = "10") {
  return kit_test::run_kit_program(argv, log, std::move(env), timeout_s, dist_timeout);
}

inline std::string describe(const kit_test::RunResult& r) { return kit_test::describe_run(r); }

// A run's exit, duration and output in a record (under `prefix`), and back.
inline void put_run(kit::judge::Record& out, const kit_test::RunResult& r, const std::string& prefix = "run") {
  out.put(prefix, r);
}
inline kit_test::RunResult get_run(const kit::judge::Record& got, const std::string& prefix = "run") {
  return got.get<kit_test::RunResult>(prefix);
}

// {"schedules": [[{"op": "F", "microbatch": 0, "chunk": 0}, ...], ...]}, written here by
// hand so the file does not depend on the kit's own JSON functions.
inline void write_schedule_file(const std::string& path, const kit::pp::Schedules& s) {
  std::ofstream f(path);
  f << "{\"schedules\": [";
  for (size_t r = 0; r < s.size(); ++r) {
    f << (r ? ", " : "") << "[";
    for (size_t k = 0; k < s[r].size(); ++k) {
      const auto& a = s[r][k];
      f << (k ? ", " : "") << "{\"op\": \"" << (a.op == kit::pp::Op::Forward ? "F" : "B")
        << "\", \"microbatch\": " << a.microbatch << ", \"chunk\": " << a.chunk << "}";
    }
    f << "]";
  }
  f << "]}\n";
}

// The model every rank builds (train_parallel: kit::build_model from --seed).
inline kit::GPT2 reference_model(int64_t n_layer) {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.dropout = 0;
  cfg.n_layer = n_layer;
  return kit::build_model(cfg, kVocab, kSeqLen, kSeed);
}

// The program's synthetic batches (kit::synthetic_batches, given code: app/run.h), as
// train_parallel makes them from --seed.
inline std::vector<kit::TokenBatch> reference_batches() {
  return kit::synthetic_batches(kSteps, kBatch, kSeqLen, kVocab, kSeed);
}

// One process, the whole model, the whole batch: the losses of every step, the gradients
// after the first batch and the parameters after kSteps AdamW steps.
struct Reference {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> grads, params;
};
inline Reference single_process_reference(int64_t n_layer) {
  auto model = reference_model(n_layer);
  const auto batches = reference_batches();
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(kLr).weight_decay(0.0));
  Reference ref;
  for (int64_t k = 0; k < kSteps; ++k) {
    opt.zero_grad();
    const auto& b = batches[static_cast<size_t>(k)];
    auto loss = kit::masked_cross_entropy(model->forward(b.idx), b.labels, b.mask);
    loss.backward();
    ref.losses.push_back(loss.item<double>());
    if (k == 0)
      for (const auto& p : model->named_parameters()) ref.grads[p.key()] = p.value().grad().detach().clone();
    opt.step();
  }
  for (const auto& p : model->named_parameters()) ref.params[p.key()] = p.value().detach().clone();
  return ref;
}

// Largest |actual - expected| - (atol + rtol * |expected|), elementwise; <= 0 passes.
inline double excess(const torch::Tensor& actual, const torch::Tensor& expected, double atol, double rtol) {
  return ((actual - expected).abs() - (atol + rtol * expected.abs())).max().item<double>();
}

}  // namespace pp_run
