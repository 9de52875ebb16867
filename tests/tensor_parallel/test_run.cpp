// Problem 4 through train_parallel --tp end to end: t = 1 (the trainer's one-process stage) and
// t = 2 processes (the student's tensor-parallel layers) train as one process of the first
// assignment's model does, written out here without any tensor-parallel code (losses, and the
// gathered checkpoint that model reads), and a t that does not divide the vocabulary is
// refused by the launcher before any process starts. The program runs the student's code: the
// subject runs it and records its metrics and checkpoints; the one-process model is the judge's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "process_harness.h"
#include "kit/config.h"
#include "model/checkpoint.h"
#include "model/gpt2.h"
#include "build_programs.h"
#include "judge/judge.h"
#include "judge/tensor.h"
#include "train/loss.h"


namespace {

// Tiny, with 4 heads so that t = 2 and 4 both divide them. kRun...: test_model.cpp, in the same
// unity batch, has a kVocab, kBatch and kSeqLen of its own.
constexpr int64_t kHeads = 4, kRunVocab = 64, kRunBatch = 4, kRunSeqLen = 16, kSteps = 2;

std::vector<std::string> args(int t, const std::string& dir, int64_t vocab = kRunVocab) {
  return {kit_test::build_program("train_parallel"), "--tp", std::to_string(t), "--preset", "tiny", "--n-head",
          std::to_string(kHeads), "--dropout", "0", "--batch-size", std::to_string(kRunBatch), "--seq-len",
          std::to_string(kRunSeqLen), "--vocab-size", std::to_string(vocab), "--steps", std::to_string(kSteps),
          "--lr", "0.001", "--seed", "7", "--threads", "1", "--no-progress",
          "--out", dir + "/metrics/{rank}.json", "--save", dir + "/model.pt"};
}

kit::GPT2 read_checkpoint(const std::string& path) {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.n_head = kHeads;
  cfg.vocab_size = kRunVocab;
  cfg.dropout = 0;
  kit::GPT2 model(cfg);
  kit::import_checkpoint(*model, path);
  return model;
}

// What train_parallel --tp computes, in one process with kit::GPT2 and no tensor-parallel
// code (the program's recipe, see its header): the model from --seed, the synthetic batches
// from seed + 1000, AdamW (weight decay: TrainConfig's default). Its losses and its model.
struct OneProcess {
  std::vector<double> losses;
  kit::GPT2 model{nullptr};
};
OneProcess one_process_reference() {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.n_head = kHeads;
  cfg.vocab_size = kRunVocab;
  cfg.dropout = 0;
  const uint64_t seed = 7;
  torch::manual_seed(seed + 1000);
  std::vector<torch::Tensor> batches;
  for (int64_t k = 0; k < kSteps; ++k)
    batches.push_back(torch::randint(kRunVocab, {kRunBatch, kRunSeqLen + 1}, torch::kInt64));
  OneProcess ref{{}, kit::build_model(cfg, kRunVocab, kRunSeqLen, seed)};
  torch::optim::AdamW opt(ref.model->parameters(),
                          torch::optim::AdamWOptions(1e-3).weight_decay(kit::TrainConfig{}.weight_decay));
  for (const auto& t : batches) {
    opt.zero_grad();
    auto loss = kit::masked_cross_entropy(ref.model->forward(t.narrow(1, 0, kRunSeqLen)), t.narrow(1, 1, kRunSeqLen),
                                          torch::ones({kRunBatch, kRunSeqLen}));
    loss.backward();
    opt.step();
    ref.losses.push_back(loss.item<double>());
  }
  return ref;
}

// The parameters of a gathered checkpoint (read in the subject: the file is what the student's
// program wrote), by name.
std::vector<std::pair<std::string, torch::Tensor>> checkpoint_parameters(const std::string& path) {
  auto model = read_checkpoint(path);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : model->named_parameters()) out.emplace_back(p.key(), p.value().detach());
  return out;
}

// The subject runs the program (student code) with t = 1 and t = 2 and records how each run
// ended, every rank's metrics file and each gathered checkpoint's parameters; the judge trains
// the one-process model and compares.
TEST(TPRun, TwoRanksTrainAsOneProcessAndSaveTheWholeModel) {
  const kit::judge::Record got = kit::judge::subject([&](kit::judge::Record& out) {
    kit_test::TempDir one("tp_run_one"), two("tp_run_two");
    const auto r1 = kit_test::run_kit_program(args(1, one.path()), one / "log.txt");
    out.put("t1.exitcode", r1.exitcode);
    out.put("t1.describe", kit_test::describe_run(r1));
    if (r1.exitcode != 0) return;
    const auto r2 = kit_test::run_kit_program(args(2, two.path()), two / "log.txt");
    out.put("t2.exitcode", r2.exitcode);
    out.put("t2.describe", kit_test::describe_run(r2));
    if (r2.exitcode != 0) return;
    out.put("t1.metrics0", kit_test::read_file(one.path() + "/metrics/0.json"));
    for (int rank = 0; rank < 2; ++rank)
      out.put("t2.metrics" + std::to_string(rank),
              kit_test::read_file(two.path() + "/metrics/" + std::to_string(rank) + ".json"));
    out.put("t1.checkpoint", checkpoint_parameters(one / "model.pt"));
    out.put("t2.checkpoint", checkpoint_parameters(two / "model.pt"));
  });
  if (!kit::judge::judging()) return;
  ASSERT_EQ(got.get<int>("t1.exitcode"), 0) << "--tp 1: " << got.get<std::string>("t1.describe");
  ASSERT_EQ(got.get<int>("t2.exitcode"), 0) << "--tp 2: " << got.get<std::string>("t2.describe");
  const auto metrics = [&](const std::string& name) {
    return nlohmann::json::parse(got.get<std::string>(name));
  };

  // Both are held to the one-process model.
  const OneProcess single = one_process_reference();
  const auto ref = single.losses;
  const auto t1 = metrics("t1.metrics0")["losses"].get<std::vector<double>>();
  ASSERT_EQ(t1.size(), ref.size());
  for (size_t k = 0; k < ref.size(); ++k)
    EXPECT_NEAR(t1[k], ref[k], 1e-4 * std::abs(ref[k])) << "--tp 1, step " << k << ", against kit::GPT2 in "
                                                            "one process";
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json m = metrics("t2.metrics" + std::to_string(rank));
    const auto losses = m["losses"].get<std::vector<double>>();
    ASSERT_EQ(losses.size(), ref.size()) << "rank " << rank;
    for (size_t k = 0; k < ref.size(); ++k)
      EXPECT_NEAR(losses[k], ref[k], 1e-4 * std::abs(ref[k])) << "rank " << rank << ", step " << k;
    // Each rank holds half of every block's matrices; the layer norms and the two
    // row-parallel biases (6 C floats per block) stay whole on every rank.
    const int64_t whole = m["n_layer"].get<int64_t>() * 6 * m["n_embd"].get<int64_t>() * 4;
    EXPECT_EQ(m["parameter_bytes_by_kind"]["blocks"].get<int64_t>(),
              (m["full_parameter_bytes"]["blocks"].get<int64_t>() - whole) / 2 + whole)
        << "rank " << rank;
    // The blocks alone all-reduce 4 B T C floats per block per step; the embedding and the
    // loss add some more.
    EXPECT_GE(m["tp_all_reduce_bytes_per_step"].get<double>(), m["formula_all_reduce_bytes_per_step"].get<double>())
        << "rank " << rank;
  }

  // Each gathered checkpoint is the first assignment's model, equal to the one-process one's.
  for (const int t : {1, 2}) {
    const auto params = got.get<std::vector<std::pair<std::string, torch::Tensor>>>(
        "t" + std::to_string(t) + ".checkpoint");
    for (const auto& p : single.model->named_parameters()) {
      const torch::Tensor* x = nullptr;
      for (const auto& [name, value] : params)
        if (name == p.key()) x = &value;
      ASSERT_TRUE(x && x->sizes() == p.value().sizes())
          << p.key() << " of --tp " << t << "'s checkpoint is missing or of another shape";
      const torch::Tensor y = p.value().detach();
      const double excess = ((*x - y).abs() - (1e-5 + 1e-4 * y.abs())).max().item<double>();
      EXPECT_LE(excess, 0.0) << p.key() << " of --tp " << t
                             << "'s checkpoint differs from kit::GPT2 trained in one process";
    }
  }
}

TEST(TPRun, VocabularyThatTDoesNotDivideIsAClearError) {
  const kit::judge::Record got = kit::judge::subject([&](kit::judge::Record& out) {
    kit_test::TempDir dir("tp_run_bad_vocab");
    const auto r = kit_test::run_kit_program(args(2, dir.path(), 63), dir / "log.txt");
    out.put("timed_out", r.timed_out);
    out.put("exitcode", r.exitcode);
    out.put("output", r.output);
    out.put("describe", kit_test::describe_run(r));
    const auto left = kit_test::leftovers_after(dir.path(), 5);
    out.put("leftovers", left);
    if (!left.empty()) out.put("leftovers_now", kit_test::leftovers_after(dir.path(), 0));
  });
  if (!kit::judge::judging()) return;
  const std::string describe = got.get<std::string>("describe"), output = got.get<std::string>("output");
  EXPECT_FALSE(got.get<bool>("timed_out")) << describe;
  EXPECT_EQ(got.get<int>("exitcode"), 1) << describe;
  EXPECT_NE(output.find("vocab_size (63) is not divisible by the tensor-parallel size t = 2"), std::string::npos)
      << describe;
  // Refused in the launcher: no rank was started, so none is left waiting.
  EXPECT_EQ(output.find("starting 2 tensor-parallel ranks"), std::string::npos) << describe;
  EXPECT_TRUE(got.get<std::vector<std::string>>("leftovers").empty())
      << "processes left behind:\n" << kit_test::join_lines(got.get<std::vector<std::string>>("leftovers_now"));
}

}  // namespace
