// run_tensor_parallel: GPT-2 trained with Megatron-style tensor parallelism (Problem 4):
// every rank holds 1/t of each block's weights and of the vocabulary, runs the whole batch,
// and the ranks meet in two all-reduces per block forward and two backward.
//
//   ./build/run_tensor_parallel --world-size 2                      # t = 2 Gloo processes
//   ./build/run_tensor_parallel --tp 4 --preset tiny --n-head 4     # t must divide the heads
//   ./build/run_tensor_parallel --world-size 1                      # the single-process reference
//   srun -n 2 ./build/run_tensor_parallel --backend nccl ...         # one rank per task
//
// How it starts its ranks, its synthetic batches and every field it writes: README.md in
// this folder (run_tensor_parallel); the options: --help.
#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/run.h"
#include "dist/dist.h"
#include "kit/precision.h"
#include "model/checkpoint.h"
#include "model/gpt2.h"
#include "tensor_parallel/model.h"
#include "tensor_parallel/sharding.h"
#include "train/adamw.h"

namespace {

struct TpOptions : kit::SyntheticOptions {
  TpOptions() : SyntheticOptions("runs/tensor_parallel/{world}/rank{rank}.json") {}
  int world_size = 2;
  int64_t n_head = 0;  // 0: the preset's
  std::string save_checkpoint, init_from;
};

kit::GPT2Config config_of(const TpOptions& o) {
  kit::GPT2Config cfg = kit::synthetic_config(o);
  if (o.n_head > 0) cfg.n_head = o.n_head;
  return cfg;
}

// Every check that needs no process: the same in the launcher and in each worker (srun).
void check_options(const TpOptions& o, int world_size) {
  if (world_size < 1) throw kit::Error("--world-size must be at least 1 (got " + std::to_string(world_size) + ")");
  kit::check_synthetic_options(o);
  const kit::GPT2Config cfg = config_of(o);
  kit::check_model_fits(cfg, o.run.data.seq_len, o.vocab);
  if (cfg.n_head < 1 || cfg.n_embd % cfg.n_head != 0)
    throw kit::Error("--n-head " + std::to_string(cfg.n_head) + " must divide n_embd " + std::to_string(cfg.n_embd));
  kit::tp::check_divisible(cfg, world_size);  // names n_head, n_embd or vocab_size
  if (!o.init_from.empty() && !std::filesystem::exists(o.init_from))
    throw kit::Error("--init-from " + o.init_from + " does not exist: give a checkpoint written by train, "
                     "run_tensor_parallel --save-checkpoint or convert_checkpoint");
}

nlohmann::json bytes_json(const kit::tp::ParameterBytes& b) {
  return {{"blocks", b.blocks}, {"embeddings", b.embeddings}, {"other", b.other}, {"total", b.total()}};
}

int worker_main(const TpOptions& o, const kit::WorldInfo& world);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tensor-parallel (Megatron-LM) training of GPT-2 across processes: each rank holds 1/t of every "
               "block and of the vocabulary, runs the whole (synthetic) batch and takes one AdamW step per batch."};
  TpOptions o;
  app.add_option("--world-size,--world_size,--tp", o.world_size,
                 "Tensor-parallel ranks t the kit starts (under srun or torchrun: taken from there)")
      ->capture_default_str();
  kit::SyntheticHelp help;
  help.batch_size = "Rows per batch (every rank runs all of them)";
  help.vocab = "Vocabulary of the synthetic tokens (t must divide it)";
  kit::add_model_options(app, o, help);
  app.add_option("--n-head", o.n_head, "Attention heads (default: the preset's); t must divide it");
  kit::add_process_options(app, o);
  app.add_option("--save-checkpoint", o.save_checkpoint,
                 "After training, gather the shards and write the whole model here (the first assignment's "
                 "checkpoint format, read by train --init, kit::import_checkpoint and torch.load)");
  app.add_option("--init-from", o.init_from, "Start from this whole-model checkpoint instead of --seed's weights");
  return kit::guarded_main(argc, argv, app, [&] {
    // A t that does not divide the model's sizes fails in the launcher, before any process.
    return kit::run_ranks(
        app.count("--world-size") > 0 ? o.world_size : 0, o.world_size, o.port,
        "tensor-parallel ranks (" + o.backend + ")", [&] { check_options(o, o.world_size); },
        [&](const kit::WorldInfo& w) { return worker_main(o, w); });
  });
}

namespace {

int worker_main(const TpOptions& o, const kit::WorldInfo& world) {
  const int rank = world.rank, W = world.world_size;
  check_options(o, W);
  // Even one rank joins a process group: the model's group is the world (of size 1, whose
  // mappings do nothing). The launcher serves its store (kit::run_ranks).
  kit::RankRun run("run_tensor_parallel", o, world);
  const torch::Device device = kit::dist::device();
  const kit::Precision precision = kit::parse_precision(o.precision);
  const kit::GPT2Config cfg = config_of(o);
  const int64_t B = o.run.train.batch_size, T = o.run.data.seq_len;

  const auto batches = kit::synthetic_batches(o.steps, B, T, o.vocab, o.run.train.seed);
  kit::tp::TensorParallelGPT2 model(cfg, kit::dist::world_group());
  kit::tp::ParameterBytes full_bytes;
  {
    // The whole model from the seed on every rank (the same weights everywhere); only this
    // rank's shard is kept.
    kit::GPT2 full = kit::build_model(cfg, o.vocab, T, o.run.train.seed);
    if (!o.init_from.empty()) kit::import_checkpoint(*full, o.init_from);
    full_bytes = kit::tp::parameter_bytes(*full);
    model->load_full(*full);
  }
  model->to(device);
  model->train();
  torch::manual_seed(o.run.train.seed + 1);  // dropout: the same on every rank (see the top)
  kit::AdamW optimizer(model->parameters(),
                                torch::optim::AdamWOptions(o.run.train.lr).weight_decay(o.run.train.weight_decay));
  if (rank == 0)
    std::cout << "rank 0 of " << W << " (" << world.launcher_name() << ", " << o.backend << "): tensor parallel t = "
              << W << ", " << cfg.n_layer << " blocks, " << cfg.n_head << " heads, vocabulary " << cfg.vocab_size
              << std::endl;

  const kit::dist::Group group = model->group();
  const kit::StepTimer& timer = run.timer();
  int64_t optimizer_bytes = 0;
  run.steps(batches, rank == 0, [&](int64_t k, const kit::TokenBatch& b) {
    optimizer.zero_grad();
    torch::Tensor loss;
    {
      const kit::Autocast autocast(precision, device.type());  // bf16: the forward only (kit/precision.h)
      loss = model->loss(b.idx.to(device), b.labels.to(device), b.mask.to(device));
    }
    loss.backward();
    optimizer.step();
    if (k == 0) optimizer_bytes = kit::adamw_state_bytes(optimizer);
    return loss.item<double>();
  }, [&](int64_t k) { if (k == timer.warmup()) group.reset_counters(); });
  const kit::dist::Counters c = group.counters();  // the timed steps only

  if (!o.save_checkpoint.empty()) {
    const kit::TensorDict dict = model->full_state_dict();  // collective: every rank takes part
    if (rank == 0) {
      kit::GPT2 full(cfg);
      kit::load_state_dict(*full, dict, kit::CheckpointLayout::Kit, "the gathered shards");
      const std::filesystem::path path(o.save_checkpoint);
      if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
      kit::export_checkpoint(*full, o.save_checkpoint);
      std::cout << "saved the gathered model to " << o.save_checkpoint << std::endl;
    }
  }
  if (!o.run.out.empty()) {
    const double per = static_cast<double>(timer.timed_steps());
    const int64_t formula = 4 * cfg.n_layer * B * T * cfg.n_embd * 4;
    const double ar_bytes = static_cast<double>(c.all_reduce_bytes) / per;
    const kit::tp::ParameterBytes mine = kit::tp::parameter_bytes(*model);
    // tokens_per_sec: every token of the batch passes through every rank: do not sum over ranks.
    nlohmann::json m = run.metrics(B * T);
    m.update({{"n_layer", cfg.n_layer}, {"n_head", cfg.n_head}, {"n_embd", cfg.n_embd},
              {"vocab_size", cfg.vocab_size}, {"tensor_parallel", W}, {"losses", run.losses()},
              {"tp_all_reduce_calls_per_step", static_cast<double>(c.all_reduce_calls) / per},
              {"tp_all_reduce_bytes_per_step", ar_bytes},
              {"tp_comm_seconds_per_step", c.comm_seconds / per},
              {"formula_all_reduce_bytes_per_step", formula},
              {"non_block_all_reduce_bytes_per_step", ar_bytes - static_cast<double>(formula)},
              {"parameter_bytes", bytes_json(mine)}, {"full_parameter_bytes", bytes_json(full_bytes)},
              {"blocks_fraction", full_bytes.blocks > 0 ? static_cast<double>(mine.blocks) / full_bytes.blocks : 0.0},
              {"optimizer_state_bytes", optimizer_bytes}});
    run.write(m);
  }
  return 0;
}

}  // namespace
