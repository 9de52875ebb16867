// train_parallel: GPT-2 trained on a grid of d x p x t processes, the training program of
// Assignments 2 and 3. d-way data parallelism of a p-stage pipeline whose stages are split
// t ways by tensor parallelism (Megatron-LM's PTD-P), or whose micro-batches enter token slice
// by token slice (TeraPipe); one trainer (grid/trainer.h) runs every shape, and each problem
// is a command line of it:
//
//   ./build/train_parallel --pp 4 --schedule 1f1b --micro-batches 8       # Problem 3: a pipeline
//   ./build/train_parallel --pp 2 --schedule interleaved --virtual 2 --n-layer 4 --micro-batches 4
//   ./build/train_parallel --tp 2 --save runs/tp.pt                        # Problem 4: tensor parallel
//   ./build/train_parallel --dp 2 --optimizer zero2 --batch-size 16        # Problem 5: ZeRO-1/2 (zero1, zero2)
//   ./build/train_parallel --dp 2 --optimizer zero3 --batch-size 16        # Problem 5.5: FSDP
//   ./build/train_parallel --pp 2 --chunks 1 --slices uniform:4            # Problem 7: TeraPipe
//   ./build/train_parallel --pp 2 --chunks 1 --profile runs/latency.json   # its stage's t(l, c), then
//   ./build/train_parallel --pp 2 --chunks 1 --slices dp --latency runs/latency.json
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
#include "grid/measure.h"
#include "grid/trainer.h"
#include "kit/memory.h"
#include "kit/precision.h"
#include "kit/threads.h"
#include "model/checkpoint.h"
#include "model/gpt2.h"
#include "pipeline/model_parallel.h"
#include "pipeline_training/measured.h"
#include "pipeline_training/schedules.h"
#include "pipeline_training/simulate.h"
#include "pipeline_training/trace_events.h"
#include "tensor_parallel/model.h"
#include "tensor_parallel/sharding.h"
#include "terapipe/latency.h"
#include "terapipe/pipeline.h"
#include "terapipe/slicing.h"
#include "train/adamw.h"
#include "zero/data_parallel_optimizer.h"

namespace {
namespace pp = kit::pp;

struct ParallelOptions : kit::SyntheticOptions {
  ParallelOptions() : SyntheticOptions("runs/parallel/{world}/rank{rank}.json") { steps = 5; }
  kit::grid::GridShape grid{1, 1, 1};
  int64_t microbatches = 0;  // --chunks; 0: p, the fewest that fill the pipeline
  bool microbatches_given = false;  // --chunks was not 0 (its errors say where m came from)
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
  // Problem 7, TeraPipe: --slices cuts each micro-batch's sequence into token slices.
  std::string slices;          // empty: the micro-batches go whole
  std::string latency;         // a --profile file (for --slices dp and the predictions)
  std::string profile;         // measure one stage's latency, write it here and exit
  bool print_slicing = false;  // print the slicing (and its predicted time) and exit
  int profile_repeats = 3;
  int64_t n_positions = 0;     // 0: the preset's
};

kit::GPT2Config config_of(const ParallelOptions& o) {
  kit::GPT2Config cfg = kit::synthetic_config(o);  // gpt2 keeps its 50257 rows, the others take --vocab-size
  if (o.n_head > 0) cfg.n_head = o.n_head;
  if (o.n_positions > 0) cfg.n_positions = o.n_positions;
  return cfg;
}

// Flags that `mode` has no use for: the first one given is an error naming it and the fix.
void refuse_flags(const std::vector<std::pair<bool, const char*>>& given, const std::string& why) {
  for (const auto& [is_given, flag] : given)
    if (is_given) throw kit::Error(std::string(flag) + " " + why);
}

// --optimizer zero3 (FSDP) shards whole GPT-2 units and runs the model's forward through them:
// no stages to split, save or trace.
void check_zero3_options(const ParallelOptions& o) {
  if (o.grid.pp != 1 || o.grid.tp != 1)
    throw kit::Error("--optimizer zero3 (FSDP) gathers whole GPT-2 units, which --pp and --tp split: run it with "
                     "--dp alone (--pp 1 --tp 1), or use adamw, zero1 or zero2 on the grid " + o.grid.str());
  refuse_flags({{o.recompute, "--recompute"}, {!o.save.empty(), "--save"}, {!o.save_ranks.empty(), "--save-ranks"},
                {!o.timeline.empty(), "--timeline"}, {!o.trace.empty(), "--trace"},
                {!o.schedule_file.empty(), "--schedule-file"}, {!o.slices.empty(), "--slices"}},
               "works on the pipeline's stages, which --optimizer zero3 does not have (FSDP runs the whole model's "
               "forward): use adamw, zero1 or zero2 with it");
}

// TeraPipe's slice lengths for --slices at K = p stages (dp: its program on --latency's model).
std::vector<int64_t> slicing_of(const ParallelOptions& o) {
  return kit::terapipe::slicing_from_spec(o.slices, o.run.data.seq_len, o.grid.pp, [&] {
    if (o.latency.empty())
      throw kit::Error("--slices dp needs a latency model: measure one with --profile FILE (same model and "
                       "--seq-len), then pass --latency FILE");
    return kit::terapipe::read_latency_model(o.latency).latency();
  });
}

// The pipeline time the latency model predicts for the slicing: m * sum + (K - 1) * max.
double predicted_seconds(const ParallelOptions& o, const std::vector<int64_t>& lengths,
                         const kit::terapipe::LatencyModel& latency) {
  const kit::terapipe::Slicing s = kit::terapipe::evaluate(lengths, o.run.data.seq_len, latency.latency());
  return static_cast<double>(o.microbatches) * s.sum + static_cast<double>(o.grid.pp - 1) * s.max;
}

// --slices: TeraPipe's schedule (GPipe's order, slice by slice) on Problem 3's stages.
// (The slicing itself is checked where it is made: the schedules, --print-slicing.)
void check_slices_options(const ParallelOptions& o) {
  refuse_flags({{o.grid.tp != 1, "--tp"}, {o.schedule != "gpipe", "--schedule"}, {o.recompute, "--recompute"},
                {!o.schedule_file.empty(), "--schedule-file"}, {o.virtual_chunks != 1, "--virtual"}},
               "does not go with --slices, which runs TeraPipe's own schedule (GPipe's order, slice by slice) on "
               "Problem 3's stages: leave it out");
}

// Every check that needs no process, the same in the launcher and in each worker (srun):
// a bad flag or a schedule that cannot finish fails here, not as a timeout later. Returns
// every pipeline rank's actions.
pp::Schedules checked_schedules(const ParallelOptions& o, int world_size) {
  kit::grid::check_shape(o.grid, world_size);
  if (o.microbatches < 1)
    throw kit::Error("--chunks " + std::to_string(o.microbatches) +
                     ": give the number of micro-batches m, at least 1 (or 0, the default: m = p)");
  kit::check_adamw_flags(o.run.train.lr, o.weight_decay);
  const int stage = kit::zero::zero_stage_of(o.optimizer);
  if (stage < 0) throw kit::Error("--optimizer " + o.optimizer + " is not one of adamw, zero1, zero2, zero3");
  if (o.zero && o.optimizer != "zero1")
    throw kit::Error("--zero is --optimizer zero1, but --optimizer " + o.optimizer + " was given too: give one of them");
  if (stage == 3) check_zero3_options(o);
  kit::check_synthetic_options(o);
  if (!o.slices.empty()) check_slices_options(o);
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
  const kit::GPT2Config cfg = config_of(o);
  if (o.run.data.seq_len > cfg.n_positions)
    throw kit::Error("--seq-len " + std::to_string(o.run.data.seq_len) + " is longer than the model's context (" +
                     std::to_string(cfg.n_positions) + " positions): pass --n-positions " +
                     std::to_string(o.run.data.seq_len));
  kit::check_model_fits(cfg, o.run.data.seq_len, o.vocab);
  if (!o.print_slicing) pp::check_blocks_fit(cfg.n_layer, shape);
  try {  // after the blocks: --pp p with too few layers is said as that, not as p micro-batches
    if (o.grid.dp > 1)
      pp::check_microbatches(B / o.grid.dp, o.microbatches, "each data-parallel replica's rows");
    else
      pp::check_microbatches(B, o.microbatches);
  } catch (const kit::Error& e) {
    if (o.microbatches_given) throw;
    throw kit::Error(std::string(e.what()) + " (--chunks was not given: m is p = " + std::to_string(o.grid.pp) + ")");
  }
  if (cfg.n_head < 1 || cfg.n_embd % cfg.n_head != 0)
    throw kit::Error("--n-head " + std::to_string(cfg.n_head) + " must divide n_embd " + std::to_string(cfg.n_embd));
  try {
    kit::tp::check_divisible(cfg, o.grid.tp);  // names the size and the t that fit
  } catch (const kit::Error& e) {
    throw kit::Error("--tp " + std::to_string(o.grid.tp) + " must divide the heads, the width and the vocabulary "
                     "(--vocab-size; a preset's own, as gpt2's 50257, stays): " + e.what());
  }
  if (!o.init_from.empty() && !std::filesystem::exists(o.init_from))
    throw kit::Error("--init-from " + o.init_from + " does not exist: give a checkpoint written by train, "
                     "train_parallel --save or convert_checkpoint");
  if (!o.trace.empty()) kit::check_trace_paths(o.trace, world_size);
  if (!o.profile.empty() || o.print_slicing) return {};  // no training run
  pp::Schedules schedules;
  pp::PipelineShape units = shape;  // TeraPipe: m·n units of (micro-batch, slice)
  if (!o.schedule_file.empty()) {
    schedules = pp::read_schedules_file(o.schedule_file, o.grid.pp, "--schedule-file");
  } else if (!o.slices.empty()) {
    const int64_t n = static_cast<int64_t>(slicing_of(o).size());
    units.microbatches *= n;
    for (int64_t r = 0; r < o.grid.pp; ++r) schedules.push_back(kit::terapipe::make_sliced_schedule(units, n, r));
  } else if (shape.stages() == 1) {  // no pipeline: given code, no Problem 3.1 function
    schedules = {pp::one_stage_schedule(kind, shape.microbatches)};
  } else {
    pp::check_shape(kind, shape);
    schedules = pp::make_schedule(kind, shape);
  }
  if (o.precheck) pp::simulate(schedules, units);
  if (o.backend == "nccl") pp::check_in_order_delivery(schedules, units);
  return schedules;
}

nlohmann::json bytes_json(const kit::tp::ParameterBytes& b) {
  return {{"blocks", b.blocks}, {"embeddings", b.embeddings}, {"other", b.other}, {"total", b.total()}};
}

int print_slicing_main(const ParallelOptions& o);
int profile_main(const ParallelOptions& o);
int worker_main(const ParallelOptions& o, const kit::WorldInfo& world);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT-2 trained on a grid of processes (Megatron-LM's PTD-P): --dp data-parallel replicas of a "
               "--pp-stage pipeline (GPipe, 1F1B or interleaved 1F1B over the micro-batches of each synthetic "
               "batch, or TeraPipe's token slices with --slices) whose stages are split --tp ways by tensor "
               "parallelism, then one AdamW or ZeRO step (ZeRO-3, FSDP, with --dp alone)."};
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
  help.vocab = "Vocabulary of the synthetic tokens and of the model (gpt2 keeps its 50257 rows); t must divide the model's";
  kit::add_model_options(app, o, help);
  app.add_option("--n-head", o.n_head, "Attention heads (default: the preset's); t must divide it");
  app.add_option("--weight-decay", o.weight_decay, "AdamW's decoupled weight decay")->capture_default_str();
  app.add_option("--init-from", o.init_from, "Start from this whole-model checkpoint instead of --seed's weights");
  app.add_option("--n-positions", o.n_positions, "Context of the model (default: the preset's); at least --seq-len");
  app.add_option("--slices", o.slices,
                 "TeraPipe (Problem 7): cut each micro-batch's sequence into token slices that enter the pipeline "
                 "one after another: none (one slice), uniform:N, dp (TeraPipe's program on --latency) or lengths "
                 "a+b+c; its own schedule, GPipe's order slice by slice, --tp 1");
  app.add_option("--latency", o.latency, "A latency model written by --profile (for --slices dp and predictions)");
  app.add_option("--profile", o.profile,
                 "Measure t(l, c) of one stage (of --pp) in this process, fit it, write it here, exit");
  app.add_flag("--print-slicing", o.print_slicing,
               "Print the slicing --slices gives at --pp stages (and its predicted time with --latency) as JSON; exit");
  app.add_option("--profile-repeats", o.profile_repeats, "Timings per (l, c) in --profile (their median)")
      ->capture_default_str();
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
             "ZeRO's ring, all_reduce_bytes for adamw) against all-reduce's 2(d-1)/d x 4P (zero3: 3(d-1)/d x 4P); "
             "pipeline_seconds, unit_compute_seconds and the last step's timeline; with --slices the slicing, its "
             "lengths and (with --latency) predicted_seconds.");
  return kit::guarded_main(argc, argv, app, [&] {
    o.grid = {dp, pp, tp};
    o.microbatches_given = o.microbatches != 0;
    if (o.microbatches == 0) o.microbatches = pp;
    if (o.zero && app.count("--optimizer") == 0) o.optimizer = "zero1";
    if (!o.slices.empty() && app.count("--schedule") == 0) o.schedule = "gpipe";  // TeraPipe's order
    if (o.print_slicing) return print_slicing_main(o);
    if (!o.profile.empty()) return profile_main(o);
    // Under srun or torchrun, checked_schedules names the grid that does not fit the world.
    return kit::run_ranks(0, o.grid.world(), o.port, "ranks of the grid " + o.grid.str(),
                          [&] { checked_schedules(o, o.grid.world()); },  // a bad flag fails before any process
                          [&](const kit::WorldInfo& w) { return worker_main(o, w); });
  });
}

namespace {

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
kit::grid::StepHooks hooks_of(const ParallelOptions& o, int rank, int64_t k, bool timed,
                              kit::grid::MemoryProbe& probe, const kit::zero::DataParallelOptimizer& optimizer) {
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

int print_slicing_main(const ParallelOptions& o) {
  checked_schedules(o, o.grid.world());
  const std::vector<int64_t> lengths = slicing_of(o);
  nlohmann::json j = {{"stages", o.grid.pp}, {"seq_len", o.run.data.seq_len}, {"slicing", o.slices}, {"lengths", lengths}};
  if (!o.latency.empty())
    j["predicted_seconds"] = predicted_seconds(o, lengths, kit::terapipe::read_latency_model(o.latency));
  std::cout << j.dump() << std::endl;
  return 0;
}

// TeraPipe's latency model t(l, c) of one stage (the first of --pp), measured in this process.
int profile_main(const ParallelOptions& o) {
  checked_schedules(o, o.grid.world());
  kit::set_threads(o.run.train.threads);
  const kit::GPT2Config cfg = config_of(o);
  kit::GPT2 model = kit::build_model(cfg, o.vocab, o.run.data.seq_len, o.run.train.seed);
  const int64_t L = o.run.data.seq_len, blocks = kit::blocks_per_stage(cfg.n_layer, o.grid.pp).front();
  const int64_t rows = o.run.train.batch_size / o.microbatches;
  const kit::terapipe::StageProfile profile = kit::terapipe::profile_stage(*model, blocks, rows, L, o.profile_repeats);
  std::cout << profile.fit.to_string() << " over " << profile.samples.size() << " samples; fit error: rms "
            << 100 * profile.error.rms_relative << " %, max " << 100 * profile.error.max_relative << " %" << std::endl;
  const nlohmann::json j = kit::terapipe::latency_file_json(
      profile, {{"program", "train_parallel"}, {"preset", o.run.preset}, {"n_layer", cfg.n_layer},
                {"n_embd", cfg.n_embd}, {"n_head", cfg.n_head}, {"stages", o.grid.pp}, {"blocks", blocks},
                {"seq_len", L}, {"rows", rows}, {"threads", o.run.train.threads}});
  const std::string text = j.dump(1) + "\n";
  kit::write_file_atomically(o.profile, std::vector<char>(text.begin(), text.end()), "--profile");
  std::cout << "wrote " << o.profile << std::endl;
  return 0;
}

// Problem 7's fields: the slicing (null without --slices) and what --latency predicts for it.
nlohmann::json slicing_json(const ParallelOptions& o, const std::vector<int64_t>& lengths) {
  const kit::terapipe::LatencyModel latency =
      o.latency.empty() ? kit::terapipe::LatencyModel{} : kit::terapipe::read_latency_model(o.latency);
  const bool predicts = !o.latency.empty() && !lengths.empty();
  return {{"slicing", o.slices.empty() ? nlohmann::json() : nlohmann::json(o.slices)},
          {"lengths", lengths.empty() ? nlohmann::json() : nlohmann::json(lengths)},
          {"predicted_seconds", predicts ? nlohmann::json(predicted_seconds(o, lengths, latency)) : nlohmann::json()},
          {"latency_model", o.latency.empty() ? nlohmann::json() : kit::terapipe::to_json(latency)}};
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
  if (!o.slices.empty()) t.slices = slicing_of(o);
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
              << ", " << o.optimizer << (o.recompute ? ", recomputing activations" : "")
              << (t.slices.empty() ? "" : ", slices " + kit::terapipe::to_string(t.slices)) << ", " << cfg.n_layer
              << " blocks" << std::endl;

  const int64_t B = o.run.train.batch_size, T = o.run.data.seq_len;
  const auto batches = kit::synthetic_batches(o.steps, B, T, o.vocab, o.run.train.seed);  // the same global batches
  // Dropout, after the batches (drawing them seeds the generator): each pipeline rank of each
  // replica its own masks, the same on the tensor ranks of a stage, which must drop the same
  // elements of the activations they all hold.
  torch::manual_seed(o.run.train.seed + 1 + static_cast<uint64_t>(c.dp * o.grid.pp + c.pp));
  const bool holds_loss = c.dp == 0 && c.tp == 0 && c.pp == pp::rank_of_stage(shape, shape.stages() - 1);
  const kit::StepTimer& timer = run.timer();
  kit::grid::MemoryProbe probe{device, count_memory};
  kit::grid::PipelineTimes times(shape.microbatches);
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
    times.add(r.batch, timer.timed(k));
    if (k == 0 && !o.save_ranks.empty()) {
      saved.insert("timeline", pp::timeline_tensor(r.batch.timeline));
      saved.insert("peak_kept", torch::tensor(r.batch.peak_kept));
    }
    if (holds_loss && !o.save_ranks.empty())
      saved.insert("loss/step" + std::to_string(k), torch::tensor(r.loss, torch::kFloat64));
    if (!timer.timed(k)) return;
    timed_steps.push_back(pp::step_json(r.batch, k));
    if (!o.trace.empty())
      for (auto& e : pp::measured_events(r.batch, rank, {o.virtual_chunks, std::max<int64_t>(1, t.slices.size())}, k))
        trace_events.push_back(std::move(e));
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
                           {"virtual_chunks", o.virtual_chunks}, {"slicing", o.slices}, {"lengths", t.slices},
                           {"steps", o.steps}, {"warmup", timer.warmup()}});
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
    m.update(kit::grid::zero_metrics({o.optimizer, kit::parse_precision(o.precision), o.grid.dp, o.weight_decay, P},
                                     trainer.optimizer(), probe, data, per));
    m.update(times.json(r.batch, timer.warmup()));
    m.update(slicing_json(o, t.slices));
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
