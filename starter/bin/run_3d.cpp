// run_3d: GPT-2 trained on a 3D grid of d x p x t processes (Problem 6, Megatron-LM's PTD-P):
// d-way data parallelism of a p-stage pipeline whose stages are split t ways by tensor
// parallelism.
//
//   ./build/run_3d --dp 2 --pp 2 --tp 2                  # 8 Gloo processes, 1F1B, 2 micro-batches
//   ./build/run_3d --dp 1 --pp 2 --tp 2 --schedule interleaved --virtual 2 --n-layer 4
//   ./build/run_3d --dp 2 --pp 1 --tp 2 --zero           # ZeRO-1 over each data-parallel group
//   ./build/run_3d --dp 2 --pp 2 --tp 1 --optimizer zero2  # ZeRO-2: the gradients sharded too
//   ./build/run_3d --dp 1 --pp 1 --tp 1                  # the one-process reference
//   srun -n 8 ./build/run_3d --dp 2 --pp 2 --tp 2 --backend nccl   # one rank per task
//
// How it starts its ranks, its synthetic batches and every field it writes: README.md in
// this folder (run_3d); the options: --help.
#include <sys/resource.h>
#include <torch/torch.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/run.h"
#include "dist/dist.h"
#include "grid/grid.h"
#include "grid/trainer.h"
#include "kit/memory.h"
#include "kit/precision.h"
#include "model/checkpoint.h"
#include "model/gpt2.h"
#include "pipeline_training/schedules.h"
#include "pipeline_training/trace_events.h"
#include "zero/data_parallel_optimizer.h"

namespace {

struct Run3DOptions : kit::SyntheticOptions {
  Run3DOptions() : SyntheticOptions("runs/grid/{world}/rank{rank}.json") { steps = 5; }
  kit::grid::GridShape grid{1, 1, 1};
  int64_t microbatches = 2;
  int64_t virtual_chunks = 1;
  std::string schedule = "1f1b";
  std::string optimizer = "adamw";  // --zero: zero1
  bool zero = false;
  bool recompute = false;  // Problem 6.3
  double weight_decay = 0.0;
  std::string save;
  std::string trace;  // --trace: a Chrome trace per rank
};

kit::GPT2Config config_of(const Run3DOptions& o) {
  kit::GPT2Config cfg = kit::synthetic_config(o);
  cfg.vocab_size = o.vocab;  // what kit::build_model does for synthetic tokens
  return cfg;
}

// Every check that needs no process: the same in the launcher and in each worker (srun).
void check_options(const Run3DOptions& o, int world_size) {
  kit::grid::check_shape(o.grid, world_size);
  const int stage = kit::zero::zero_stage_of(o.optimizer);
  if (stage < 0 || stage > 2)
    throw kit::Error("--optimizer " + o.optimizer + " is not one of adamw, zero1, zero2 (zero3, FSDP, gathers whole "
                     "GPT-2 units, which the grid's stages split: run_zero has it)");
  if (o.zero && o.optimizer != "zero1")
    throw kit::Error("--zero is --optimizer zero1, but --optimizer " + o.optimizer + " was given too: give one of them");
  kit::pp::PipelineShape shape{o.grid.pp, o.microbatches, o.virtual_chunks};
  kit::pp::check_shape(kit::pp::parse_schedule_kind(o.schedule), shape);
  kit::check_synthetic_options(o);
  const int64_t B = o.run.train.batch_size;
  if (B % o.grid.dp != 0)
    throw kit::Error("--batch-size " + std::to_string(B) + " must be a multiple of --dp " + std::to_string(o.grid.dp) +
                     ": each of the d replicas takes an equal share of the rows");
  kit::pp::check_microbatches(B / o.grid.dp, o.microbatches, "each data-parallel replica's rows");
  const kit::GPT2Config cfg = config_of(o);
  kit::check_model_fits(cfg, o.run.data.seq_len, o.vocab);
  kit::pp::check_blocks_fit(cfg.n_layer, shape);
  if (cfg.n_head % o.grid.tp != 0 || cfg.n_embd % o.grid.tp != 0 || o.vocab % o.grid.tp != 0)
    throw kit::Error("--tp " + std::to_string(o.grid.tp) + " must divide the heads (" + std::to_string(cfg.n_head) +
                     "), the width (" + std::to_string(cfg.n_embd) + ") and --vocab-size (" +
                     std::to_string(o.vocab) + ")");
  if (!o.trace.empty()) kit::check_trace_paths(o.trace, o.grid.world());
}

int worker_main(const Run3DOptions& o, const kit::WorldInfo& world);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT-2 trained on a 3D grid of processes (Megatron-LM's PTD-P): --dp data-parallel replicas of a "
               "--pp-stage pipeline whose stages are split --tp ways by tensor parallelism."};
  Run3DOptions o;
  int dp = 1, pp = 1, tp = 1;
  app.add_option("--dp", dp, "Data-parallel degree d")->capture_default_str();
  app.add_option("--pp", pp, "Pipeline-parallel degree p (stages, one per rank of a pipeline)")->capture_default_str();
  app.add_option("--tp", tp, "Tensor-parallel degree t (consecutive ranks: keep it within a node)")
      ->capture_default_str();
  kit::add_microbatches_option(app, o.microbatches, "Micro-batches m per data-parallel replica");
  app.add_option("--schedule", o.schedule, "gpipe, 1f1b or interleaved")->capture_default_str();
  app.add_option("--virtual", o.virtual_chunks, "Model chunks v per rank (interleaved only; v*p stages)")
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer,
                 "Over each data-parallel group: adamw (the gradients averaged, then AdamW), zero1 (ZeRO-1: the "
                 "optimizer state sharded d ways) or zero2 (ZeRO-2: the gradients kept between steps too)")
      ->capture_default_str();
  app.add_flag("--zero", o.zero, "The same as --optimizer zero1");
  app.add_flag("--recompute", o.recompute,
               "Activation recomputation (Problem 6.3): each stage keeps only its blocks' inputs and runs every "
               "tensor-parallel block's forward again in the backward");
  kit::SyntheticHelp help;
  help.n_layer = "Transformer blocks (default: the preset's); at least v*p";
  help.batch_size = "Rows of the global batch (a multiple of d*m)";
  help.vocab = "Vocabulary of the synthetic tokens (t must divide it)";
  kit::add_model_options(app, o, help);
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  app.add_option("--save", o.save, "Write the whole trained model here (gathered on rank 0; the one-process "
                                   "checkpoint format)");
  kit::add_process_options(app, o);
  kit::add_trace_option(app, o.trace, "pipeline schedule over the timed steps",
                        "F/B events with their P2P receives, one track per rank");
  app.footer("Metrics per rank (--out): tokens_per_sec (the global batch's), losses, step seconds, "
             "comm_seconds_per_step {data, tensor, pipeline, embedding}, parameter_bytes, peak_tensor_bytes, "
             "peak_rss_bytes, recompute, and the rank's grid coordinates.");
  return kit::guarded_main(argc, argv, app, [&] {
    o.grid = {dp, pp, tp};
    if (o.zero && app.count("--optimizer") == 0) o.optimizer = "zero1";
    // Under srun or torchrun, check_options names the grid that does not fit the world.
    return kit::run_ranks(0, o.grid.world(), o.port, "ranks of the grid " + o.grid.str(),
                          [&] { check_options(o, o.grid.world()); },  // a bad flag fails before any process
                          [&](const kit::WorldInfo& w) { return worker_main(o, w); });
  });
}

namespace {

int worker_main(const Run3DOptions& o, const kit::WorldInfo& world) {
  const int rank = world.rank, W = world.world_size;
  check_options(o, W);
  kit::RankRun run("run_3d", o, world);
  const torch::Device device = kit::dist::device();
  kit::memory::enable_counting(device);  // tensor bytes on the rank's device (kit/memory.h)
  const bool count_memory = kit::memory::why_not_counted(device).empty();
  const kit::GPT2Config cfg = config_of(o);
  const kit::grid::ProcessGrid grid = kit::grid::make_process_grid(o.grid);
  const auto& c = grid.coords;

  kit::grid::Options3D t;
  t.microbatches = o.microbatches;
  t.virtual_chunks = o.virtual_chunks;
  t.schedule = kit::pp::parse_schedule_kind(o.schedule);
  t.optimizer = o.optimizer;
  t.lr = o.run.train.lr;
  t.weight_decay = o.weight_decay;
  t.precision = kit::parse_precision(o.precision);
  // The whole model from the seed on every rank; each rank keeps its part.
  kit::grid::Trainer3D trainer(kit::build_model(cfg, o.vocab, o.run.data.seq_len, o.run.train.seed), grid, t);
  for (const auto& chunk : trainer.chunks()) chunk.ptr()->set_recompute(o.recompute);
  int64_t parameter_bytes = 0;
  for (const auto& p : trainer.parameters()) parameter_bytes += kit::memory::bytes_of(p);
  if (rank == 0)
    std::cout << "rank 0 of " << W << " (" << world.launcher_name() << ", " << o.backend << "): grid "
              << o.grid.str() << ", " << o.schedule << ", m = " << o.microbatches << ", " << o.optimizer
              << (o.recompute ? ", recomputing activations" : "")
              << ", " << cfg.n_layer << " blocks" << std::endl;

  const int64_t B = o.run.train.batch_size, T = o.run.data.seq_len;
  const auto batches = kit::synthetic_batches(o.steps, B, T, o.vocab, o.run.train.seed);  // the same global batches
  // Dropout, after the batches (drawing them seeds the generator): the replica's own masks,
  // the same on every rank of a replica, whose tensor-parallel ranks must drop the same
  // elements of the activations they all hold.
  torch::manual_seed(o.run.train.seed + 1 + static_cast<uint64_t>(c.dp));
  const kit::StepTimer& timer = run.timer();
  kit::grid::CommSeconds comm;
  int64_t peak_tensor_bytes = 0;
  std::vector<kit::trace::Event> trace_events;  // --trace: every timed step's
  kit::grid::StepReport r;
  run.steps(batches, rank == 0, [&](int64_t, const kit::TokenBatch& b) {
    kit::memory::reset_peak(device);
    r = trainer.step(b.idx, b.labels, b.mask);
    return kit::StepOutcome(r.loss, r.seconds);  // the trainer's own clock
  }, {}, [&](int64_t k) {
    peak_tensor_bytes = std::max(peak_tensor_bytes, kit::memory::bytes_peak(device));
    if (timer.timed(k) && !o.trace.empty())
      for (auto& e : kit::pp::measured_events(r.batch, rank, {o.virtual_chunks, 1}, k))
        trace_events.push_back(std::move(e));
    if (timer.timed(k)) {
      comm.data += r.comm.data;
      comm.tensor += r.comm.tensor;
      comm.pipeline += r.comm.pipeline;
      comm.embedding += r.comm.embedding;
    }
  });

  const nlohmann::json grid_json = {{"dp", o.grid.dp}, {"pp", o.grid.pp}, {"tp", o.grid.tp}},
                       coords = {{"dp", c.dp}, {"pp", c.pp}, {"tp", c.tp}};
  if (!o.trace.empty())
    kit::write_rank_trace(o.trace, rank, W,
                          "rank " + std::to_string(rank) + " (dp " + std::to_string(c.dp) + ", pp " +
                              std::to_string(c.pp) + ", tp " + std::to_string(c.tp) + ")",
                          std::move(trace_events),
                          {{"program", "run_3d"}, {"schedule", o.schedule}, {"grid", grid_json}, {"coords", coords},
                           {"microbatches", o.microbatches}, {"virtual_chunks", o.virtual_chunks},
                           {"steps", o.steps}, {"warmup", timer.warmup()}});
  const kit::TensorDict whole = o.save.empty() ? kit::TensorDict() : trainer.gather_state_dict();
  if (!o.save.empty() && rank == 0) {
    kit::GPT2 model(cfg);
    kit::load_state_dict(*model, whole, kit::CheckpointLayout::Kit, "the gathered grid");
    kit::export_checkpoint(*model, o.save);
    std::cout << "saved the whole model to " << o.save << std::endl;
  }
  if (!o.run.out.empty()) {
    const double per = static_cast<double>(timer.timed_steps());
    nlohmann::json m = run.metrics(B * T);
    m.erase("batch_size");  // the global batch's rows, below
    m.update({{"n_layer", cfg.n_layer}, {"n_head", cfg.n_head}, {"n_embd", cfg.n_embd},
              {"vocab_size", cfg.vocab_size}, {"dp", o.grid.dp}, {"pp", o.grid.pp}, {"tp", o.grid.tp},
              {"coords", coords}, {"schedule", o.schedule}, {"microbatches", o.microbatches},
              {"virtual_chunks", o.virtual_chunks}, {"optimizer", o.optimizer}, {"zero", o.optimizer != "adamw"},
              {"master_weights", kit::zero::master_weights(kit::parse_precision(o.precision), o.optimizer)},
              {"recompute", o.recompute},
              {"global_batch_size", B}, {"losses", run.losses()},
              {"comm_seconds_per_step",
               {{"data", comm.data / per}, {"tensor", comm.tensor / per}, {"pipeline", comm.pipeline / per},
                {"embedding", comm.embedding / per}}},
              {"parameter_bytes", parameter_bytes},
              {"peak_tensor_bytes", count_memory ? nlohmann::json(peak_tensor_bytes) : nlohmann::json()},
              {"peak_rss_bytes", kit::memory::peak_rss_bytes()}});
    run.write(m);
  }
  return 0;
}

}  // namespace
