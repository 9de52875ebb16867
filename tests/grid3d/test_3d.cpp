// Problem 6: GPT-2 on the 3D grid (grid/trainer.h) equals one process on the whole batch.
//
// Each case starts d·p·t ranks (processes) of this program. Every rank builds the same tiny
// float64 model (4 blocks, so 4 pipeline stages fit) and, beside it, the one-process
// reference: the same model with torch::optim::AdamW on the whole batch. After the first
// step the grid's loss must equal the reference's; after the second, every rank's shard of
// every parameter must equal the reference's, and the checkpoint gathered on rank 0 must
// equal kit::state_dict of the reference in names, shapes and values. float64, because
// Adam's normalised step turns float32 rounding in tiny gradients into differences of the
// order of the learning rate.
#include <torch/torch.h>

#include <cstdlib>
#include <sstream>

#include "float64_model.h"
#include "grid/trainer.h"
#include "model/checkpoint.h"
#include "rank_roles.h"
#include "tensor_parallel/sharding.h"
#include "train/loss.h"

namespace {
namespace grid = kit::grid;

constexpr double kLr = 1e-2, kWeightDecay = 0.1;
constexpr int64_t kRows = 8, kTime = 16;

kit::GPT2Config tiny_config() {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.n_layer = 4;
  cfg.vocab_size = 64;
  cfg.dropout = 0;
  return cfg;
}

kit::GPT2 make_model(const kit::GPT2Config& cfg) { return kit_test::float64_model(cfg, 1234); }

struct Batch {
  torch::Tensor idx, labels, mask;
};
Batch make_batch(int64_t step, int64_t vocab) {
  torch::manual_seed(100 + step);
  Batch b;
  b.idx = torch::randint(vocab, {kRows, kTime}, torch::kLong);
  b.labels = torch::randint(vocab, {kRows, kTime}, torch::kLong);
  b.mask = (torch::rand({kRows, kTime}) > 0.2).to(torch::kFloat64);
  b.mask.select(1, 0).fill_(1);  // every row counts at least one token
  return b;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// The role every rank runs; the grid and schedule come from the environment (run_grid).
RANK_ROLE(grid_training) {
  const grid::GridShape shape{env_int("KIT_TEST_DP", 1), env_int("KIT_TEST_PP", 1), env_int("KIT_TEST_TP", 1)};
  ASSERT_EQ(shape.world(), group.size());
  const auto cfg = tiny_config();
  kit::GPT2 reference = make_model(cfg);
  torch::optim::AdamW ref_opt(reference->parameters(), torch::optim::AdamWOptions(kLr).weight_decay(kWeightDecay));

  grid::Options3D o;
  o.microbatches = env_int("KIT_TEST_M", 2);
  o.virtual_chunks = env_int("KIT_TEST_V", 1);
  o.schedule = kit::pp::parse_schedule_kind(std::getenv("KIT_TEST_SCHEDULE") ? std::getenv("KIT_TEST_SCHEDULE")
                                                                             : "1f1b");
  const int zero_stage = env_int("KIT_TEST_ZERO", 0);
  o.optimizer = zero_stage == 0 ? "adamw" : "zero" + std::to_string(zero_stage);
  o.lr = kLr;
  o.weight_decay = kWeightDecay;
  const grid::ProcessGrid g = grid::make_process_grid(shape);
  grid::Trainer3D trainer(make_model(cfg), g, o);
  for (const auto& chunk : trainer.chunks())
    EXPECT_EQ(std::dynamic_pointer_cast<grid::TensorParallelStageImpl>(chunk.ptr()) != nullptr, shape.tp > 1)
        << "on " << shape.str() << ": the stages are tensor-parallel at t > 1 and Problem 3's (no Problem 4 code) "
           "at t = 1";

  for (int64_t step = 0; step < 2; ++step) {
    const Batch b = make_batch(step, cfg.vocab_size);
    ref_opt.zero_grad();
    torch::Tensor ref_loss = kit::masked_cross_entropy(reference->forward(b.idx), b.labels, b.mask);
    ref_loss.backward();
    ref_opt.step();
    const grid::StepReport r = trainer.step(b.idx, b.labels, b.mask);
    EXPECT_NEAR(r.loss, ref_loss.item<double>(), 1e-10) << "the loss of step " << step + 1 << " on " << shape.str();
  }

  // This rank's shard of every parameter it holds equals the reference's (every replica,
  // every tensor rank, every stage: a replica that drifted shows here).
  const auto want = kit::tp::shard_state_dict(kit::state_dict(*reference), g.coords.tp, shape.tp);
  for (const auto& chunk : trainer.chunks())
    for (const auto& [name, p] : chunk->named_model_parameters())
      EXPECT_TRUE(kit_test::close(p, want.at(name), 1e-9, 1e-9))
          << name << " on rank " << kit::dist::get_rank() << " (stage " << chunk->stage() << ", tp " << g.coords.tp
          << ", dp " << g.coords.dp << ") after 2 steps";

  // The gathered checkpoint: the one-process model's format, and its values.
  const kit::TensorDict whole = trainer.gather_state_dict();
  if (kit::dist::get_rank() != 0) {
    EXPECT_EQ(whole.size(), 0u);
    return;
  }
  const kit::TensorDict ref = kit::state_dict(*reference);
  ASSERT_EQ(whole.size(), ref.size()) << "entries in the gathered checkpoint";
  for (const auto& [name, sizes] : kit::checkpoint_entries(cfg)) {
    ASSERT_TRUE(whole.contains(name)) << "the gathered checkpoint has no " << name;
    EXPECT_EQ(whole.at(name).sizes(), c10::IntArrayRef(sizes)) << name;
    EXPECT_TRUE(kit_test::close(whole.at(name), ref.at(name), 1e-9, 1e-9)) << name << " gathered";
  }
}

struct Case {
  int dp, pp, tp;
  std::string schedule = "1f1b";
  int m = 2, v = 1, zero = 0;
};

void run_grid(const Case& c) {
  const int n = c.dp * c.pp * c.tp;
  std::ostringstream what;
  what << "d=" << c.dp << " p=" << c.pp << " t=" << c.tp << " " << c.schedule << " m=" << c.m
       << (c.v > 1 ? " v=" + std::to_string(c.v) : "") << (c.zero ? " ZeRO-" + std::to_string(c.zero) : "");
  const auto run = kit_test::run_ranks(n, "grid_training", 100,
                                        {{"KIT_TEST_DP", std::to_string(c.dp)},
                                         {"KIT_TEST_PP", std::to_string(c.pp)},
                                         {"KIT_TEST_TP", std::to_string(c.tp)},
                                         {"KIT_TEST_SCHEDULE", c.schedule},
                                         {"KIT_TEST_M", std::to_string(c.m)},
                                         {"KIT_TEST_V", std::to_string(c.v)},
                                         {"KIT_TEST_ZERO", std::to_string(c.zero)}});
  kit_test::expect_all_ranks_pass(run, n, what.str());
  std::cout << what.str() << ": " << run.seconds << " s\n";
}

}  // namespace

// The six grids of the issue, each with another schedule or optimizer, so that together
// they cover GPipe, 1F1B, interleaving, ZeRO-1 and ZeRO-2 over the data group and the tied
// embedding on one rank, across two ranks, and across two ranks with tensor parallelism.
TEST(Grid3D, D2P2T2OneFOneB) { run_grid({2, 2, 2}); }
TEST(Grid3D, D1P2T2InterleavedTwoChunks) { run_grid({1, 2, 2, "interleaved", 2, 2}); }
TEST(Grid3D, D2P1T2ZeroOne) { run_grid({2, 1, 2, "1f1b", 2, 1, 1}); }
TEST(Grid3D, D2P2T1GPipeZeroTwo) { run_grid({2, 2, 1, "gpipe", 2, 1, 2}); }
TEST(Grid3D, D1P4T2OneFOneBFourMicroBatches) { run_grid({1, 4, 2, "1f1b", 4}); }
TEST(Grid3D, D4P1T1DataParallelOnly) { run_grid({4, 1, 1}); }
