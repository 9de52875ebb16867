// Problem 5 end to end: train_parallel --dp 2 --optimizer zero1|zero2|zero3 on 2 Gloo processes,
// tiny preset (and on 3, dropout on). ZeRO-1 and ZeRO-2 train exactly as plain data parallelism
// with torch::optim::AdamW does (losses), each rank holds ceil(P/2) x 2 x 4 bytes of optimizer state
// (measured by the program from the moment tensors, P counted here from the model), and a bad
// flag is refused before any rank starts; ZeRO-3 (Problem 5.5) the same, holding its shards only.
// train_parallel carries the student's code, so it runs in subject parts, which record each run's
// exit and the metrics every rank wrote; plain data parallelism's losses (the same model, batches
// and AdamW in one process, each rank's half of the global batch a loss of its own, their
// gradients averaged), P and every check are the judge's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "app/run.h"
#include "build_programs.h"
#include "process_harness.h"
#include "judge/judge.h"
#include "kit/config.h"
#include "model/gpt2.h"
#include "train/loss.h"

namespace {
namespace judge = kit::judge;

constexpr int64_t kRunVocab = 64, kRunBatch = 4, kRunSeqLen = 16, kRunSteps = 4;  // kRunBatch: the global batch
constexpr uint64_t kRunSeed = 7;
constexpr double kRunWeightDecay = 0.1;
// The losses of ZeRO and of plain AdamW may differ only by float rounding: with 2 ranks
// both sum the same two gradients and apply the same AdamW formula. 1e-5 relative is far
// below what one wrong step moves them (see LossesMoveMoreThanTheTolerance).
constexpr double kRelTol = 1e-5;

// A run's shape: data-parallel ranks, the global batch's rows, dropout.
struct RunShape {
  int ranks = 2;
  int64_t batch = kRunBatch;
  double dropout = 0;
};
// The runs on 3 ranks: shards of ceil(P/3) with padding (P = 31,616 is not a multiple of 3),
// every rank's own dropout masks, 2 rows each.
constexpr RunShape kThreeWithDropout{3, 6, 0.1};

std::vector<std::string> args(const std::string& optimizer, const std::string& dir, const std::string& lr = "0.01",
                              const RunShape& shape = {}) {
  std::ostringstream dropout;
  dropout << shape.dropout;
  return {kit_test::build_program("train_parallel"), "--dp", std::to_string(shape.ranks), "--optimizer", optimizer,
          "--preset", "tiny", "--dropout", dropout.str(), "--batch-size", std::to_string(shape.batch), "--seq-len",
          std::to_string(kRunSeqLen), "--vocab-size", std::to_string(kRunVocab), "--steps", std::to_string(kRunSteps),
          "--lr", lr, "--weight-decay", "0.1", "--seed", std::to_string(kRunSeed), "--threads", "1", "--no-progress",
          "--out", dir + "/metrics/{rank}.json"};
}

// P, counted from the model train_parallel trains (the tied weight once).
int64_t tiny_parameter_count() {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.vocab_size = kRunVocab;
  kit::GPT2 model(cfg);
  return kit::count_parameters(*model);
}

// Plain data parallelism on n ranks, in one process (the judge's reference): train_parallel's
// model (tiny, seed 7) and global batches (synthetic_batches), rank r's loss on rows
// [r B/n, (r+1) B/n) with rank r's dropout masks (its generator seeded seed + 1 + r, as the
// program seeds each data-parallel rank, and carried from step to step), the average of their
// gradients, torch::optim::AdamW (lr 0.01, weight decay 0.1). losses[k]: the global batch's
// loss at step k, the mean of the ranks' (what every rank reports).
std::vector<double> plain_adamw_losses(const RunShape& shape = {}) {
  const std::vector<kit::TokenBatch> batches =
      kit::synthetic_batches(kRunSteps, shape.batch, kRunSeqLen, kRunVocab, kRunSeed);
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.dropout = shape.dropout;
  kit::GPT2 model = kit::build_model(cfg, kRunVocab, kRunSeqLen, kRunSeed);
  model->train();
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(0.01).weight_decay(kRunWeightDecay));
  at::Generator gen = at::globalContext().defaultGenerator(torch::kCPU);
  std::vector<torch::Tensor> dropout_state;  // each rank's generator
  for (int r = 0; r < shape.ranks; ++r) {
    torch::manual_seed(kRunSeed + 1 + static_cast<uint64_t>(r));
    std::lock_guard<std::mutex> lock(gen.mutex());
    dropout_state.push_back(gen.get_state());
  }
  const int64_t rows = shape.batch / shape.ranks;
  std::vector<double> losses;
  for (int64_t k = 0; k < kRunSteps; ++k) {
    opt.zero_grad();
    const kit::TokenBatch& b = batches[static_cast<size_t>(k)];
    torch::Tensor total;
    for (int r = 0; r < shape.ranks; ++r) {
      {
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(dropout_state[static_cast<size_t>(r)]);
      }
      const torch::Tensor loss = kit::masked_cross_entropy(model->forward(b.idx.narrow(0, r * rows, rows)),
                                                           b.labels.narrow(0, r * rows, rows),
                                                           b.mask.narrow(0, r * rows, rows)) /
                                 shape.ranks;
      {
        std::lock_guard<std::mutex> lock(gen.mutex());
        dropout_state[static_cast<size_t>(r)] = gen.get_state();
      }
      total = r == 0 ? loss : total + loss;
    }
    losses.push_back(total.item<double>());
    total.backward();
    opt.step();
  }
  return losses;
}

// One run of train_parallel, in a subject part: its exit, its output, and each rank's metrics file.
struct ZeroRunResult {
  int exitcode = -1;
  std::string described;             // exit, time and output (kit_test::describe_run)
  std::vector<std::string> metrics;  // rank 0's and rank 1's JSON text ("" when missing)
};
void put_run(judge::Record& out, const std::string& name, const ZeroRunResult& r) {
  out.put(name + "/exitcode", r.exitcode);
  out.put(name + "/described", r.described);
  out.put(name + "/metrics", r.metrics);
}
ZeroRunResult get_run(const judge::Record& got, const std::string& name) {
  return {got.get<int>(name + "/exitcode"), got.get<std::string>(name + "/described"),
          got.get<std::vector<std::string>>(name + "/metrics")};
}
ZeroRunResult train_run(const std::string& optimizer, const std::string& lr = "0.01", const RunShape& shape = {}) {
  kit_test::TempDir dir("zero_run_" + optimizer);
  const auto r = kit_test::run_kit_program(args(optimizer, dir.path(), lr, shape), dir / "log.txt");
  ZeroRunResult out;
  out.exitcode = r.exitcode;
  out.described = kit_test::describe_run(r);
  for (int rank = 0; rank < shape.ranks; ++rank)
    out.metrics.push_back(kit_test::read_file(dir.path() + "/metrics/" + std::to_string(rank) + ".json"));
  return out;
}

// The subject part of a case: train_parallel with each optimizer (and lr) in turn, recorded by name.
judge::Record train_runs(const std::vector<std::pair<std::string, std::string>>& runs, const RunShape& shape = {}) {
  return judge::subject([&](judge::Record& out) {
    for (const auto& [name, lr] : runs) {
      const std::string optimizer = name.substr(0, name.find('@'));
      put_run(out, name, train_run(optimizer, lr, shape));
    }
  });
}

// Rank `rank`'s metrics of a run that exited 0; a failure (and null) otherwise.
nlohmann::json metrics_of(const ZeroRunResult& run, const std::string& what, int rank) {
  if (run.exitcode != 0) {
    ADD_FAILURE() << "--optimizer " << what << ": " << run.described;
    return nullptr;
  }
  const std::string text = rank < static_cast<int>(run.metrics.size()) ? run.metrics[static_cast<size_t>(rank)] : "";
  nlohmann::json m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object()) {
    ADD_FAILURE() << "--optimizer " << what << ": rank " << rank << "'s metrics are not a JSON object: "
                  << text.substr(0, 300);
    return nullptr;
  }
  return m;
}

// A field of the metrics as a T; a failure (and T{}) when it is missing or of another type.
template <typename T>
T field(const nlohmann::json& m, const std::string& key, const std::string& what) {
  if (!m.is_object() || !m.contains(key)) {
    ADD_FAILURE() << what << ": no \"" << key << "\" in the metrics";
    return T{};
  }
  try {
    return m[key].get<T>();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": \"" << key << "\" is not what it should be: " << e.what();
    return T{};
  }
}

void expect_same_losses(const std::vector<double>& a, const ZeroRunResult& got, const std::string& what,
                        int ranks = 2) {
  for (int rank = 0; rank < ranks; ++rank) {
    const nlohmann::json m = metrics_of(got, what, rank);
    if (m.is_null()) return;
    const auto b = field<std::vector<double>>(m, "losses", what + ", rank " + std::to_string(rank));
    ASSERT_EQ(a.size(), static_cast<size_t>(kRunSteps));
    ASSERT_EQ(b.size(), a.size()) << what << ", rank " << rank;
    for (size_t k = 0; k < a.size(); ++k)
      EXPECT_NEAR(b[k], a[k], kRelTol * std::abs(a[k])) << what << " against adamw, rank " << rank << ", step " << k;
  }
}

TEST(ZeroRun, Zero1AndZero2TrainAsPlainAdamW) {
  const judge::Record got = train_runs({{"zero1", "0.01"}, {"zero2", "0.01"}});
  if (!judge::judging()) return;
  const auto ref = plain_adamw_losses();
  expect_same_losses(ref, get_run(got, "zero1"), "zero1");
  expect_same_losses(ref, get_run(got, "zero2"), "zero2");
}

// Three ranks, dropout on: the shards are uneven (the last one padded) and every rank draws
// its own masks; ZeRO must still train as plain data parallelism does.
TEST(ZeroRun, ThreeRanksWithDropoutTrainAsPlainAdamW) {
  const judge::Record got = train_runs({{"zero1", "0.01"}, {"zero2", "0.01"}}, kThreeWithDropout);
  if (!judge::judging()) return;
  const auto ref = plain_adamw_losses(kThreeWithDropout);
  expect_same_losses(ref, get_run(got, "zero1"), "zero1 on 3 ranks with dropout", 3);
  expect_same_losses(ref, get_run(got, "zero2"), "zero2 on 3 ranks with dropout", 3);
}

TEST(ZeroRun, LossesMoveMoreThanTheTolerance) {
  // The comparison above can fail: a slightly different update (lr 0.011 for 0.01) moves
  // the losses of the later steps by far more than kRelTol.
  const judge::Record got = train_runs({{"zero1", "0.01"}, {"zero1@b", "0.011"}});
  if (!judge::judging()) return;
  const nlohmann::json a = metrics_of(get_run(got, "zero1"), "zero1", 0), b = metrics_of(get_run(got, "zero1@b"), "zero1", 0);
  if (a.is_null() || b.is_null()) return;
  const auto la = field<std::vector<double>>(a, "losses", "lr 0.01"), lb = field<std::vector<double>>(b, "losses", "lr 0.011");
  ASSERT_EQ(la.size(), lb.size());
  ASSERT_FALSE(la.empty());
  EXPECT_GT(std::abs(la.back() - lb.back()), 10 * kRelTol * std::abs(la.back()));
}

TEST(ZeroRun, OptimizerStateAndGradientBytesPerRank) {
  const judge::Record got = train_runs({{"adamw", "0.01"}, {"zero1", "0.01"}, {"zero2", "0.01"}});
  if (!judge::judging()) return;
  const int64_t P = tiny_parameter_count(), S = (P + 1) / 2;  // ceil(P / 2)
  const ZeroRunResult adamw = get_run(got, "adamw"), zero1 = get_run(got, "zero1"), zero2 = get_run(got, "zero2");
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json d = metrics_of(adamw, "adamw", rank), z1 = metrics_of(zero1, "zero1", rank),
                         z2 = metrics_of(zero2, "zero2", rank);
    if (d.is_null() || z1.is_null() || z2.is_null()) return;
    const std::string on = ", rank " + std::to_string(rank);
    EXPECT_EQ(field<int64_t>(d, "parameter_count", "adamw" + on), P) << "rank " << rank;
    // Plain AdamW: two moments of every parameter, every gradient.
    EXPECT_EQ(field<int64_t>(d, "optimizer_state_bytes", "adamw" + on), 2 * 4 * P) << "rank " << rank;
    EXPECT_EQ(field<int64_t>(d, "gradient_bytes", "adamw" + on), 4 * P) << "rank " << rank;
    // ZeRO: two moments of this rank's shard only, ceil(P/n) x 2 x 4 bytes.
    EXPECT_EQ(field<int64_t>(z1, "optimizer_state_bytes", "zero1" + on), S * 2 * 4) << "zero1, rank " << rank;
    EXPECT_EQ(field<int64_t>(z2, "optimizer_state_bytes", "zero2" + on), S * 2 * 4) << "zero2, rank " << rank;
    // Stage 1 keeps every gradient; stage 2 only its shard of the reduced ones.
    EXPECT_EQ(field<int64_t>(z1, "gradient_bytes", "zero1" + on), 4 * P) << "zero1, rank " << rank;
    EXPECT_EQ(field<int64_t>(z2, "gradient_bytes", "zero2" + on), 4 * S) << "zero2, rank " << rank;
    // Right after backward, before the step, every variant holds all P gradients.
    for (const auto* m : {&d, &z1, &z2})
      EXPECT_EQ(field<int64_t>(*m, "gradient_peak_bytes", "gradient_peak_bytes" + on), 4 * P) << "rank " << rank;
    // Each step a ring reduce-scatter and all-gather over the padded 2 S floats: rank r
    // sends n - 1 = 1 chunk of S floats in each, what one ring all-reduce sends.
    for (const auto* z : {&z1, &z2})
      EXPECT_DOUBLE_EQ(field<double>(*z, "send_bytes_per_step", "send_bytes_per_step" + on), 2.0 * S * 4)
          << "rank " << rank;
    EXPECT_GT(field<int64_t>(d, "activation_bytes", "adamw" + on), 0) << "the activations were not counted";
  }
}

TEST(ZeroRun, UnknownOptimizerIsAClearError) {
  const judge::Record got = judge::subject([&](judge::Record& out) {
    kit_test::TempDir dir("zero_run_bad_optimizer");
    const auto r = kit_test::run_kit_program(args("zero4", dir.path()), dir / "log.txt");
    out.put("timed_out", r.timed_out);
    out.put("exitcode", r.exitcode);
    out.put("output", r.output);
    out.put("described", kit_test::describe_run(r));
    out.put("leftovers", kit_test::leftovers_after(dir.path(), 5));
    out.put("leftovers_now", kit_test::join_lines(kit_test::leftovers_after(dir.path(), 0)));
  });
  JUDGE {
    const std::string described = got.get<std::string>("described"), output = got.get<std::string>("output");
    EXPECT_FALSE(got.get<bool>("timed_out")) << described;
    EXPECT_EQ(got.get<int>("exitcode"), 1) << described;
    EXPECT_NE(output.find("--optimizer zero4 is not one of adamw, zero1, zero2, zero3"), std::string::npos) << described;
    // Refused in the launcher: no rank was started, so none is left waiting.
    EXPECT_EQ(output.find("starting 2 ranks"), std::string::npos) << described;
    EXPECT_TRUE(got.get<std::vector<std::string>>("leftovers").empty())
        << "processes left behind:\n" << got.get<std::string>("leftovers_now");
  }
}

}  // namespace

// Problem 5.5 through train_parallel --optimizer zero3: ZeRO-3 trains as plain AdamW does, and each rank holds its
// shards of the parameters, their gradients and their moments, and sends three passes of them.
TEST(FsdpRun, Zero3TrainsAsPlainAdamWAndHoldsItsShardsOnly) {
  const judge::Record got = train_runs({{"zero3", "0.01"}});
  if (!judge::judging()) return;
  const ZeroRunResult zero3 = get_run(got, "zero3");
  expect_same_losses(plain_adamw_losses(), zero3, "zero3");
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json z = metrics_of(zero3, "zero3", rank);
    if (z.is_null()) return;
    const std::string what = "zero3, rank " + std::to_string(rank);
    const int64_t P = field<int64_t>(z, "parameter_count", what), shard = field<int64_t>(z, "parameter_bytes", what);
    EXPECT_EQ(P, tiny_parameter_count()) << "rank " << rank;
    // The units' shards, each ceil(P_u / 2) floats: at least P/2, less than P/2 + one float per unit.
    EXPECT_GE(shard, 4 * P / 2) << "zero3 parameter bytes kept, rank " << rank;
    EXPECT_LE(shard, 4 * (P / 2 + 16)) << "zero3 parameter bytes kept, rank " << rank;
    EXPECT_EQ(field<int64_t>(z, "gradient_bytes", what), shard) << "zero3 keeps its shards' gradients only, rank " << rank;
    EXPECT_EQ(field<int64_t>(z, "gradient_peak_bytes", what), shard) << "rank " << rank;
    EXPECT_EQ(field<int64_t>(z, "optimizer_state_bytes", what), 2 * shard) << "rank " << rank;
    // Two all-gathers and a reduce-scatter of every shard, n - 1 = 1 chunk each.
    EXPECT_DOUBLE_EQ(field<double>(z, "send_bytes_per_step", what), 3.0 * shard) << "rank " << rank;
  }
}

// ZeRO-3 on three ranks with dropout: uneven unit shards, every rank its own masks.
TEST(FsdpRun, ThreeRanksWithDropoutTrainAsPlainAdamW) {
  const judge::Record got = train_runs({{"zero3", "0.01"}}, kThreeWithDropout);
  if (!judge::judging()) return;
  expect_same_losses(plain_adamw_losses(kThreeWithDropout), get_run(got, "zero3"), "zero3 on 3 ranks with dropout", 3);
}
