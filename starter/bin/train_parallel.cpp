// train_parallel: GPT-2 trained on a grid of d x p x t processes, the training program of
// Assignments 2 and 3. d-way data parallelism of a p-stage pipeline whose stages are split
// t ways by tensor parallelism (Megatron-LM's PTD-P); one trainer (grid/trainer.h) runs
// every shape, and each problem is a command line of it:
//
//   ./build/train_parallel --pp 4 --schedule 1f1b --micro-batches 8       # Problem 3: a pipeline
//   ./build/train_parallel --pp 2 --schedule interleaved --virtual 2 --n-layer 4 --micro-batches 4
//   ./build/train_parallel --tp 2 --save runs/tp.pt                        # Problem 4: tensor parallel
//   ./build/train_parallel --dp 2 --optimizer zero2 --batch-size 16        # Problem 5: ZeRO-1/2 (zero1, zero2)
//   ./build/train_parallel --dp 2 --optimizer zero3 --batch-size 16        # Problem 5.5: FSDP
//   ./build/train_parallel --dp 2 --pp 2 --tp 2                            # Problem 6: the 3D grid
//   ./build/train_parallel --dp 2 --pp 1 --tp 2 --zero                     # ZeRO-1 over each data group
//   ./build/train_parallel --dp 2 --pp 2 --tp 1 --optimizer zero2
//   ./build/train_parallel                                                 # the one-process reference
//   srun -n 8 ./build/train_parallel --dp 2 --pp 2 --tp 2 --backend nccl   # one rank per task
//
// The loop below is the run; what it measures (memory, timelines, traces, the tests' rank
// files, failure injection) hangs on the trainer's hooks. How it starts its ranks, its
// synthetic batches and every field it writes: README.md in this folder; the options: --help.
#include <torch/torch.h>

#include <filesystem>
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
#include "pipeline/model_parallel.h"
#include "pipeline_training/measured.h"
#include "pipeline_training/schedules.h"
#include "pipeline_training/simulate.h"
#include "pipeline_training/trace_events.h"
#include "tensor_parallel/model.h"
#include "tensor_parallel/sharding.h"
#include "zero/data_parallel_optimizer.h"

namespace {
namespace pp = kit::pp;

struct ParallelOptions : kit::SyntheticOptions {
  ParallelOptions() : SyntheticOptions("runs/parallel/{world}/rank{rank}.json") { steps = 5; }
  kit::grid::GridShape grid{1, 1, 1};
  int64_t microbatches = 0;  // --chunks; 0: p, the fewest that fill the pipeline
  int64_t n_head = 0;        // 0: the preset's
  int64_t virtual_chunks = 1;
  std::string schedule = "1f1b";
  std::string optimizer = "adamw";  // --zero: zero1
  bool zero = false;
  bool recompute = false;  // Problem 6.3
  bool memory = false;
  double weight_decay = 0.0;
  std::string save, save_ranks, timeline, trace, schedule_file, init_from;
  bool precheck = true;
  int fail_rank = -1;
  int64_t fail_at_action = 0;
};

kit::GPT2Config config_of(const ParallelOptions& o) {
  kit::GPT2Config cfg = kit::synthetic_config(o);
  cfg.vocab_size = o.vocab;  // what kit::build_model does for synthetic tokens
  if (o.n_head > 0) cfg.n_head = o.n_head;
  return cfg;
}

// --optimizer zero3 (FSDP) shards whole GPT-2 units and runs the model's forward through them:
// no stages to split, save or trace.
void check_zero3_options(const ParallelOptions& o) {
  if (o.grid.pp != 1 || o.grid.tp != 1)
    throw kit::Error("--optimizer zero3 (FSDP) gathers whole GPT-2 units, which --pp and --tp split: run it with "
                     "--dp alone (--pp 1 --tp 1), or use adamw, zero1 or zero2 on the grid " + o.grid.str());
  const std::pair<bool, const char*> stage_flags[] = {
      {o.recompute, "--recompute"}, {!o.save.empty(), "--save"}, {!o.save_ranks.empty(), "--save-ranks"},
      {!o.timeline.empty(), "--timeline"}, {!o.trace.empty(), "--trace"}, {!o.schedule_file.empty(), "--schedule-file"}};
  for (const auto& [given, flag] : stage_flags)
    if (given)
      throw kit::Error(std::string(flag) + " works on the pipeline's stages, which --optimizer zero3 does not have "
                       "(FSDP runs the whole model's forward): use adamw, zero1 or zero2 with it");
}

// Every check that needs no process, the same in the launcher and in each worker (srun):
// a bad flag or a schedule that cannot finish fails here, not as a timeout later. Returns
// every pipeline rank's actions.
pp::Schedules checked_schedules(const ParallelOptions& o, int world_size) {
  kit::grid::check_shape(o.grid, world_size);
  const int stage = kit::zero::zero_stage_of(o.optimizer);
  if (stage < 0) throw kit::Error("--optimizer " + o.optimizer + " is not one of adamw, zero1, zero2, zero3");
  if (o.zero && o.optimizer != "zero1")
    throw kit::Error("--zero is --optimizer zero1, but --optimizer " + o.optimizer + " was given too: give one of them");
  if (stage == 3) check_zero3_options(o);
  kit::check_synthetic_options(o);
  const pp::ScheduleKind kind = pp::parse_schedule_kind(o.schedule);
  const pp::PipelineShape shape{o.grid.pp, o.microbatches, o.virtual_chunks};
  if (kind != pp::ScheduleKind::Interleaved && o.virtual_chunks != 1)
    throw kit::Error("--virtual " + std::to_string(o.virtual_chunks) +
                     " needs --schedule interleaved (gpipe and 1f1b run one chunk per rank)");
  if (kind == pp::ScheduleKind::Interleaved && o.microbatches % o.grid.pp != 0)
    throw kit::Error("--schedule interleaved needs --chunks (micro-batches, " + std::to_string(o.microbatches) +
                     ") to be a multiple of the " + std::to_string(o.grid.pp) +
                     " pipeline ranks: its groups of p micro-batches go through each chunk in turn. Use --chunks " +
                     std::to_string(o.grid.pp) + ", " + std::to_string(2 * o.grid.pp) + ", ...");
  const int64_t B = o.run.train.batch_size;
  if (B % o.grid.dp != 0)
    throw kit::Error("--batch-size " + std::to_string(B) + " must be a multiple of --dp " + std::to_string(o.grid.dp) +
                     ": each of the d replicas takes an equal share of the rows");
  if (o.grid.dp > 1)
    pp::check_microbatches(B / o.grid.dp, o.microbatches, "each data-parallel replica's rows");
  else
    pp::check_microbatches(B, o.microbatches);
  const kit::GPT2Config cfg = config_of(o);
  kit::check_model_fits(cfg, o.run.data.seq_len, o.vocab);
  pp::check_blocks_fit(cfg.n_layer, shape);
  if (cfg.n_head < 1 || cfg.n_embd % cfg.n_head != 0)
    throw kit::Error("--n-head " + std::to_string(cfg.n_head) + " must divide n_embd " + std::to_string(cfg.n_embd));
  try {
    kit::tp::check_divisible(cfg, o.grid.tp);  // names the size and the t that fit
  } catch (const kit::Error& e) {
    throw kit::Error("--tp " + std::to_string(o.grid.tp) + " must divide the heads, the width and --vocab-size: " +
                     e.what());
  }
  if (!o.init_from.empty() && !std::filesystem::exists(o.init_from))
    throw kit::Error("--init-from " + o.init_from + " does not exist: give a checkpoint written by train, "
                     "train_parallel --save or convert_checkpoint");
  if (!o.trace.empty()) kit::check_trace_paths(o.trace, world_size);
  pp::Schedules schedules;
  if (!o.schedule_file.empty()) {
    schedules = pp::read_schedules_file(o.schedule_file, o.grid.pp, "--schedule-file");
  } else {
    pp::check_shape(kind, shape);
    schedules = pp::make_schedule(kind, shape);
  }
  if (o.precheck) pp::simulate(schedules, shape);
  if (o.backend == "nccl") pp::check_in_order_delivery(schedules, shape);
  return schedules;
}

nlohmann::json bytes_json(const kit::tp::ParameterBytes& b) {
  return {{"blocks", b.blocks}, {"embeddings", b.embeddings}, {"other", b.other}, {"total", b.total()}};
}

int worker_main(const ParallelOptions& o, const kit::WorldInfo& world);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT-2 trained on a grid of processes (Megatron-LM's PTD-P): --dp data-parallel replicas of a "
               "--pp-stage pipeline (GPipe, 1F1B or interleaved 1F1B over the micro-batches of each synthetic "
               "batch) whose stages are split --tp ways by tensor parallelism, then one AdamW or ZeRO step."};
  ParallelOptions o;
  int dp = 1, pp = 1, tp = 1;
  app.add_option("--dp", dp, "Data-parallel degree d")->capture_default_str();
  app.add_option("--pp", pp, "Pipeline-parallel degree p (stages, one per rank of a pipeline)")->capture_default_str();
  app.add_option("--tp", tp, "Tensor-parallel degree t (consecutive ranks: keep it within a node)")
      ->capture_default_str();
  for (const char* name : {"--world-size", "--stages"})
    kit::refuse_option(app, name,
                       "train_parallel takes its processes as the grid --dp, --pp and --tp: a pipeline of p ranks is "
                       "--pp p");
  app.add_option("--schedule", o.schedule, "gpipe, 1f1b or interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "pipedream-flush", "interleaved"}))
      ->capture_default_str();
  kit::add_microbatches_option(app, o.microbatches,
                               "Micro-batches m per data-parallel replica (0: p, the fewest that fill the "
                               "pipeline; must divide the replica's rows; interleaved: a multiple of p)");
  app.add_option("--virtual", o.virtual_chunks, "Model chunks v per rank (interleaved only; v*p stages)")
      ->capture_default_str();
  app.add_option("--optimizer", o.optimizer,
                 "Over each data-parallel group: adamw (the gradients averaged, then AdamW), zero1 (ZeRO-1: the "
                 "optimizer state sharded d ways), zero2 (ZeRO-2: the gradients kept between steps too) or zero3 "
                 "(FSDP, --dp alone: the parameters too, gathered unit by unit)")
      ->capture_default_str();
  app.add_flag("--zero", o.zero, "The same as --optimizer zero1");
  app.add_flag("--recompute", o.recompute,
               "Activation recomputation (Problem 6.3): each stage keeps only its blocks' inputs and runs every "
               "block's forward again in the backward (about a third more compute, far less memory kept)");
  kit::SyntheticHelp help;
  help.n_layer = "Transformer blocks (default: the preset's); at least v*p";
  help.batch_size = "Rows of the global batch (a multiple of d*m)";
  help.vocab = "Vocabulary of the synthetic tokens (t must divide it)";
  kit::add_model_options(app, o, help);
  app.add_option("--n-head", o.n_head, "Attention heads (default: the preset's); t must divide it");
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  app.add_option("--init-from", o.init_from, "Start from this whole-model checkpoint instead of --seed's weights");
  kit::add_process_options(app, o);
  app.add_flag("--memory", o.memory,
               "Count what each batch's schedule keeps alive per rank, sampled before each action (kept) and at "
               "its peak, in tensor bytes on the rank's device (kit/memory.h): metrics and --timeline JSON");
  app.add_option("--timeline", o.timeline, "Write this rank's measured timeline of the last batch as JSON here "
                                           "({rank} replaced, else .rank<r> added)");
  kit::add_trace_option(app, o.trace, "pipeline schedule over the timed steps",
                        "F/B events with their P2P receives, one track per rank");
  app.add_option("--save", o.save, "Write the whole trained model here (gathered on rank 0; the one-process "
                                   "checkpoint format, read by train --init, kit::import_checkpoint and torch.load)");
  kit::refuse_option(app, "--save-checkpoint", "train_parallel gathers the whole model into --save FILE");
  app.add_option("--save-ranks", o.save_ranks,
                 "Tests: write DIR/rank<r>.pt with gradients after the first batch, parameters after --steps "
                 "steps, the losses and the timeline");
  app.add_option("--schedule-file", o.schedule_file,
                 "Run these per-rank action lists instead of the built schedule: JSON {\"schedules\": "
                 "[[{\"op\": \"F\", \"microbatch\": 0, \"chunk\": 0}, ...], ...]}");
  app.add_flag("!--no-precheck", o.precheck,
               "Do not replay the schedule in the simulator before running (a schedule that cannot finish "
               "then fails with a timeout, KIT_DIST_TIMEOUT)");
  app.add_option("--fail-rank", o.fail_rank, "Tests: this rank throws before its --fail-at-action'th action")
      ->capture_default_str();
  app.add_option("--fail-at-action", o.fail_at_action, "Tests: see --fail-rank (index in the first batch)")
      ->capture_default_str();
  app.footer("Metrics per rank (--out): tokens_per_sec (the global batch's, the job's rate), losses (the global "
             "batch's), step seconds, comm_seconds_per_step {data, tensor, pipeline, embedding}, the pipeline's "
             "messages, peak_kept and memory, the rank's grid coordinates; bytes per rank counted from the tensors: "
             "parameter_bytes, gradient_bytes (kept between steps), gradient_peak_bytes (before the step), "
             "optimizer_state_bytes, activation_bytes, peak_tensor_bytes, rss_forward_rise_bytes and peak_rss_bytes, "
             "beside formula_bytes (fp32 AdamW: 4P + 4P + 8P for adamw, 4P + 4P + 8P/d for zero1, 4P + 12P/d for "
             "zero2, 16P/d for zero3; with --precision bf16 the ZeRO stages keep bf16 parameters and gradients and an "
             "fp32 master: 2P + 2P + 12P/d, 2P + 14P/d, 16P/d); the data group's traffic per step (send_bytes for "
             "ZeRO's ring, all_reduce_bytes for adamw) against all-reduce's 2(d-1)/d x 4P (zero3: 3(d-1)/d x 4P).");
  return kit::guarded_main(argc, argv, app, [&] {
    o.grid = {dp, pp, tp};
    if (o.microbatches == 0) o.microbatches = pp;
    if (o.zero && app.count("--optimizer") == 0) o.optimizer = "zero1";
    // Under srun or torchrun, checked_schedules names the grid that does not fit the world.
    return kit::run_ranks(0, o.grid.world(), o.port, "ranks of the grid " + o.grid.str(),
                          [&] { checked_schedules(o, o.grid.world()); },  // a bad flag fails before any process
                          [&](const kit::WorldInfo& w) { return worker_main(o, w); });
  });
}

namespace {

// What the trainer's hooks count, every step: the bytes a batch's schedule keeps (sampled
// before each action, so what the schedule holds, not the transients inside one forward or
// backward) above what the rank held when it started (at m = 1, before the backward: what the
// forward saved for it, activation_bytes), the process's resident memory likewise, and the
// gradients held before the optimizer step. --memory: the kept bytes and the peak of the timed
// batches, the gradients zeroed in place (re-allocated ones would count as memory a batch keeps).
struct MemoryProbe {
  torch::Device device;
  bool counts_tensors = true;  // kit::memory counts this device's tensors
  pp::BatchMemory most;        // --memory, the timed batches
  int64_t activation = 0, rss_rise = 0, gradient_peak = 0;  // every batch
  int64_t base = 0, rss0 = 0;

  void hook(kit::grid::StepHooks& h, const kit::zero::DataParallelOptimizer& optimizer, bool timed_memory) {
    h.before_schedule = [this, timed_memory] {
      base = kit::memory::bytes_now(device);
      rss0 = kit::memory::rss_bytes();
      if (timed_memory) kit::memory::reset_peak(device);
    };
    h.before_action = [this, timed_memory](size_t, const pp::Action&) {
      const int64_t kept = kit::memory::bytes_now(device) - base;
      activation = std::max(activation, kept);
      rss_rise = std::max(rss_rise, kit::memory::rss_bytes() - rss0);
      if (timed_memory) most.kept = std::max(most.kept, kept);
    };
    if (timed_memory)
      h.after_schedule = [this] { most.peak = std::max(most.peak, kit::memory::bytes_peak(device) - base); };
    h.after_backward = [this, &optimizer] { gradient_peak = std::max(gradient_peak, optimizer.gradient_bytes_held()); };
  }
};

// --fail-rank: this rank throws before its --fail-at-action'th action of the first batch.
pp::OnAction failure_of(const ParallelOptions& o, int rank) {
  if (rank != o.fail_rank) return {};
  return [&o, rank](size_t k, const pp::Action& a) {
    if (static_cast<int64_t>(k) == o.fail_at_action)
      throw kit::Error("rank " + std::to_string(rank) + " fails on purpose before action " + std::to_string(k) +
                       " (" + pp::to_string(a) + ") (--fail-rank " + std::to_string(rank) + " --fail-at-action " +
                       std::to_string(o.fail_at_action) + ")");
  };
}

// The hooks of step k: the probe (--memory on timed batches), the failure on the first, in order.
kit::grid::StepHooks hooks_of(const ParallelOptions& o, int rank, int64_t k, bool timed, MemoryProbe& probe,
                              const kit::zero::DataParallelOptimizer& optimizer) {
  kit::grid::StepHooks h;
  const bool memory = o.memory && probe.counts_tensors;
  probe.hook(h, optimizer, memory && timed);
  h.zero_in_place = memory;  // every batch, so that the timed ones start alike
  const pp::OnAction fail = k == 0 ? failure_of(o, rank) : pp::OnAction();
  if (fail) {
    const pp::OnAction sample = h.before_action;
    h.before_action = [sample, fail](size_t i, const pp::Action& a) {
      if (sample) sample(i, a);
      fail(i, a);
    };
  }
  return h;
}

void put_parameters(c10::Dict<std::string, torch::Tensor>& saved, const kit::grid::Trainer3D& trainer,
                    const std::string& what) {
  for (const auto& c : trainer.chunks())
    for (const auto& [name, p] : c->named_model_parameters()) {
      const torch::Tensor t = what == "grad/" ? (p.grad().defined() ? p.grad() : torch::zeros_like(p)) : p;
      saved.insert(what + name, t.detach().cpu().clone());
    }
}

// Problem 5's fields: this rank's bytes as the ZeRO paper counts them beside those measured
// from its tensors, and the data group's traffic per step beside all-reduce's.
nlohmann::json zero_json(const ParallelOptions& o, int64_t P, const kit::zero::DataParallelOptimizer& optimizer,
                         const MemoryProbe& probe, const kit::dist::Counters& data, double steps) {
  const int stage = kit::zero::zero_stage_of(o.optimizer);
  const bool master = kit::zero::master_weights(kit::parse_precision(o.precision), o.optimizer);
  const double n = static_cast<double>(o.grid.dp), ring = 2.0 * (n - 1) / n;
  const double ar_bytes = static_cast<double>(data.all_reduce_bytes) / steps,
               send_bytes = static_cast<double>(data.send_bytes) / steps;
  // fp32 AdamW 4 + 4 + 8 bytes per parameter, mixed precision 2 + 2 + 12 (bf16 parameters and
  // gradients, the fp32 master and moments); /n where sharded.
  const double Pd = static_cast<double>(P), w = master ? 2 : 4, K = master ? 12 : 8;
  const double f_params = (stage == 3 ? w / n : w) * Pd, f_grads = (stage >= 2 ? w / n : w) * Pd,
               f_state = (stage == 0 ? K : K / n) * Pd, p_comm = w * Pd;
  const auto counted = [&](int64_t bytes) { return probe.counts_tensors ? nlohmann::json(bytes) : nlohmann::json(); };
  const torch::Device device = probe.device;
  return {{"zero_stage", stage}, {"weight_decay", o.weight_decay}, {"parameter_count", P},
          {"gradient_bytes", optimizer.gradient_bytes()}, {"gradient_peak_bytes", probe.gradient_peak},
          {"activation_bytes", counted(probe.activation)},
          {"activation_measure",
           !probe.counts_tensors ? "not measured: " + kit::memory::why_not_counted(device)
                                 : std::string(device.is_cpu() ? "kit::memory's counting CPU allocator"
                                                               : "LibTorch's CUDA caching allocator, read by kit::memory") +
                                       ": the most tensor bytes held before any action of a batch's schedule above "
                                       "those held when it started (at m = 1 before the backward: what autograd "
                                       "saved for it, and the loss), the largest over the steps"},
          {"rss_forward_rise_bytes", probe.rss_rise},
          {"formula_bytes",
           {{"parameters", f_params}, {"gradients", f_grads}, {"optimizer_state", f_state},
            {"total", f_params + f_grads + f_state},
            {"accounting", master ? "mixed precision: 2 + 2 + 12 bytes per parameter"
                                  : "fp32: 4 + 4 + 8 bytes per parameter"}}},
          {"all_reduce_bytes_per_step", ar_bytes}, {"send_bytes_per_step", send_bytes},
          {"comm_bytes_per_step", stage == 0 ? ring * ar_bytes : send_bytes}, {"comm_bytes_counted", stage != 0},
          {"formula_all_reduce_comm_bytes_per_step", ring * p_comm},
          {"formula_comm_bytes_per_step", (stage == 3 ? 1.5 : 1.0) * ring * p_comm}};
}

int worker_main(const ParallelOptions& o, const kit::WorldInfo& world) {
  const int rank = world.rank, W = world.world_size;
  const pp::Schedules schedules = checked_schedules(o, W);
  kit::RankRun run("train_parallel", o, world);
  const torch::Device device = kit::dist::device();
  kit::memory::enable_counting(device);  // before the model: tensor bytes on the rank's device (kit/memory.h)
  const bool count_memory = kit::memory::why_not_counted(device).empty();
  const kit::GPT2Config cfg = config_of(o);
  // One parallelism alone needs none of Problem 6's grid arithmetic (Assignment 2 has none yet).
  const kit::grid::ProcessGrid grid = kit::grid::is_single_axis(o.grid) ? kit::grid::make_single_axis_grid(o.grid)
                                                                        : kit::grid::make_process_grid(o.grid);
  const auto& c = grid.coords;

  kit::grid::Options3D t;
  t.microbatches = o.microbatches;
  t.virtual_chunks = o.virtual_chunks;
  t.schedule = pp::parse_schedule_kind(o.schedule);
  t.schedules = schedules;
  t.optimizer = o.optimizer;
  t.lr = o.run.train.lr;
  t.weight_decay = o.weight_decay;
  t.precision = kit::parse_precision(o.precision);
  // The whole model from the seed (or --init-from) on every rank; each rank keeps its part.
  kit::GPT2 full = kit::build_model(cfg, o.vocab, o.run.data.seq_len, o.run.train.seed);
  if (!o.init_from.empty()) kit::import_checkpoint(*full, o.init_from);
  const kit::tp::ParameterBytes full_bytes = kit::tp::parameter_bytes(*full);
  const int64_t full_count = kit::count_parameters(*full);
  kit::grid::Trainer3D trainer(full, grid, t);
  full = nullptr;  // the trainer holds this rank's part: the whole model no longer counts as held
  for (const auto& chunk : trainer.chunks()) chunk.ptr()->set_recompute(o.recompute);
  const pp::PipelineShape& shape = trainer.pipeline_shape();
  // P: this rank's parameters, the tied weight once (the whole model's at p = t = 1).
  int64_t P = 0, blocks = 0;
  for (const auto& p : trainer.parameters()) P += p.numel();
  if (trainer.chunks().empty()) P = full_count;  // zero3: the model is FSDP's units, all of it
  kit::tp::ParameterBytes mine;  // by kind, over this rank's chunks
  for (int64_t ci = 0; ci < static_cast<int64_t>(trainer.chunks().size()); ++ci) {
    const kit::tp::ParameterBytes b = kit::tp::parameter_bytes(*trainer.chunks()[static_cast<size_t>(ci)]);
    mine.blocks += b.blocks;
    mine.embeddings += b.embeddings;
    mine.other += b.other;
    blocks += kit::blocks_per_stage(cfg.n_layer, shape.stages())[static_cast<size_t>(pp::virtual_stage(shape, c.pp, ci))];
  }
  if (rank == 0)
    std::cout << "rank 0 of " << W << " (" << world.launcher_name() << ", " << o.backend << "): grid "
              << o.grid.str() << ", " << o.schedule << ", m = " << o.microbatches << ", v = " << o.virtual_chunks
              << ", " << o.optimizer << (o.recompute ? ", recomputing activations" : "") << ", " << cfg.n_layer
              << " blocks" << std::endl;

  const int64_t B = o.run.train.batch_size, T = o.run.data.seq_len;
  const auto batches = kit::synthetic_batches(o.steps, B, T, o.vocab, o.run.train.seed);  // the same global batches
  // Dropout, after the batches (drawing them seeds the generator): each pipeline rank of each
  // replica its own masks, the same on the tensor ranks of a stage, which must drop the same
  // elements of the activations they all hold.
  torch::manual_seed(o.run.train.seed + 1 + static_cast<uint64_t>(c.dp * o.grid.pp + c.pp));
  const bool holds_loss = c.dp == 0 && c.tp == 0 && c.pp == pp::rank_of_stage(shape, shape.stages() - 1);
  const kit::StepTimer& timer = run.timer();
  MemoryProbe probe{device, count_memory};
  kit::grid::CommSeconds comm;
  kit::dist::Counters tensor, data;  // the tensor and data groups' traffic over the timed steps
  int64_t peak_tensor_bytes = 0, peak_kept = 0;
  std::vector<kit::trace::Event> trace_events;  // --trace: every timed step's
  nlohmann::json timed_steps = nlohmann::json::array();
  c10::Dict<std::string, torch::Tensor> saved;  // --save-ranks
  kit::grid::StepReport r;
  run.steps(batches, rank == 0, [&](int64_t k, const kit::TokenBatch& b) {
    kit::memory::reset_peak(device);
    kit::grid::StepHooks hooks = hooks_of(o, rank, k, timer.timed(k), probe, trainer.optimizer());
    const auto probe_start = hooks.before_schedule;  // --memory resets the peak there: keep the step's so far
    hooks.before_schedule = [&, probe_start] {
      peak_tensor_bytes = std::max(peak_tensor_bytes, kit::memory::bytes_peak(device));
      probe_start();
    };
    if (k == 0 && !o.save_ranks.empty()) {
      const auto count_gradients = hooks.after_backward;
      hooks.after_backward = [&, count_gradients] {
        count_gradients();
        put_parameters(saved, trainer, "grad/");
      };
    }
    r = trainer.step(b.idx, b.labels, b.mask, hooks);
    return kit::StepOutcome(r.loss, r.seconds);  // the trainer's own clock
  }, {}, [&](int64_t k) {
    peak_tensor_bytes = std::max(peak_tensor_bytes, kit::memory::bytes_peak(device));
    peak_kept = std::max(peak_kept, r.batch.peak_kept);
    if (k == 0 && !o.save_ranks.empty()) {
      saved.insert("timeline", pp::timeline_tensor(r.batch.timeline));
      saved.insert("peak_kept", torch::tensor(r.batch.peak_kept));
    }
    if (holds_loss && !o.save_ranks.empty())
      saved.insert("loss/step" + std::to_string(k), torch::tensor(r.loss, torch::kFloat64));
    if (!timer.timed(k)) return;
    timed_steps.push_back(pp::step_json(r.batch, k));
    if (!o.trace.empty())
      for (auto& e : pp::measured_events(r.batch, rank, {o.virtual_chunks, 1}, k)) trace_events.push_back(std::move(e));
    const kit::dist::Counters tc = grid.tensor.counters();  // this step's (the trainer resets them)
    tensor.all_reduce_calls += tc.all_reduce_calls;
    tensor.all_reduce_bytes += tc.all_reduce_bytes;
    const kit::dist::Counters dc = grid.data.counters();  // the gradients' averaging, or ZeRO's ring
    data.all_reduce_bytes += dc.all_reduce_bytes;
    data.send_bytes += dc.send_bytes;
    comm.data += r.comm.data;
    comm.tensor += r.comm.tensor;
    comm.pipeline += r.comm.pipeline;
    comm.embedding += r.comm.embedding;
  });

  const nlohmann::json grid_json = {{"dp", o.grid.dp}, {"pp", o.grid.pp}, {"tp", o.grid.tp}},
                       coords = {{"dp", c.dp}, {"pp", c.pp}, {"tp", c.tp}};
  const nlohmann::json memory = pp::memory_json(o.memory, device, probe.most);
  if (!o.save_ranks.empty()) {
    put_parameters(saved, trainer, "param/");
    saved.insert("rank", torch::tensor(static_cast<int64_t>(rank)));
    saved.insert("world_size", torch::tensor(static_cast<int64_t>(W)));
    kit::write_file_atomically(o.save_ranks + "/rank" + std::to_string(rank) + ".pt", torch::pickle_save(saved),
                               "--save-ranks");
  }
  if (!o.timeline.empty()) {
    nlohmann::json j = pp::rank_timeline_json(r.batch.timeline, shape, c.pp, peak_kept);
    j["memory"] = memory;
    j["steps"] = timed_steps;
    const std::string text = j.dump(1) + "\n";
    kit::write_file_atomically(kit::rank_path(o.timeline, rank, W), {text.begin(), text.end()}, "--timeline");
  }
  if (!o.trace.empty()) {
    const bool line = o.grid.dp == 1 && o.grid.tp == 1;  // a pipeline's rank is its stage rank
    kit::write_rank_trace(o.trace, rank, W,
                          "rank " + std::to_string(rank) +
                              (line ? "" : " (dp " + std::to_string(c.dp) + ", pp " + std::to_string(c.pp) + ", tp " +
                                               std::to_string(c.tp) + ")"),
                          std::move(trace_events),
                          {{"program", "train_parallel"}, {"schedule", o.schedule}, {"grid", grid_json},
                           {"coords", coords}, {"microbatches", o.microbatches},
                           {"virtual_chunks", o.virtual_chunks}, {"steps", o.steps}, {"warmup", timer.warmup()}});
  }
  const kit::TensorDict whole = o.save.empty() ? kit::TensorDict() : trainer.gather_state_dict();
  if (!o.save.empty() && rank == 0) {
    kit::GPT2 model(cfg);
    kit::load_state_dict(*model, whole, kit::CheckpointLayout::Kit, "the gathered grid");
    kit::export_checkpoint(*model, o.save);
    std::cout << "saved the whole model to " << o.save << std::endl;
  }
  if (!o.run.out.empty()) {
    const double per = static_cast<double>(timer.timed_steps());
    const pp::P2P& p2p = trainer.p2p();
    // Megatron's count: each block all-reduces its (rows, T, C) activations twice forward and
    // twice backward over the tensor group (at t = 1 the group is one rank and sends nothing).
    const int64_t tp_formula = o.grid.tp > 1 ? 4 * blocks * (B / o.grid.dp) * T * cfg.n_embd * 4 : 0;
    const double tp_bytes = static_cast<double>(tensor.all_reduce_bytes) / per;
    // Every token of the global batch passes through every pipeline: tokens/s is the job's.
    nlohmann::json m = run.metrics(B * T);
    m.update(zero_json(o, P, trainer.optimizer(), probe, data, per));
    m.update({{"n_layer", cfg.n_layer}, {"n_head", cfg.n_head}, {"n_embd", cfg.n_embd},
              {"vocab_size", cfg.vocab_size}, {"dp", o.grid.dp}, {"pp", o.grid.pp}, {"tp", o.grid.tp},
              {"coords", coords}, {"schedule", o.schedule}, {"microbatches", o.microbatches},
              {"virtual_chunks", o.virtual_chunks}, {"stages", shape.stages()}, {"optimizer", o.optimizer},
              {"zero", o.optimizer != "adamw"},
              {"master_weights", kit::zero::master_weights(kit::parse_precision(o.precision), o.optimizer)},
              {"recompute", o.recompute}, {"global_batch_size", B}, {"batch_size_per_rank", B / o.grid.dp},
              {"tokens_per_sec_summed_over_ranks", true}, {"losses", run.losses()},
              {"comm_seconds_per_step",
               {{"data", comm.data / per}, {"tensor", comm.tensor / per}, {"pipeline", comm.pipeline / per},
                {"embedding", comm.embedding / per}}},
              {"peak_kept", peak_kept}, {"messages_sent", p2p.messages_sent()},
              {"messages_received", p2p.messages_received()}, {"recv_seconds", p2p.recv_seconds()},
              {"memory", memory}, {"parameter_bytes", trainer.optimizer().parameter_bytes()},
              {"parameter_bytes_by_kind", bytes_json(mine)}, {"full_parameter_bytes", bytes_json(full_bytes)},
              {"blocks_fraction", full_bytes.blocks > 0 ? static_cast<double>(mine.blocks) / full_bytes.blocks : 0.0},
              {"tensor_parallel", o.grid.tp},
              {"tp_all_reduce_calls_per_step", static_cast<double>(tensor.all_reduce_calls) / per},
              {"tp_all_reduce_bytes_per_step", tp_bytes}, {"tp_comm_seconds_per_step", comm.tensor / per},
              {"formula_all_reduce_bytes_per_step", tp_formula},
              {"non_block_all_reduce_bytes_per_step", tp_bytes - static_cast<double>(tp_formula)},
              {"optimizer_state_bytes", trainer.optimizer().state_bytes()},
              {"peak_tensor_bytes", count_memory ? nlohmann::json(peak_tensor_bytes) : nlohmann::json()},
              {"peak_rss_bytes", kit::memory::peak_rss_bytes()}});
    run.write(m);
  }
  return 0;
}

}  // namespace
