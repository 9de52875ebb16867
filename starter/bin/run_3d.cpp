// run_3d: GPT-2 trained on a 3D grid of d x p x t processes (Problem 6, Megatron-LM's PTD-P):
// d-way data parallelism of a p-stage pipeline whose stages are split t ways by tensor
// parallelism.
//
//   ./build/run_3d --dp 2 --pp 2 --tp 2                  # 8 Gloo processes, 1F1B, 2 micro-batches
//   ./build/run_3d --dp 1 --pp 2 --tp 2 --schedule interleaved --virtual 2 --n-layer 4
//   ./build/run_3d --dp 2 --pp 1 --tp 2 --zero           # ZeRO-1 over each data-parallel group
//   ./build/run_3d --dp 1 --pp 1 --tp 1                  # the one-process reference
//   srun -n 8 ./build/run_3d --dp 2 --pp 2 --tp 2 --backend nccl   # one rank per task
//   torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set per process
//
// Without RANK or an srun step in the environment the program is the launcher: it checks the
// flags, serves the rendezvous and starts d*p*t copies of itself (with 1, the one rank runs in
// the launcher's own process). Under srun or torchrun the world size must equal d*p*t.
//
// Every rank builds the whole model from --seed (kit::build_model: the same weights on every
// rank) and keeps its own part (grid/trainer.h). Batches are synthetic and global: per step
// torch::randint(vocab, {batch, seq_len + 1}) after torch::manual_seed(seed + 1000), input =
// tokens[:, :-1], labels = tokens[:, 1:], mask all ones; data-parallel replica r trains on
// rows [r*B/d, (r+1)*B/d), cut into --chunks micro-batches.
//
// Metrics (--out, {rank} and {world} replaced), over the timed steps (after --warmup):
//   dp, pp, tp (the grid), coords (this rank's), schedule, microbatches, virtual_chunks, zero;
//   tokens_per_sec: the global batch's tokens per second (the same job rate on every rank);
//   losses (the global batch's), step_seconds, timed_step_seconds, training_time;
//   comm_seconds_per_step: {data, tensor, pipeline, embedding}, this rank's time blocked in
//     each kind of communication (grid/trainer.h: pipeline counts the time waiting in P2P
//     receives, so it includes the bubble);
//   parameter_bytes (this rank's parameters), peak_tensor_bytes (the most CPU tensor bytes
//     held at once during a step, kit/memory.h; null on a GPU), peak_rss_bytes.
// --save FILE: the whole model after training, gathered from the grid onto rank 0 and written
// as the one-process model's checkpoint (model/checkpoint.h, Kit layout).
// --trace: each rank's pipeline schedule over the timed steps as Chrome trace-event JSON for
// Perfetto (kit/trace.h, pipeline_training/trace_events.h): track tid = world rank, named with
// its grid coordinates; F/B events with their P2P receives nested (the tensor- and
// data-parallel collectives are not timed one by one: comm_seconds_per_step sums them).
#include <sys/resource.h>
#include <torch/torch.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "dist/dist.h"
#include "dist/launch.h"
#include "grid/grid.h"
#include "grid/trainer.h"
#include "kit/memory.h"
#include "model/checkpoint.h"
#include "model/gpt2.h"
#include "pipeline_training/schedules.h"
#include "pipeline_training/trace_events.h"
#include "project/cli.h"
#include "train/loop.h"

namespace {

struct Run3DOptions {
  kit::RunOptions run;
  kit::grid::GridShape grid{1, 1, 1};
  int64_t microbatches = 2;
  int64_t virtual_chunks = 1;
  std::string schedule = "1f1b";
  bool zero = false;
  int64_t n_layer = 0;  // 0: the preset's
  int64_t vocab = 1000;
  int64_t steps = 5;
  int64_t warmup = -1;  // -1: 1, or 0 when there is a single step
  double weight_decay = 0.0;
  std::string save;
  std::string trace;  // --trace: a Chrome trace per rank
  std::string backend = "gloo";
  int port = 0;
};

kit::GPT2Config config_of(const Run3DOptions& o) {
  kit::GPT2Config cfg = kit::model_config(o.run);
  if (o.n_layer > 0) cfg.n_layer = o.n_layer;
  cfg.vocab_size = o.vocab;  // what kit::build_model does for synthetic tokens
  return cfg;
}

int64_t warmup_of(const Run3DOptions& o) { return o.warmup >= 0 ? o.warmup : std::min<int64_t>(1, o.steps - 1); }

// Every check that needs no process: the same in the launcher and in each worker (srun).
void check_options(const Run3DOptions& o, int world_size) {
  kit::grid::check_shape(o.grid, world_size);
  kit::pp::PipelineShape shape{o.grid.pp, o.microbatches, o.virtual_chunks};
  kit::pp::check_shape(kit::pp::parse_schedule_kind(o.schedule), shape);
  if (o.steps < 1) throw kit::Error("--steps must be at least 1 (got " + std::to_string(o.steps) + ")");
  if (o.warmup >= o.steps || o.warmup < -1)
    throw kit::Error("--warmup " + std::to_string(o.warmup) + " must be at least 0 and below --steps " +
                     std::to_string(o.steps) + ": at least one batch must be timed");
  const int64_t B = o.run.train.batch_size, dm = o.grid.dp * o.microbatches;
  if (B < 1 || B % dm != 0)
    throw kit::Error("--batch-size " + std::to_string(B) + " must be a positive multiple of --dp x --chunks = " +
                     std::to_string(dm) + ": each of the d replicas cuts its rows into m equal micro-batches");
  if (o.run.data.seq_len < 1 || o.vocab < 2)
    throw kit::Error("--seq-len must be positive and --vocab-size at least 2");
  const kit::GPT2Config cfg = config_of(o);
  if (o.run.data.seq_len > cfg.n_positions)
    throw kit::Error("--seq-len " + std::to_string(o.run.data.seq_len) + " is longer than preset '" + cfg.name +
                     "' allows (n_positions = " + std::to_string(cfg.n_positions) + ")");
  if (cfg.n_layer < shape.stages())
    throw kit::Error("the model has " + std::to_string(cfg.n_layer) + " blocks but the pipeline has " +
                     std::to_string(shape.stages()) + " stages: use --n-layer " + std::to_string(shape.stages()) +
                     " or more, or a smaller --pp / --virtual");
  if (cfg.n_head % o.grid.tp != 0 || cfg.n_embd % o.grid.tp != 0 || o.vocab % o.grid.tp != 0)
    throw kit::Error("--tp " + std::to_string(o.grid.tp) + " must divide the heads (" + std::to_string(cfg.n_head) +
                     "), the width (" + std::to_string(cfg.n_embd) + ") and --vocab-size (" +
                     std::to_string(o.vocab) + ")");
  if (!o.trace.empty())  // a --trace directory that does not exist fails before any process
    for (int r = 0; r < o.grid.world(); ++r)
      kit::trace::check_trace_path(kit::rank_path(o.trace, r, o.grid.world()), "--trace");
}

// This rank's timed steps as a Chrome trace: its own track only, so the ranks' files merge.
void write_trace(const Run3DOptions& o, const kit::grid::ProcessGrid& grid, int rank, int W,
                 std::vector<kit::trace::Event> events) {
  const auto& c = grid.coords;
  kit::trace::Trace trace;
  trace.tracks.push_back({rank, "rank " + std::to_string(rank) + " (dp " + std::to_string(c.dp) + ", pp " +
                                    std::to_string(c.pp) + ", tp " + std::to_string(c.tp) + ")"});
  trace.events = std::move(events);
  trace.other = {{"program", "run_3d"}, {"schedule", o.schedule}, {"world", W}, {"rank", rank},
                 {"grid", {{"dp", o.grid.dp}, {"pp", o.grid.pp}, {"tp", o.grid.tp}}},
                 {"coords", {{"dp", c.dp}, {"pp", c.pp}, {"tp", c.tp}}},
                 {"microbatches", o.microbatches}, {"virtual_chunks", o.virtual_chunks},
                 {"steps", o.steps}, {"warmup", warmup_of(o)},
                 {"clock", "steady clock (shared by the processes of one machine), microseconds since its epoch"}};
  kit::trace::write_chrome_trace(kit::rank_path(o.trace, rank, W), trace, "--trace");
}

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

int worker_main(const Run3DOptions& o, int rank, int W, const std::string& launcher) {
  check_options(o, W);
  kit::dist::init_process_group(o.backend, rank, W);
  kit::set_threads(o.run.train.threads);
  const bool count_memory = kit::dist::device().is_cpu();
  if (count_memory) kit::memory::enable_cpu_counting();
  const kit::GPT2Config cfg = config_of(o);
  const kit::grid::ProcessGrid grid = kit::grid::make_process_grid(o.grid);

  kit::grid::Options3D t;
  t.microbatches = o.microbatches;
  t.virtual_chunks = o.virtual_chunks;
  t.schedule = kit::pp::parse_schedule_kind(o.schedule);
  t.zero = o.zero;
  t.lr = o.run.train.lr;
  t.weight_decay = o.weight_decay;
  std::unique_ptr<kit::grid::Trainer3D> trainer;
  {
    kit::GPT2 full = kit::build_model(cfg, o.vocab, o.run.data.seq_len, o.run.train.seed);
    trainer = std::make_unique<kit::grid::Trainer3D>(full, grid, t);
  }  // the whole model is let go: each rank keeps its part
  torch::manual_seed(o.run.train.seed + 1 + static_cast<uint64_t>(rank));  // dropout: this rank's own
  int64_t parameter_bytes = 0;
  for (const auto& p : trainer->parameters()) parameter_bytes += p.numel() * static_cast<int64_t>(p.element_size());
  if (rank == 0)
    std::cout << "rank 0 of " << W << " (" << launcher << ", " << o.backend << "): grid " << o.grid.str() << ", "
              << o.schedule << ", m = " << o.microbatches << (o.zero ? ", ZeRO-1" : "") << ", " << cfg.n_layer
              << " blocks" << std::endl;

  const int64_t B = o.run.train.batch_size, T = o.run.data.seq_len, warmup = warmup_of(o);
  torch::manual_seed(o.run.train.seed + 1000);  // the same global batches on every rank
  std::vector<torch::Tensor> tokens;
  for (int64_t k = 0; k < o.steps; ++k) tokens.push_back(torch::randint(o.vocab, {B, T + 1}, torch::kInt64));
  const torch::Tensor mask = torch::ones({B, T});
  std::vector<double> losses, step_seconds;
  kit::grid::CommSeconds comm;
  int64_t peak_tensor_bytes = 0;
  std::vector<kit::trace::Event> trace_events;  // --trace: every timed step's
  auto t_timed = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < o.steps; ++k) {
    if (k == warmup) t_timed = std::chrono::steady_clock::now();
    kit::memory::reset_cpu_peak();
    const torch::Tensor& x = tokens[static_cast<size_t>(k)];
    const auto r = trainer->step(x.narrow(1, 0, T), x.narrow(1, 1, T), mask);
    peak_tensor_bytes = std::max(peak_tensor_bytes, kit::memory::cpu_bytes_peak());
    losses.push_back(r.loss);
    step_seconds.push_back(r.seconds);
    if (k >= warmup && !o.trace.empty())
      for (auto& e : kit::pp::measured_events(r.batch, rank, {o.virtual_chunks, 1}, k))
        trace_events.push_back(std::move(e));
    if (k >= warmup) {
      comm.data += r.comm.data;
      comm.tensor += r.comm.tensor;
      comm.pipeline += r.comm.pipeline;
      comm.embedding += r.comm.embedding;
    }
    if (rank == 0 && o.run.train.progress)
      std::cout << "step " << k << "  loss " << r.loss << "  " << r.seconds << " s" << std::endl;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_timed).count();
  const int64_t timed_steps = o.steps - warmup;

  if (!o.trace.empty()) write_trace(o, grid, rank, W, std::move(trace_events));
  const kit::TensorDict whole = o.save.empty() ? kit::TensorDict() : trainer->gather_state_dict();
  if (!o.save.empty() && rank == 0) {
    kit::GPT2 model(cfg);
    kit::load_state_dict(*model, whole, kit::CheckpointLayout::Kit, "the gathered grid");
    kit::export_checkpoint(*model, o.save);
    std::cout << "saved the whole model to " << o.save << std::endl;
  }
  if (!o.run.out.empty()) {
    const auto& c = grid.coords;
    const std::vector<double> timed(step_seconds.begin() + warmup, step_seconds.end());
    const double per = static_cast<double>(timed_steps);
    nlohmann::json m = {
        {"program", "run_3d"}, {"preset", o.run.preset}, {"n_layer", cfg.n_layer}, {"n_head", cfg.n_head},
        {"n_embd", cfg.n_embd}, {"vocab_size", cfg.vocab_size}, {"dp", o.grid.dp}, {"pp", o.grid.pp},
        {"tp", o.grid.tp}, {"world_size", W}, {"rank", rank},
        {"coords", {{"dp", c.dp}, {"pp", c.pp}, {"tp", c.tp}}}, {"schedule", o.schedule},
        {"microbatches", o.microbatches}, {"virtual_chunks", o.virtual_chunks}, {"zero", o.zero},
        {"backend", o.backend}, {"launcher", launcher}, {"global_batch_size", B}, {"seq_len", T},
        {"steps", o.steps}, {"warmup", warmup}, {"lr", o.run.train.lr}, {"threads", o.run.train.threads},
        {"step_seconds", step_seconds}, {"timed_step_seconds", timed}, {"training_time", wall},
        {"tokens_per_sec", wall > 0 ? static_cast<double>(timed_steps * B * T) / wall : 0.0},
        {"losses", losses},
        {"comm_seconds_per_step",
         {{"data", comm.data / per}, {"tensor", comm.tensor / per}, {"pipeline", comm.pipeline / per},
          {"embedding", comm.embedding / per}}},
        {"parameter_bytes", parameter_bytes},
        {"peak_tensor_bytes", count_memory ? nlohmann::json(peak_tensor_bytes) : nlohmann::json()},
        {"peak_rss_bytes", peak_rss_bytes()}};
    kit::write_rank_json(o.run.out, rank, W, m.dump(1));
  }
  kit::dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT-2 trained on a 3D grid of processes (Megatron-LM's PTD-P): --dp data-parallel replicas of a "
               "--pp-stage pipeline whose stages are split --tp ways by tensor parallelism."};
  Run3DOptions o;
  o.run.preset = "cpu-small";
  o.run.train.batch_size = 8;
  o.run.data.seq_len = 64;
  o.run.out = "runs/grid/{world}/rank{rank}.json";
  int dp = 1, pp = 1, tp = 1;
  std::string presets;
  for (const auto& n : kit::gpt2_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  app.add_option("--dp", dp, "Data-parallel degree d")->capture_default_str();
  app.add_option("--pp", pp, "Pipeline-parallel degree p (stages, one per rank of a pipeline)")->capture_default_str();
  app.add_option("--tp", tp, "Tensor-parallel degree t (consecutive ranks: keep it within a node)")
      ->capture_default_str();
  app.add_option("--chunks,--microbatches", o.microbatches, "Micro-batches m per data-parallel replica")
      ->capture_default_str();
  app.add_option("--schedule", o.schedule, "gpipe, 1f1b or interleaved")->capture_default_str();
  app.add_option("--virtual", o.virtual_chunks, "Model chunks v per rank (interleaved only; v*p stages)")
      ->capture_default_str();
  app.add_flag("--zero", o.zero, "ZeRO-1 over each data-parallel group (optimizer state sharded d ways)");
  app.add_option("--preset,--model", o.run.preset, "Model preset: " + presets)->capture_default_str();
  app.add_option("--n-layer", o.n_layer, "Transformer blocks (default: the preset's); at least v*p");
  app.add_option("--dropout", o.run.dropout, "Dropout probability (default: the preset's)");
  app.add_option("--batch-size", o.run.train.batch_size, "Rows of the global batch (a multiple of d*m)")
      ->capture_default_str();
  app.add_option("--seq-len", o.run.data.seq_len, "Tokens per row")->capture_default_str();
  app.add_option("--vocab-size", o.vocab, "Vocabulary of the synthetic tokens (t must divide it)")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Batches, one AdamW step each")->capture_default_str();
  app.add_option("--warmup", o.warmup, "The first W of the --steps batches are not timed (default 1; 0 when "
                                       "--steps is 1)");
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  app.add_option("--save", o.save, "Write the whole trained model here (gathered on rank 0; the one-process "
                                   "checkpoint format)");
  kit::add_process_options(app, o.run, o.backend, o.port);
  app.add_option("--trace", o.trace,
                 "Write this rank's pipeline schedule over the timed steps as Chrome trace-event JSON here, for "
                 "https://ui.perfetto.dev or chrome://tracing ({rank} and {world} replaced, else .rank<r> added; "
                 "the directory must exist): F/B events with their P2P receives, one track per rank");
  app.add_flag("!--no-progress", o.run.train.progress, "Do not print the loss of every step");
  app.footer("Metrics per rank (--out): tokens_per_sec (the global batch's), losses, step seconds, "
             "comm_seconds_per_step {data, tensor, pipeline, embedding}, parameter_bytes, peak_tensor_bytes, "
             "peak_rss_bytes, and the rank's grid coordinates.");
  return kit::guarded_main(argc, argv, app, [&] {
    o.grid = {dp, pp, tp};
    return kit::launcher_or_worker(
        0,  // under srun or torchrun, check_options names the grid that does not fit the world
        [&] {
          check_options(o, o.grid.world());  // a bad flag fails here, before any process
          return kit::serve_and_start_ranks(o.grid.world(), o.port, "ranks of the grid " + o.grid.str(),
                                            [&] { return worker_main(o, 0, 1, "none"); });
        },
        [&](const kit::WorldInfo& w) { return worker_main(o, w.rank, w.world_size, w.launcher_name()); });
  });
}
